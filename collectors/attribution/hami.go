package attribution

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpumeter/gpumeter/collectors"
)

// The pod annotations HAMi's scheduler writes when it binds a pod to GPUs
// (Project-HAMi/HAMi, pkg/device and pkg/util): the node, the bind phase
// its device plugin moves from "allocating" to "success" (or "failed"),
// and the devices per container.
const (
	HAMiNodeAnnotation      = "hami.io/vgpu-node"
	HAMiBindPhaseAnnotation = "hami.io/bind-phase"
	HAMiAllocatedAnnotation = "hami.io/vgpu-devices-allocated"
	// HAMiBindSuccess is the bind phase of a pod whose devices are in its
	// containers.
	HAMiBindSuccess = "success"
	// HAMiNVIDIA is the device type of NVIDIA GPUs in the allocation.
	HAMiNVIDIA = "NVIDIA"
)

// HAMiDevice is one device of a container in HAMi's allocation: the GPU's
// UUID, the vendor type, the memory granted (MiB) and the share of its
// cores granted (percent; 0: no limit).
type HAMiDevice struct {
	UUID      string
	Type      string
	MemoryMiB uint64
	CoresPct  uint32
}

// ParseHAMiDevices reads HAMi's allocation annotation: containers
// separated by ";", each container's devices by ":", each device
// "UUID,Type,memMiB,cores%", with trailing separators, e.g.
// "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,3000,25:;". It returns
// one device list per container, in order (an empty list for a container
// without devices). Pure; malformed input is an error, never a panic.
func ParseHAMiDevices(s string) ([][]HAMiDevice, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	segments := strings.Split(s, ";")
	if segments[len(segments)-1] == "" {
		segments = segments[:len(segments)-1]
	}
	out := make([][]HAMiDevice, 0, len(segments))
	for ci, seg := range segments {
		var devs []HAMiDevice
		for _, d := range strings.Split(seg, ":") {
			if d == "" {
				continue
			}
			dev, err := parseHAMiDevice(d)
			if err != nil {
				return nil, fmt.Errorf("container %d: device %q: %w", ci, d, err)
			}
			devs = append(devs, dev)
		}
		out = append(out, devs)
	}
	return out, nil
}

func parseHAMiDevice(s string) (HAMiDevice, error) {
	f := strings.Split(s, ",")
	if len(f) != 4 {
		return HAMiDevice{}, fmt.Errorf("%d fields, want UUID,type,memory,cores", len(f))
	}
	if f[0] == "" || f[1] == "" {
		return HAMiDevice{}, errors.New("empty uuid or type")
	}
	mem, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return HAMiDevice{}, fmt.Errorf("memory %q: not a whole number of MiB", f[2])
	}
	cores, err := strconv.ParseUint(f[3], 10, 32)
	if err != nil || cores > 100 {
		return HAMiDevice{}, fmt.Errorf("cores %q: not a percentage 0..100", f[3])
	}
	return HAMiDevice{UUID: f[0], Type: f[1], MemoryMiB: mem, CoresPct: uint32(cores)}, nil
}

// HAMi attributes GPUs that HAMi shares between pods: every bound pod on
// this node whose allocation names a GPU gets its cores % as a grant
// (GPUReading.Grants). The pods are not claimants: each holds a share, not
// the GPU, so time no process used is idle (measured billing) or what no
// grant covers (granted billing). Which process is whose comes from cgroups
// (a later step) unless one pod holds the GPU. MIG GPUs are left alone.
type HAMi struct {
	pods    PodLister
	node    string
	tenancy Tenancy
}

// NewHAMi reads the pods' annotations from pods. node, when set, skips
// pods HAMi bound to another node (a stale list).
func NewHAMi(pods PodLister, node string, tenancy Tenancy) (*HAMi, error) {
	if pods == nil {
		return nil, errors.New("hami attribution: no pod list")
	}
	return &HAMi{pods: pods, node: node, tenancy: tenancy}, nil
}

// Attribute records the grants of the HAMi-shared GPUs. A pod
// whose annotation does not parse is skipped and reported; the others are
// still attributed. A failed pod list with nothing cached is an error.
func (h *HAMi) Attribute(ctx context.Context, gpus []collectors.GPUReading) error {
	pods, listErr := h.pods.Pods(ctx)
	if listErr != nil && pods == nil {
		return fmt.Errorf("hami pod list: %w", listErr)
	}
	grants, errs := h.grants(pods)
	if listErr != nil {
		errs = append(errs, fmt.Errorf("hami pod list (using the last one): %w", listErr))
	}
	for gi := range gpus {
		g := &gpus[gi]
		gr := grants[g.GPU.UUID]
		if g.MIG || len(gr) == 0 {
			continue
		}
		g.Grants = gr
		if len(gr) == 1 {
			claimProcesses(g, "", gr[0].Owner)
		}
	}
	return errors.Join(errs...)
}

// grants maps GPU UUIDs to the grants of the pods bound to them, in
// tenant/workload order; a pod's containers on the same GPU add up.
func (h *HAMi) grants(pods []PodMeta) (map[string][]collectors.Grant, []error) {
	out := make(map[string][]collectors.Grant)
	var errs []error
	for _, p := range pods {
		a := p.Annotations
		alloc := a[HAMiAllocatedAnnotation]
		if alloc == "" || a[HAMiBindPhaseAnnotation] != HAMiBindSuccess || p.Phase == "Succeeded" || p.Phase == "Failed" {
			continue
		}
		if h.node != "" && a[HAMiNodeAnnotation] != "" && a[HAMiNodeAnnotation] != h.node {
			continue
		}
		containers, err := ParseHAMiDevices(alloc)
		if err != nil {
			errs = append(errs, fmt.Errorf("pod %s/%s: %s: %w", p.Namespace, p.Name, HAMiAllocatedAnnotation, err))
			continue
		}
		workload := p.Namespace + "/" + p.Name
		owner := collectors.Owner{Workload: workload}
		if t, ok := h.tenancy.Pod(p.Namespace, p.Name); ok {
			owner = t.owner(workload)
		}
		for _, devs := range containers {
			for _, d := range devs {
				if d.Type != HAMiNVIDIA {
					continue
				}
				out[d.UUID] = addGrant(out[d.UUID], owner, hamiSharePPM(d.CoresPct))
			}
		}
	}
	for uuid := range out {
		slices.SortFunc(out[uuid], func(x, y collectors.Grant) int {
			return cmp.Or(cmp.Compare(x.Owner.Tenant, y.Owner.Tenant), cmp.Compare(x.Owner.Workload, y.Owner.Workload))
		})
	}
	return out, errs
}

// hamiSharePPM is a cores % as a share; 0 (HAMi: no limit) is the whole GPU.
func hamiSharePPM(pct uint32) uint32 {
	if pct == 0 || pct > 100 {
		return collectors.PPMScale
	}
	return pct * (collectors.PPMScale / 100)
}

// addGrant adds a share to the owner's grant, capped at the whole GPU.
func addGrant(list []collectors.Grant, o collectors.Owner, ppm uint32) []collectors.Grant {
	for i := range list {
		if list[i].Owner == o {
			list[i].SharePPM = min(list[i].SharePPM+ppm, collectors.PPMScale)
			return list
		}
	}
	return append(list, collectors.Grant{Owner: o, SharePPM: ppm})
}
