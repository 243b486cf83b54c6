package nvml

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/collectors"
)

// vgpuState is what the collector keeps about a vGPU host's GPU between
// reads: the instances last seen, to tell which started and which ended
// within an interval, and the newest utilization sample read.
type vgpuState struct {
	instances map[string]*vgpuSeen // by vGPU UUID
	byHandle  map[uint32]string    // handle → UUID, of instances seen
	lastUtil  uint64               // newest utilization sample's timestamp (µs)
	gen       uint32
	noUtil    bool // GetVgpuUtilization is not supported
	noProc    bool // GetVgpuProcessUtilization is not supported
}

type vgpuSeen struct {
	inst collectors.VGPUInstance // as last read (Claims empty)
	gen  uint32
}

// invalidID is NVML's INVALID_GPU_INSTANCE_ID and
// INVALID_GPU_INSTANCE_PROFILE_ID: the answer for a time-sliced vGPU.
const invalidID = math.MaxUint32

// readVGPU reads the GPU's virtualization mode and, on a vGPU host, the
// scheduler and every vGPU instance: identity, VM, type, framebuffer,
// licence, and utilization over the interval. Instances that started or
// ended within the interval are bounded by their first or last
// utilization sample (by the middle of the interval without one).
// NOT_SUPPORTED on the mode is a GPU without virtualization.
func (c *Collector) readVGPU(d *device, r *collectors.GPUReading, iv interval) error {
	mode, ret := d.handle.GetVirtualizationMode()
	if err := c.check("nvmlDeviceGetVirtualizationMode", ret, nvml.ERROR_NOT_SUPPORTED); err != nil {
		if errors.Is(err, collectors.ErrNotSupported) {
			d.off |= sigVGPU
			return nil
		}
		return err
	}
	switch mode {
	case nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH:
		r.Virtualization = collectors.VirtPassthrough
	case nvml.GPU_VIRTUALIZATION_MODE_VGPU:
		r.Virtualization = collectors.VirtVGPUGuest
	case nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU:
		r.Virtualization = collectors.VirtHostVGPU
	case nvml.GPU_VIRTUALIZATION_MODE_HOST_VSGA:
		r.Virtualization = collectors.VirtHostVSGA
	default:
		r.Virtualization = collectors.VirtNone
	}
	if r.Virtualization != collectors.VirtHostVGPU {
		d.vgpu = nil
		return nil
	}
	if d.vgpu == nil {
		d.vgpu = &vgpuState{instances: map[string]*vgpuSeen{}, byHandle: map[uint32]string{}}
	}
	st := d.vgpu
	if hm, ret := d.handle.GetHostVgpuMode(); c.optional("nvmlDeviceGetHostVgpuMode", ret) == nil {
		r.SRIOV = hm == nvml.HOST_VGPU_MODE_SRIOV
	}
	if s, ret := d.handle.GetVgpuSchedulerState(); c.optional("nvmlDeviceGetVgpuSchedulerState", ret) == nil {
		r.Scheduler, r.SchedulerTimesliceMicros = schedulerOf(s)
	}
	list, ret := d.handle.GetActiveVgpus()
	if err := c.check("nvmlDeviceGetActiveVgpus", ret); err != nil {
		return err
	}
	// Identify the instances first, so that the samples of those that
	// started within the interval are known by their handles.
	st.gen++
	type listed struct {
		vi    nvml.VgpuInstance
		seen  *vgpuSeen
		isNew bool
	}
	now := make([]listed, 0, len(list))
	for _, vi := range list {
		uuid, ret := vi.GetUUID()
		if err := c.check("nvmlVgpuInstanceGetUUID", ret); err != nil {
			return err
		}
		seen := st.instances[uuid]
		if seen != nil && seen.gen == st.gen {
			continue // listed twice
		}
		isNew := seen == nil
		if isNew {
			inst, err := c.describeVGPU(d, vi, uuid)
			if err != nil {
				return fmt.Errorf("vgpu %s: %w", uuid, err)
			}
			seen = &vgpuSeen{inst: inst}
			st.instances[uuid] = seen
			if h, ok := vgpuHandle(vi); ok {
				st.byHandle[h] = uuid
			}
		}
		seen.gen = st.gen
		now = append(now, listed{vi, seen, isNew})
	}
	util, err := c.readVGPUUtilization(d, st, iv)
	if err != nil {
		return err
	}
	for _, l := range now {
		vi, seen, isNew := l.vi, l.seen, l.isNew
		uuid := seen.inst.UUID
		if fb, ret := vi.GetFbUsage(); c.optional("nvmlVgpuInstanceGetFbUsage", ret) == nil {
			seen.inst.FBUsedBytes = fb
		}
		if lic, ret := vi.GetLicenseInfo(); c.optional("nvmlVgpuInstanceGetLicenseInfo", ret) == nil {
			seen.inst.Licensed = lic.IsLicensed != 0
		}
		inst := seen.inst
		agg := util[uuid]
		inst.SMActive, inst.MemActive = agg.sm.ratio(), agg.mem.ratio()
		if isNew && iv.prevKnown {
			inst.ActiveFrom = iv.mid()
			if agg.sm.n > 0 {
				inst.ActiveFrom = clampMicros(agg.first, iv)
			}
		}
		r.VGPUs = append(r.VGPUs, inst)
	}
	// Ended since the last read: bounded by their last sample.
	for uuid, seen := range st.instances {
		if seen.gen == st.gen {
			continue
		}
		delete(st.instances, uuid)
		for h, u := range st.byHandle {
			if u == uuid {
				delete(st.byHandle, h)
			}
		}
		if !iv.prevKnown {
			continue
		}
		inst := seen.inst
		agg := util[uuid]
		inst.SMActive, inst.MemActive = agg.sm.ratio(), agg.mem.ratio()
		inst.ActiveTo = iv.mid()
		if agg.sm.n > 0 {
			inst.ActiveTo = clampMicros(agg.last, iv)
		}
		r.VGPUs = append(r.VGPUs, inst)
	}
	slices.SortFunc(r.VGPUs, func(a, b collectors.VGPUInstance) int { return cmp.Compare(a.UUID, b.UUID) })
	return r.CheckVGPU()
}

