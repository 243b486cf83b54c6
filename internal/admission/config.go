package admission

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/quota"
)

// Config maps namespaces to tenants, fills in what a Pod leaves out, and
// says how claims and shared GPUs count.
type Config struct {
	Namespaces      map[string]string `yaml:"namespaces"`       // namespace → tenant
	DefaultModel    string            `yaml:"default_model"`    // when a Pod names none
	DefaultDuration time.Duration     `yaml:"default_duration"` // when a Pod names none
	// GPUResources names the GPU resources of the cluster beyond the
	// device plugin's own (nvidia.com/gpu, nvidia.com/mig-*, and either
	// with .shared): the names a time-slicing config's rename gives, or the
	// GPU operator's KubeVirt passthrough and vGPU names
	// (nvidia.com/GH100_H100_SXM5_80GB). Each maps to the MIG profile one
	// device is ("" for a whole GPU).
	GPUResources map[string]string `yaml:"gpu_resources"`
	// DRA says how the devices a Pod's resourceClaims ask for count.
	DRA DRAConfig `yaml:"dra"`
	// HAMi names the resources by which HAMi grants a part of a GPU.
	HAMi HAMiConfig `yaml:"hami"`
}

// DRAConfig says how the requests of Dynamic Resource Allocation claims
// count, by their DeviceClass.
type DRAConfig struct {
	// DeviceClasses maps a DeviceClass name to how one of its devices
	// counts. The default has NVIDIA's DRA driver's classes.
	DeviceClasses map[string]DeviceClass `yaml:"device_classes"`
	// UnknownDeviceClasses is what a request of a class not listed gets:
	// refused, or counted as whole GPUs. Never free.
	UnknownDeviceClasses UnknownClassPolicy `yaml:"unknown_device_classes"`
	// LookupTimeout bounds reading a ResourceClaim or template from the
	// API server, within the webhook's own timeout.
	LookupTimeout time.Duration `yaml:"lookup_timeout"`
}

// DeviceKind is what a device of a class is, for the quota.
type DeviceKind string

const (
	KindGPU  DeviceKind = "gpu"  // a whole GPU
	KindMIG  DeviceKind = "mig"  // a MIG instance, of the profile its selectors (or Profile) name
	KindNone DeviceKind = "none" // not a GPU (a NIC, an FPGA): not counted
)

// DeviceClass is how the devices of one DeviceClass count.
type DeviceClass struct {
	Kind DeviceKind `yaml:"kind"`
	// Profile fixes the MIG profile of every device of a mig class (a
	// class an administrator made for one profile); "" reads it from the
	// request's CEL selectors.
	Profile string `yaml:"profile"`
	// AllCount is what a request with allocationMode All counts as, in
	// devices: the most a node offers of the class. Zero refuses such
	// requests, since the webhook cannot know how many devices the node
	// chosen later has.
	AllCount int64 `yaml:"all_count"`
}

// UnknownClassPolicy is what a request of an unlisted DeviceClass gets.
type UnknownClassPolicy string

const (
	UnknownDeny     UnknownClassPolicy = "deny"      // the Pod is denied, naming the class
	UnknownWholeGPU UnknownClassPolicy = "whole_gpu" // each device counts as a whole GPU
)

// NVIDIA's DRA driver (k8s-dra-driver-gpu) publishes its devices under
// the driver name gpu.nvidia.com, with the DeviceClasses gpu.nvidia.com
// (whole GPUs, type 'gpu') and mig.nvidia.com (MIG devices, type 'mig');
// a MIG device carries its profile as the attribute
// device.attributes['gpu.nvidia.com'].profile.
const (
	nvidiaGPUClass = "gpu.nvidia.com"
	nvidiaMIGClass = "mig.nvidia.com"
)

