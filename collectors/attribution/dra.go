package attribution

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NVIDIADRADriver is the driver name of NVIDIA's DRA driver for GPUs and
// MIG devices (k8s-dra-driver-gpu).
const NVIDIADRADriver = "gpu.nvidia.com"

// DRADevice names a device the way DRA allocates it and the kubelet's
// PodResources reports it: the driver, its resource pool and the device's
// name in the pool (NVIDIA's driver: pool = node name, "gpu-0",
// "gpu-0-mig-9-4-2").
type DRADevice struct{ Driver, Pool, Device string }

func (d DRADevice) String() string { return d.Driver + "/" + d.Pool + "/" + d.Device }

// DeviceResolver says which GPU or MIG UUID each DRA device of this node
// is. A resolver that fails returns what it last knew (possibly nothing)
// with the error, so attribution goes on with it.
type DeviceResolver interface {
	DeviceUUIDs(ctx context.Context, want []DRADevice) (map[DRADevice]string, error)
}

// ResourceSlicesConfig configures reading the node's ResourceSlices
// (resource.k8s.io/v1) from the API server.
type ResourceSlicesConfig struct {
	// NodeName is this node: only its slices are read.
	NodeName string
	// Drivers are the DRA drivers whose devices are GPUs or MIG devices.
	Drivers []string
	// Refresh is how long a list is reused. A device the list does not
	// hold triggers an early refresh, at most one a second.
	Refresh time.Duration
	// Timeout bounds one list.
	Timeout time.Duration
}

// DefaultResourceSlicesConfig returns NVIDIA's driver and a five-minute
// refresh (slices change when GPUs or MIG layouts do, rarely), node name
// left to the caller.
func DefaultResourceSlicesConfig() ResourceSlicesConfig {
	return ResourceSlicesConfig{Drivers: []string{NVIDIADRADriver}, Refresh: 5 * time.Minute, Timeout: 5 * time.Second}
}

// Validate reports every problem with the config.
func (c ResourceSlicesConfig) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name: missing"))
	}
	if len(c.Drivers) == 0 || slices.Contains(c.Drivers, "") {
		errs = append(errs, errors.New("drivers: none, or an empty name"))
	}
	if c.Refresh < time.Second {
		errs = append(errs, fmt.Errorf("refresh: %s is below 1s", c.Refresh))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout: %s is not positive", c.Timeout))
	}
	return errors.Join(errs...)
}

// ResourceSlices resolves DRA devices from the ResourceSlices the node's
// DRA drivers publish, listed with a field selector on the node (RBAC:
// get, list and watch on resourceslices.resource.k8s.io) and cached.
type ResourceSlices struct {
	cfg    ResourceSlicesConfig
	client kubernetes.Interface
	now    func() time.Time

	mu      sync.Mutex
	devices map[DRADevice]string
	fetched time.Time
}

// NewResourceSlices checks the config; it lists nothing until asked.
func NewResourceSlices(client kubernetes.Interface, cfg ResourceSlicesConfig) (*ResourceSlices, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("resource slices: %w", err)
	}
	if client == nil {
		return nil, errors.New("resource slices: no API client")
	}
	return &ResourceSlices{cfg: cfg, client: client, now: time.Now}, nil
}

// DeviceUUIDs returns the node's devices, listing the slices again when
// the cache is stale or misses a wanted device. A failed list keeps the
// last one and returns it with the error.
func (r *ResourceSlices) DeviceUUIDs(ctx context.Context, want []DRADevice) (map[DRADevice]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	age := r.now().Sub(r.fetched)
	fresh := r.devices != nil && age < r.cfg.Refresh
	if fresh {
		missing := false
		for _, d := range want {
			if _, ok := r.devices[d]; !ok {
				missing = true
				break
			}
		}
		if !missing || age < time.Second {
			return r.devices, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	list, err := r.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + r.cfg.NodeName})
	r.fetched = r.now()
	if err != nil {
		return r.devices, fmt.Errorf("list resource slices of node %s: %w", r.cfg.NodeName, err)
	}
	r.devices = SliceDeviceUUIDs(list.Items, r.cfg.NodeName, r.cfg.Drivers)
	return r.devices, nil
}

// SliceDeviceUUIDs maps the devices of the node's slices of the given
// drivers to their "uuid" attribute (NVIDIA's driver sets it on GPUs,
// "GPU-…", and MIG devices, "MIG-…"; the attribute may also be written
// qualified, "<driver>/uuid"). Devices without one are left out. Pure.
func SliceDeviceUUIDs(items []resourcev1.ResourceSlice, node string, drivers []string) map[DRADevice]string {
	out := make(map[DRADevice]string)
	for i := range items {
		spec := &items[i].Spec
		if !slices.Contains(drivers, spec.Driver) {
			continue
		}
		// The API server filters by node already; a fake or an older
		// server may not.
		if node != "" && (spec.NodeName == nil || *spec.NodeName != node) {
			continue
		}
		for _, dev := range spec.Devices {
			uuid := attributeString(dev.Attributes, spec.Driver, "uuid")
			if uuid == "" {
				continue
			}
			out[DRADevice{Driver: spec.Driver, Pool: spec.Pool.Name, Device: dev.Name}] = uuid
		}
	}
	return out
}

func attributeString(attrs map[resourcev1.QualifiedName]resourcev1.DeviceAttribute, driver, name string) string {
	for _, key := range []resourcev1.QualifiedName{resourcev1.QualifiedName(name), resourcev1.QualifiedName(driver + "/" + name)} {
		if a, ok := attrs[key]; ok && a.StringValue != nil {
			return *a.StringValue
		}
	}
	return ""
}