// describeVGPU reads what does not change while an instance exists.
func (c *Collector) describeVGPU(d *device, vi nvml.VgpuInstance, uuid string) (collectors.VGPUInstance, error) {
	inst := collectors.VGPUInstance{UUID: uuid, GPUInstanceID: -1}
	vm, idType, ret := vi.GetVmID()
	if err := c.check("nvmlVgpuInstanceGetVmID", ret); err != nil {
		return inst, err
	}
	inst.VMID = vm
	inst.VMIDType = "domain"
	if idType == nvml.VGPU_VM_ID_UUID {
		inst.VMIDType = "uuid"
	}
	t, ret := vi.GetType()
	if err := c.check("nvmlVgpuInstanceGetType", ret); err != nil {
		return inst, err
	}
	name, ret := t.GetName()
	if err := c.check("nvmlVgpuTypeGetName", ret); err != nil {
		return inst, err
	}
	inst.Type = sanitizeTypeName(name)
	if n, ret := t.GetMaxInstances(d.handle); c.optional("nvmlVgpuTypeGetMaxInstances", ret) == nil && n > 0 {
		inst.MaxInstances = uint32(min(n, math.MaxUint32))
	}
	if fb, ret := t.GetFramebufferSize(); c.optional("nvmlVgpuTypeGetFramebufferSize", ret) == nil {
		inst.FramebufferBytes = fb
	}
	if mdev, ret := vi.GetMdevUUID(); c.optional("nvmlVgpuInstanceGetMdevUUID", ret) == nil {
		inst.MdevUUID = mdev
	}
	if pci, ret := vi.GetGpuPciId(); c.optional("nvmlVgpuInstanceGetGpuPciId", ret) == nil {
		inst.PCIBusID = pci
	}
	// A MIG-backed type names its GPU instance profile; the instance, the
	// GPU instance it runs on.
	profileID, ret := t.GetGpuInstanceProfileId()
	if c.optional("nvmlVgpuTypeGetGpuInstanceProfileId", ret) != nil || profileID == invalidID {
		return inst, nil
	}
	gi, ret := vi.GetGpuInstanceId()
	if err := c.check("nvmlVgpuInstanceGetGpuInstanceId", ret); err != nil {
		return inst, err
	}
	if gi < 0 || gi >= invalidID {
		return inst, fmt.Errorf("MIG-backed type %s without a GPU instance", inst.Type)
	}
	slices, err := c.profileSlices(d, profileID)
	if err != nil {
		return inst, err
	}
	inst.GPUInstanceID = gi
	inst.MilliSlices = uint64(slices) * 1000
	return inst, nil
}

