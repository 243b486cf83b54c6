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
	labels, err := k.fetch()
	k.fetched = k.now()
	if err != nil {
		k.logger.Warn("pod labels unavailable; label rules fall back to namespaces", "err", err)
		return l, ok
	}
	k.labels = labels
	l, ok = labels[key]
	return l, ok
}

// podList is the part of a v1.PodList this needs.
type podList struct {
	Items []struct {
		Metadata struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
	} `json:"items"`
}

func (k *KubeletPods) fetch() (map[string]map[string]string, error) {
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
	var pl podList
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&pl); err != nil {
		return nil, fmt.Errorf("decode pod list: %w", err)
	}
	out := make(map[string]map[string]string, len(pl.Items))
	for _, p := range pl.Items {
		out[p.Metadata.Namespace+"/"+p.Metadata.Name] = p.Metadata.Labels
	}
	return out, nil
}
