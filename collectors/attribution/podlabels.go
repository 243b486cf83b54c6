package attribution

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// PodLabelsConfig says where pod labels come from: the kubelet's /pods
// endpoint on the same node (PodResources carries no labels). The kubelet
// authenticates with the collector's service-account token.
type PodLabelsConfig struct {
	URL                string        // e.g. https://127.0.0.1:10250/pods
	TokenFile          string        // bearer token; empty sends none (read-only port)
	CAFile             string        // kubelet serving CA; empty uses the system pool
	InsecureSkipVerify bool          // kubelets often serve self-signed certificates
	Refresh            time.Duration // how long a pod list is reused
	Timeout            time.Duration
}

// DefaultPodLabelsConfig is the in-cluster default, URL left to the caller.
func DefaultPodLabelsConfig() PodLabelsConfig {
	return PodLabelsConfig{
		TokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token",
		Refresh:   30 * time.Second,
		Timeout:   5 * time.Second,
	}
}

// Validate reports every problem.
func (c PodLabelsConfig) Validate() error {
	var errs []error
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("pod labels url %q: want http(s)://host:port/pods", c.URL))
	}
	if c.Refresh < time.Second {
		errs = append(errs, fmt.Errorf("pod labels refresh %s: at least 1s", c.Refresh))
	}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("pod labels timeout: must be positive"))
	}
	return errors.Join(errs...)
}

// KubeletPods reads pod labels from the kubelet's pod list, cached for
// Refresh; a pod it does not know triggers at most one early refresh per
// second, so a burst of new pods costs one request.
type KubeletPods struct {
	cfg    PodLabelsConfig
	client *http.Client
	logger *slog.Logger
	now    func() time.Time

	mu      sync.Mutex
	labels  map[string]map[string]string // namespace/name → labels
	pods    []PodMeta
	fetched time.Time
}

// NewKubeletPods checks the config and builds the HTTP client.
func NewKubeletPods(cfg PodLabelsConfig, logger *slog.Logger) (*KubeletPods, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tlsCfg := &tls.Config{InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // operator's explicit choice
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("pod labels ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("pod labels ca %s: no certificate found", cfg.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	return &KubeletPods{
		cfg:    cfg,
		client: &http.Client{Timeout: cfg.Timeout, Transport: &http.Transport{TLSClientConfig: tlsCfg}},
		logger: logger.With("component", "pod-labels"),
		now:    time.Now,
	}, nil
}

// PodLabels returns a pod's labels, refreshing the list when it is stale or
// does not hold the pod. A failed refresh keeps the last list (logged).
func (k *KubeletPods) PodLabels(namespace, name string) (map[string]string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := namespace + "/" + name
	l, ok := k.labels[key]
	age := k.now().Sub(k.fetched)
	if (ok && age < k.cfg.Refresh) || (!ok && age < time.Second) {
		return l, ok
	}
	if err := k.refresh(); err != nil {
		k.logger.Warn("pod labels unavailable; label rules fall back to namespaces", "err", err)
		return l, ok
	}
	l, ok = k.labels[key]
	return l, ok
}

// Pods lists the node's pods with their annotations (HAMi's allocation),
// refreshing the list when it is stale. A failed refresh returns the last
// list with the error.
func (k *KubeletPods) Pods(context.Context) ([]PodMeta, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pods != nil && k.now().Sub(k.fetched) < k.cfg.Refresh {
		return k.pods, nil
	}
	err := k.refresh()
	return k.pods, err
}

// refresh fetches the pod list; the caller holds k.mu. A failure keeps
// the last list.
func (k *KubeletPods) refresh() error {
	pods, err := k.fetch()
	k.fetched = k.now()
	if err != nil {
		return err
	}
	k.pods = pods
	k.labels = make(map[string]map[string]string, len(pods))
	for _, p := range pods {
		k.labels[p.Namespace+"/"+p.Name] = p.Labels
	}
	return nil
}

// PodMeta is what attribution reads of a pod beside its devices.
type PodMeta struct {
	Namespace, Name string
	Phase           string // Pending, Running, Succeeded, Failed, Unknown
	Labels          map[string]string
	Annotations     map[string]string
}

// PodLister lists this node's pods.
type PodLister interface {
	Pods(ctx context.Context) ([]PodMeta, error)
}

// podList is the part of a v1.PodList this needs.
type podList struct {
	Items []struct {
		Metadata struct {
			Name        string            `json:"name"`
			Namespace   string            `json:"namespace"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Status struct {
			Phase string `json:"phase"`
		} `json:"status"`
	} `json:"items"`
}

// DecodePodList reads a v1.PodList (the kubelet's /pods) into PodMeta.
func DecodePodList(r io.Reader) ([]PodMeta, error) {
	var pl podList
	if err := json.NewDecoder(io.LimitReader(r, 256<<20)).Decode(&pl); err != nil {
		return nil, fmt.Errorf("decode pod list: %w", err)
	}
	out := make([]PodMeta, 0, len(pl.Items))
	for _, p := range pl.Items {
		out = append(out, PodMeta{Namespace: p.Metadata.Namespace, Name: p.Metadata.Name, Phase: p.Status.Phase,
			Labels: p.Metadata.Labels, Annotations: p.Metadata.Annotations})
	}
	return out, nil
}

func (k *KubeletPods) fetch() ([]PodMeta, error) {
	ctx, cancel := context.WithTimeout(context.Background(), k.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.cfg.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("pod list request: %w", err)
	}
	if k.cfg.TokenFile != "" {
		tok, err := os.ReadFile(k.cfg.TokenFile) // re-read: projected tokens rotate
		if err != nil {
			return nil, fmt.Errorf("read token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get pod list: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return nil, fmt.Errorf("get pod list: %s", resp.Status)
	}
	return DecodePodList(resp.Body)
}