// profileSlices is the compute slices of a GPU instance profile, known by
// its id (as GetGpuInstanceProfileInfo reports it) or by its
// GPU_INSTANCE_PROFILE_* index.
func (c *Collector) profileSlices(d *device, id uint32) (uint32, error) {
	if err := c.readProfiles(d); err != nil {
		return 0, err
	}
	if info, ok := d.profiles[id]; ok {
		return info.SliceCount, nil
	}
	if id < nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := d.handle.GetGpuInstanceProfileInfo(int(id))
		if err := c.check("nvmlDeviceGetGpuInstanceProfileInfo", ret); err != nil {
			return 0, err
		}
		return info.SliceCount, nil
	}
	return 0, fmt.Errorf("unknown GPU instance profile %d", id)
}

// vgpuUtil is one instance's utilization samples in the interval.
type vgpuUtil struct {
	sm, mem     utilMean
	first, last uint64 // sample timestamps, µs
}

type utilMean struct {
	sum uint64 // percent
	n   uint64
}

func (m utilMean) ratio() collectors.Ratio {
	if m.n == 0 {
		return collectors.Ratio{}
	}
	return collectors.Ratio{PPM: uint32(min(m.sum*10_000/m.n, collectors.PPMScale)), OK: true}
}

// readVGPUUtilization reads the per-vGPU samples in (start, end], by
// instance UUID; where the instances' own samples are not supported, the
// per-process samples inside the vGPUs, summed per instance and sample
// time, stand in. Only a lost GPU is an error: without samples the
// instances are split by the scheduler's rule without utilization.
func (c *Collector) readVGPUUtilization(d *device, st *vgpuState, iv interval) (map[string]vgpuUtil, error) {
	out := map[string]vgpuUtil{}
	from, to := micros(iv.start), micros(iv.end)
	add := func(handle uint32, ts uint64, sm, mem uint64, memOK bool) {
		if ts <= from || ts > to {
			return
		}
		uuid, ok := st.byHandle[handle]
		if !ok {
			return // an instance never listed: it came and went between reads
		}
		u := out[uuid]
		if u.sm.n == 0 || ts < u.first {
			u.first = ts
		}
		u.last = max(u.last, ts)
		u.sm.sum += min(sm, 100)
		u.sm.n++
		if memOK {
			u.mem.sum += min(mem, 100)
			u.mem.n++
		}
		out[uuid] = u
	}
	since := st.lastUtil
	if since == 0 || since < from {
		since = from
	}
	if !st.noUtil {
		vt, samples, ret := d.handle.GetVgpuUtilization(since)
		err := c.check("nvmlDeviceGetVgpuUtilization", ret, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_FOUND)
		switch {
		case err == nil:
			for _, s := range samples {
				add(s.VgpuInstance, s.TimeStamp, sampleValue(vt, s.SmUtil), sampleValue(vt, s.MemUtil), true)
				st.lastUtil = max(st.lastUtil, s.TimeStamp)
			}
			return out, nil
		case errors.Is(err, ErrGPULost):
			return nil, err
		case errors.Is(err, collectors.ErrNotSupported):
			st.noUtil = true
		case errors.Is(err, collectors.ErrNoData):
			return out, nil // no samples since the last read
		}
	}
	if st.noProc {
		return out, nil
	}
	procs, ret := d.handle.GetVgpuProcessUtilization(since)
	err := c.check("nvmlDeviceGetVgpuProcessUtilization", ret, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_FOUND)
	switch {
	case err == nil:
		type key struct {
			handle uint32
			ts     uint64
		}
		sums := map[key][2]uint64{}
		for _, p := range procs {
			k := key{p.VgpuInstance, p.TimeStamp}
			s := sums[k]
			sums[k] = [2]uint64{s[0] + uint64(p.SmUtil), s[1] + uint64(p.MemUtil)}
			st.lastUtil = max(st.lastUtil, p.TimeStamp)
		}
		for k, s := range sums {
			add(k.handle, k.ts, s[0], s[1], true)
		}
	case errors.Is(err, ErrGPULost):
		return nil, err
	case errors.Is(err, collectors.ErrNotSupported):
		st.noProc = true
	}
	return out, nil
}