// HAMiConfig names HAMi's resources: a container asking for
// nvidia.com/gpu with nvidia.com/gpucores: 25 is granted a quarter of
// each GPU's compute, and nvidia.com/gpumem (MiB) or
// nvidia.com/gpumem-percentage a part of its memory. An empty name turns
// that resource off.
type HAMiConfig struct {
	CoresResource            string `yaml:"cores_resource"`             // percent of a GPU's compute
	MemoryResource           string `yaml:"memory_resource"`            // MiB of a GPU's memory
	MemoryPercentageResource string `yaml:"memory_percentage_resource"` // percent of a GPU's memory
}

// DefaultConfig assumes work runs an hour, counts NVIDIA's DRA classes
// and refuses others, and reads HAMi's resources by HAMi's default names.
func DefaultConfig() Config {
	return Config{
		DefaultDuration: time.Hour,
		DRA: DRAConfig{
			DeviceClasses:        map[string]DeviceClass{nvidiaGPUClass: {Kind: KindGPU}, nvidiaMIGClass: {Kind: KindMIG}},
			UnknownDeviceClasses: UnknownDeny,
			LookupTimeout:        3 * time.Second,
		},
		HAMi: HAMiConfig{CoresResource: "nvidia.com/gpucores", MemoryResource: "nvidia.com/gpumem",
			MemoryPercentageResource: "nvidia.com/gpumem-percentage"},
	}
}

// Validate names the field path of every problem.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for _, ns := range sortedKeys(c.Namespaces) {
		if ns == "" || c.Namespaces[ns] == "" {
			add("kubernetes.namespaces[%q]: want a namespace mapped to a tenant", ns)
		}
	}
	if c.DefaultDuration < 0 {
		add("kubernetes.default_duration %s: must not be negative", c.DefaultDuration)
	}
	switch c.DRA.UnknownDeviceClasses {
	case UnknownDeny, UnknownWholeGPU:
	default:
		add("kubernetes.dra.unknown_device_classes %q: want deny or whole_gpu", c.DRA.UnknownDeviceClasses)
	}
	if c.DRA.LookupTimeout <= 0 || c.DRA.LookupTimeout > 30*time.Second {
		add("kubernetes.dra.lookup_timeout %s: want more than 0 and at most 30s (the API server waits at most 30s for a webhook)", c.DRA.LookupTimeout)
	}
	for _, name := range sortedKeys(c.DRA.DeviceClasses) {
		dc := c.DRA.DeviceClasses[name]
		at := fmt.Sprintf("kubernetes.dra.device_classes[%q]", name)
		if name == "" {
			add("%s: a class needs a name", at)
		}
		switch dc.Kind {
		case KindGPU, KindNone:
			if dc.Profile != "" {
				add("%s.profile %q: only a mig class has a profile", at, dc.Profile)
			}
		case KindMIG:
			if dc.Profile != "" && len(gpucatalog.ModelsWithProfile(dc.Profile)) == 0 {
				add("%s.profile %q: no GPU model of the catalogue has this MIG profile", at, dc.Profile)
			}
		default:
			add("%s.kind %q: want gpu, mig or none", at, dc.Kind)
		}
		if dc.AllCount < 0 || dc.AllCount > quota.MaxCount {
			add("%s.all_count %d: want 0 (refuse allocationMode All) to %d", at, dc.AllCount, quota.MaxCount)
		}
	}
	hami := map[string]string{}
	for _, r := range []struct{ field, name string }{{"cores_resource", c.HAMi.CoresResource}, {"memory_resource", c.HAMi.MemoryResource},
		{"memory_percentage_resource", c.HAMi.MemoryPercentageResource}} {
		if r.name == "" {
			continue
		}
		at := "kubernetes.hami." + r.field
		if !strings.Contains(r.name, "/") || strings.ContainsAny(r.name, " \t") {
			add("%s %q: want a domain-qualified resource name such as nvidia.com/gpucores", at, r.name)
		}
		if _, isGPU, _ := parseResource(r.name, c.GPUResources); isGPU {
			add("%s %q: is a GPU resource itself", at, r.name)
		}
		if other, dup := hami[r.name]; dup {
			add("%s %q: also kubernetes.hami.%s", at, r.name, other)
		}
		hami[r.name] = r.field
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
