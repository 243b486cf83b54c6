package attribution

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpumeter/gpumeter/collectors"
)

// KubeletConfig configures attribution through the kubelet's PodResources
// API.
type KubeletConfig struct {
	// Socket is the kubelet's pod-resources unix socket.
	Socket string
	// Timeout bounds one List call.
	Timeout time.Duration
	// ResourcePrefixes are the extended resources that are GPUs: the NVIDIA
	// device plugin's nvidia.com/gpu (whole GPUs, or MIG devices with the
	// "single" strategy, or time-sliced replicas) and nvidia.com/mig-<profile>.
	ResourcePrefixes []string
}

// DefaultKubeletConfig returns the kubelet's standard socket and the NVIDIA
// device plugin's resources.
func DefaultKubeletConfig() KubeletConfig {
	return KubeletConfig{
		Socket:           "/var/lib/kubelet/pod-resources/kubelet.sock",
		Timeout:          2 * time.Second,
		ResourcePrefixes: []string{"nvidia.com/gpu", "nvidia.com/mig-"},
	}
}

// Validate reports every problem with the config.
func (c KubeletConfig) Validate() error {
	var errs []error
	if c.Socket == "" {
		errs = append(errs, errors.New("socket: missing"))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout: %s is not positive", c.Timeout))
	}
	if len(c.ResourcePrefixes) == 0 {
		errs = append(errs, errors.New("resource prefixes: none"))
	}
	return errors.Join(errs...)
}

// Kubelet attributes GPUs and MIG devices to the pods the kubelet allocated
// them to (device ids are GPU or MIG UUIDs; time-slicing replicas
// "<uuid>::<n>" count as their GPU), and a device's processes to its pod
// when exactly one pod holds it. The namespace gives the tenant.
type Kubelet struct {
	cfg     KubeletConfig
	tenancy Tenancy
	conn    *grpc.ClientConn
	client  podresources.PodResourcesListerClient
}

// NewKubelet prepares the client; it connects lazily, at the first call.
func NewKubelet(cfg KubeletConfig, tenancy Tenancy) (*Kubelet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kubelet attribution: %w", err)
	}
	conn, err := grpc.NewClient("unix://"+cfg.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("kubelet attribution: client for %s: %w", cfg.Socket, err)
	}
	return &Kubelet{cfg: cfg, tenancy: tenancy, conn: conn, client: podresources.NewPodResourcesListerClient(conn)}, nil
}

// Close closes the connection.
func (k *Kubelet) Close() error { return k.conn.Close() }

// Attribute lists the pods' devices and claims the GPUs and MIG devices
// nothing claimed yet.
func (k *Kubelet) Attribute(ctx context.Context, gpus []collectors.GPUReading) error {
	if _, err := os.Stat(k.cfg.Socket); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kubelet socket %s: %w", k.cfg.Socket, collectors.ErrNoData)
	}
	ctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	resp, err := k.client.List(ctx, &podresources.ListPodResourcesRequest{})
	if err != nil {
		return fmt.Errorf("kubelet list pod resources: %w", err)
	}
	byDevice := k.index(resp)
	for gi := range gpus {
		g := &gpus[gi]
		if !g.MIG {
			if len(g.Claims) == 0 {
				g.Claims = byDevice[g.GPU.UUID]
			}
			if len(g.Claims) == 1 {
				claimProcesses(g, "", g.Claims[0])
			}
			continue
		}
		for ii := range g.Instances {
			in := &g.Instances[ii]
			if len(in.Claims) == 0 {
				in.Claims = byDevice[in.UUID]
			}
			if len(in.Claims) == 1 {
				claimProcesses(g, in.UUID, in.Claims[0])
			}
		}
	}
	return nil
}

// index maps device ids to the pods holding them.
func (k *Kubelet) index(resp *podresources.ListPodResourcesResponse) map[string][]collectors.Owner {
	out := make(map[string][]collectors.Owner)
	for _, pod := range resp.GetPodResources() {
		workload := pod.GetNamespace() + "/" + pod.GetName()
		owner := collectors.Owner{Workload: workload}
		if t, ok := k.tenancy.Pod(pod.GetNamespace(), pod.GetName()); ok {
			owner = t.owner(workload)
		}
		for _, c := range pod.GetContainers() {
			for _, dev := range c.GetDevices() {
				if !k.isGPUResource(dev.GetResourceName()) {
					continue
				}
				for _, id := range dev.GetDeviceIds() {
					id = deviceUUID(id)
					if !containsOwner(out[id], owner) {
						out[id] = append(out[id], owner)
					}
				}
			}
		}
	}
	return out
}

func (k *Kubelet) isGPUResource(name string) bool {
	for _, p := range k.cfg.ResourcePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// deviceUUID strips the replica suffix the device plugin gives time-sliced
// GPUs ("GPU-…::3").
func deviceUUID(id string) string {
	if i := strings.Index(id, "::"); i >= 0 {
		return id[:i]
	}
	return id
}

func containsOwner(list []collectors.Owner, o collectors.Owner) bool {
	for _, e := range list {
		if e == o {
			return true
		}
	}
	return false
}

// claimProcesses gives the unattributed processes of one slot to its only
// claimant.
func claimProcesses(g *collectors.GPUReading, migUUID string, o collectors.Owner) {
	for i := range g.Processes {
		p := &g.Processes[i]
		if p.MIGUUID == migUUID && p.Owner.IsZero() {
			p.Owner = o
		}
	}
}