// sampleValue reads an nvmlValue_t of the given type as an integer.
func sampleValue(vt nvml.ValueType, v [8]byte) uint64 {
	switch vt {
	case nvml.VALUE_TYPE_DOUBLE:
		f := math.Float64frombits(binary.LittleEndian.Uint64(v[:]))
		if f < 0 || math.IsNaN(f) {
			return 0
		}
		return uint64(math.Round(min(f, 100)))
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return binary.LittleEndian.Uint64(v[:])
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return uint64(binary.LittleEndian.Uint16(v[:]))
	default: // unsigned and signed int
		return uint64(binary.LittleEndian.Uint32(v[:]))
	}
}

// schedulerOf reads the scheduler policy and time slice. An unknown
// policy is NVIDIA's default, best effort.
func schedulerOf(s nvml.VgpuSchedulerGetState) (collectors.VGPUScheduler, uint32) {
	policy := collectors.SchedulerBestEffort
	switch s.SchedulerPolicy {
	case nvml.VGPU_SCHEDULER_POLICY_EQUAL_SHARE:
		policy = collectors.SchedulerEqualShare
	case nvml.VGPU_SCHEDULER_POLICY_FIXED_SHARE:
		policy = collectors.SchedulerFixedShare
	}
	// The parameters are a union: {timeslice} or, with adaptive round
	// robin, {avgFactor, timeslice}.
	slice := binary.LittleEndian.Uint32(s.SchedulerParams[0:4])
	if s.ArrMode == nvml.VGPU_SCHEDULER_ARR_ENABLE {
		slice = binary.LittleEndian.Uint32(s.SchedulerParams[4:8])
	}
	return policy, slice
}

// handler is how an nvml.VgpuInstance that is not NVML's own handle (a
// wrapper, the simulated fleet) says which handle its samples carry.
type handler interface{ Handle() uint32 }

// vgpuHandle is the number utilization samples name an instance by.
// go-nvml's VgpuInstance is NVML's nvmlVgpuInstance_t, an unexported
// uint32, so it is read by kind.
func vgpuHandle(vi nvml.VgpuInstance) (uint32, bool) {
	if h, ok := vi.(handler); ok {
		return h.Handle(), true
	}
	v := reflect.ValueOf(vi)
	if v.Kind() == reflect.Uint32 {
		return uint32(v.Uint()), true
	}
	return 0, false
}

// sanitizeTypeName keeps a vGPU type name fit for a SKU: letters,
// digits, '-', '.' and '_' (NVIDIA's names are all of these, e.g.
// "A100-4C", "GRID A100-3-20C" loses its "GRID " prefix).
func sanitizeTypeName(name string) string {
	if len(name) > 5 && name[:5] == "GRID " {
		name = name[5:]
	}
	b := make([]byte, 0, len(name))
	for i := 0; i < len(name); i++ {
		ch := name[i]
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '-', ch == '.', ch == '_':
			b = append(b, ch)
		case ch == ' ' && len(b) > 0 && b[len(b)-1] != '-':
			b = append(b, '-')
		}
	}
	if len(b) == 0 {
		return "unknown"
	}
	return string(b)
}
