package attribution

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
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
	// DRADrivers are the DRA drivers whose claimed devices (a container's
	// DynamicResources) are GPUs or MIG devices: NVIDIA's gpu.nvidia.com.
	DRADrivers []string
}

// DefaultKubeletConfig returns the kubelet's standard socket and the NVIDIA
// device plugin's resources.
func DefaultKubeletConfig() KubeletConfig {
	return KubeletConfig{
		Socket:           "/var/lib/kubelet/pod-resources/kubelet.sock",
		Timeout:          2 * time.Second,
		ResourcePrefixes: []string{"nvidia.com/gpu", "nvidia.com/mig-"},
		DRADrivers:       []string{NVIDIADRADriver},
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
// them to, and a device's processes to its pod when exactly one pod holds
// it. The namespace gives the tenant. Device-plugin devices are named by
// their ids (GPU or MIG UUIDs; time-slicing replicas "<uuid>::<n>" count as
// their GPU); DRA devices (a claim's devices in a container's
// DynamicResources) by driver, pool and device name, which the devices
// resolver turns into UUIDs. A claim shared by several pods (time-slicing
// or MPS) makes each of them a claimant, as replicas do.
type Kubelet struct {
	cfg     KubeletConfig
	tenancy Tenancy
	devices DeviceResolver // nil: DRA devices are not resolved
	conn    *grpc.ClientConn
	client  podresources.PodResourcesListerClient
}

// SourceResourceSlices names the DRA device resolution in the chain's
// per-source outcomes (a SourceError of the kubelet step).
const SourceResourceSlices = "resourceslices"

// NewKubelet prepares the client; it connects lazily, at the first call.
// devices resolves DRA devices; nil leaves claimed devices unattributed
// here (cgroups still find their processes' pods).
func NewKubelet(cfg KubeletConfig, tenancy Tenancy, devices DeviceResolver) (*Kubelet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kubelet attribution: %w", err)
	}
	conn, err := grpc.NewClient("unix://"+cfg.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("kubelet attribution: client for %s: %w", cfg.Socket, err)
	}
	return &Kubelet{cfg: cfg, tenancy: tenancy, devices: devices, conn: conn, client: podresources.NewPodResourcesListerClient(conn)}, nil
}

// Close closes the connection.
func (k *Kubelet) Close() error { return k.conn.Close() }

// Attribute lists the pods' devices and claims the GPUs and MIG devices
// nothing claimed yet.
func (k *Kubelet) Attribute(ctx context.Context, gpus []collectors.GPUReading) error {
	if _, err := os.Stat(k.cfg.Socket); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kubelet socket %s: %w", k.cfg.Socket, collectors.ErrNoData)
	}
	listCtx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	resp, err := k.client.List(listCtx, &podresources.ListPodResourcesRequest{})
	cancel()
	if err != nil {
		return fmt.Errorf("kubelet list pod resources: %w", err)
	}
	byDevice, claimed := k.index(resp)
	draErr := k.resolveClaims(ctx, byDevice, claimed)
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
	return draErr
}

// SubSources are the sources inside this step whose outcome the chain
// reports apart: the ResourceSlices read, when DRA devices are resolved.
func (k *Kubelet) SubSources() []string {
	if k.devices == nil {
		return nil
	}
	return []string{SourceResourceSlices}
}

// resolveClaims adds the holders of claimed DRA devices to byDevice under
// their UUIDs. A resolver failure is returned as a SourceError; what it
// still knew is used. The resolver bounds its own calls (the API server is
// not the kubelet's socket).
func (k *Kubelet) resolveClaims(ctx context.Context, byDevice map[string][]collectors.Owner, claimed map[DRADevice][]collectors.Owner) error {
	if len(claimed) == 0 || k.devices == nil {
		return nil
	}
	want := make([]DRADevice, 0, len(claimed))
	for d := range claimed {
		want = append(want, d)
	}
	slices.SortFunc(want, func(a, b DRADevice) int { return strings.Compare(a.String(), b.String()) })
	uuids, err := k.devices.DeviceUUIDs(ctx, want)
	var unknown []string
	for _, d := range want {
		uuid, ok := uuids[d]
		if !ok {
			unknown = append(unknown, d.String())
			continue
		}
		for _, o := range claimed[d] {
			if !containsOwner(byDevice[uuid], o) {
				byDevice[uuid] = append(byDevice[uuid], o)
			}
		}
	}
	if err == nil && len(unknown) > 0 {
		err = fmt.Errorf("claimed devices in no resource slice: %s", strings.Join(unknown, ", "))
	}
	if err != nil {
		return &SourceError{Source: SourceResourceSlices, Err: err}
	}
	return nil
}

// index maps device-plugin device ids to the pods holding them, and the
// claimed DRA devices of the configured drivers to theirs.
func (k *Kubelet) index(resp *podresources.ListPodResourcesResponse) (map[string][]collectors.Owner, map[DRADevice][]collectors.Owner) {
	out := make(map[string][]collectors.Owner)
	claimed := make(map[DRADevice][]collectors.Owner)
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
			for _, dr := range c.GetDynamicResources() {
				for _, cr := range dr.GetClaimResources() {
					if !slices.Contains(k.cfg.DRADrivers, cr.GetDriverName()) {
						continue
					}
					d := DRADevice{Driver: cr.GetDriverName(), Pool: cr.GetPoolName(), Device: cr.GetDeviceName()}
					if !containsOwner(claimed[d], owner) {
						claimed[d] = append(claimed[d], owner)
					}
				}
			}
		}
	}
	return out, claimed
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
