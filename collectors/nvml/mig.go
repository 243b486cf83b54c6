package nvml

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/collectors"
)

// migInfo is what does not change while a MIG device exists.
type migInfo struct {
	gi, ci   uint32
	profile  string // GPU instance profile, e.g. "3g.40gb"
	giSlices uint32 // compute slices of the GPU instance
	ciSlices uint32 // compute slices of this compute instance
	gen      uint32 // last read that saw it
}

func migKey(gi, ci uint32) uint64 { return uint64(gi)<<32 | uint64(ci) }

// readMIG reads the MIG mode and, in MIG mode, every MIG device: UUID,
// GPU/compute instance ids, profile, compute slices and memory used.
func (c *Collector) readMIG(d *device, r *collectors.GPUReading, _ interval) error {
	mode, _, ret := d.handle.GetMigMode()
	if err := c.check("nvmlDeviceGetMigMode", ret, nvml.ERROR_NOT_SUPPORTED); err != nil {
		if errors.Is(err, collectors.ErrNotSupported) {
			// Not MIG capable: never ask again, read as a whole GPU.
			d.off |= sigMIG | sigGPM
			return nil
		}
		return err
	}
	if mode != nvml.DEVICE_MIG_ENABLE {
		if d.migs != nil {
			d.migs = nil
			c.freeGPM(d, false)
		}
		return nil
	}
	if err := c.readProfiles(d); err != nil {
		return err
	}
	r.MIG = true
	r.TotalMilliSlices = uint64(d.fullSlices) * 1000

	n, ret := d.handle.GetMaxMigDeviceCount()
	if err := c.check("nvmlDeviceGetMaxMigDeviceCount", ret); err != nil {
		return err
	}
	if d.migs == nil {
		d.migs = make(map[string]*migInfo)
	}
	if d.migByID == nil {
		d.migByID = make(map[uint64]string)
	}
	clear(d.migByID)
	d.migGen++
	for i := 0; i < n; i++ {
		mig, ret := d.handle.GetMigDeviceHandleByIndex(i)
		if err := c.check("nvmlDeviceGetMigDeviceHandleByIndex", ret, nvml.ERROR_NOT_FOUND, nvml.ERROR_INVALID_ARGUMENT); err != nil {
			var ne *Error
			if errors.As(err, &ne) && (ne.ret == nvml.ERROR_NOT_FOUND || ne.ret == nvml.ERROR_INVALID_ARGUMENT) {
				continue // an empty MIG device slot
			}
			return err
		}
		uuid, ret := mig.GetUUID()
		if err := c.check("nvmlDeviceGetUUID", ret); err != nil {
			return err
		}
		info := d.migs[uuid]
		if info == nil {
			var err error
			if info, err = c.describeMIG(d, mig); err != nil {
				return fmt.Errorf("mig device %s: %w", uuid, err)
			}
			d.migs[uuid] = info
		}
		info.gen = d.migGen
		inst := collectors.MIGInstance{
			UUID:              uuid,
			Profile:           info.profile,
			GPUInstanceID:     info.gi,
			ComputeInstanceID: info.ci,
		}
		if mem, ret := mig.GetMemoryInfo(); c.optional("nvmlDeviceGetMemoryInfo", ret) == nil {
			inst.MemUsedBytes = mem.Used
		}
		r.Instances = append(r.Instances, inst)
		d.migByID[migKey(info.gi, info.ci)] = uuid
	}
	for uuid, info := range d.migs {
		if info.gen != d.migGen {
			delete(d.migs, uuid)
		}
	}
	assignMilliSlices(r.Instances, d.migs)
	return nil
}

// assignMilliSlices gives each MIG device its share of the GPU: its GPU
// instance's slices, split by compute-instance slices when one GPU
// instance holds several compute instances.
func assignMilliSlices(insts []collectors.MIGInstance, infos map[string]*migInfo) {
	for i := range insts {
		giMilli := uint64(infos[insts[i].UUID].giSlices) * 1000
		// A GPU holds at most 7 compute instances.
		var weights, parts [8]uint64
		k, mine := 0, -1
		for j := range insts {
			if insts[j].GPUInstanceID != insts[i].GPUInstanceID {
				continue
			}
			if k == len(weights) {
				break
			}
			if j == i {
				mine = k
			}
			weights[k] = uint64(infos[insts[j].UUID].ciSlices)
			k++
		}
		if k <= 1 {
			insts[i].MilliSlices = giMilli
			continue
		}
		// Several compute instances share the GPU instance: split it by
		// their compute slices, exactly, in MIG-device order.
		split := collectors.Split(parts[:0], giMilli, weights[:k])
		if mine >= 0 {
			insts[i].MilliSlices = split[mine]
		}
	}
}

// describeMIG reads a new MIG device's ids, profile and slices.
func (c *Collector) describeMIG(d *device, mig nvml.Device) (*migInfo, error) {
	gi, ret := mig.GetGpuInstanceId()
	if err := c.check("nvmlDeviceGetGpuInstanceId", ret); err != nil {
		return nil, err
	}
	ci, ret := mig.GetComputeInstanceId()
	if err := c.check("nvmlDeviceGetComputeInstanceId", ret); err != nil {
		return nil, err
	}
	info := &migInfo{gi: uint32(gi), ci: uint32(ci)}

	// Slices from the GPU instance's profile, as NVML describes it.
	var memMB uint64
	giHandle, ret := d.handle.GetGpuInstanceById(gi)
	if err := c.check("nvmlDeviceGetGpuInstanceById", ret); err != nil {
		return nil, err
	}
	giInfo, ret := giHandle.GetInfo()
	if err := c.check("nvmlGpuInstanceGetInfo", ret); err != nil {
		return nil, err
	}
	if p, ok := d.profiles[giInfo.ProfileId]; ok {
		info.giSlices = p.SliceCount
		memMB = p.MemorySizeMB
	}
	// The MIG device's own attributes give the compute instance's slices
	// (and stand in for the profile when NVML did not list it).
	if attrs, ret := mig.GetAttributes(); c.optional("nvmlDeviceGetAttributes", ret) == nil {
		info.ciSlices = attrs.ComputeInstanceSliceCount
		if info.giSlices == 0 {
			info.giSlices = attrs.GpuInstanceSliceCount
		}
		if memMB == 0 {
			memMB = attrs.MemorySizeMB
		}
	}
	if info.giSlices == 0 {
		return nil, fmt.Errorf("gpu instance %d: profile %d: slice count unknown", gi, giInfo.ProfileId)
	}
	if info.ciSlices == 0 || info.ciSlices > info.giSlices {
		info.ciSlices = info.giSlices
	}
	// Profile name: NVML names MIG devices "<GPU name> MIG 3g.40gb"; else
	// derive it the way NVIDIA's tools do.
	if name, ret := mig.GetName(); c.optional("nvmlDeviceGetName", ret) == nil {
		info.profile = profileFromName(name)
	}
	if info.profile == "" {
		info.profile = fmt.Sprintf("%dg.%dgb", info.giSlices, migMemoryGB(d.memTotal, memMB))
	}
	return info, nil
}

// readProfiles reads the GPU instance profiles once: profile id → slices
// and memory, and the slices of the whole GPU.
func (c *Collector) readProfiles(d *device) error {
	if d.profilesRead {
		return nil
	}
	d.profiles = make(map[uint32]nvml.GpuInstanceProfileInfo)
	for p := 0; p < nvml.GPU_INSTANCE_PROFILE_COUNT; p++ {
		info, ret := d.handle.GetGpuInstanceProfileInfo(p)
		err := c.check("nvmlDeviceGetGpuInstanceProfileInfo", ret, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT)
		if errors.Is(err, ErrGPULost) {
			return err
		}
		if err != nil {
			continue // a profile this GPU does not have
		}
		d.profiles[info.Id] = info
		if info.SliceCount > d.fullSlices {
			d.fullSlices = info.SliceCount
		}
	}
	if d.fullSlices == 0 {
		d.fullSlices = 7 // every MIG-capable GPU so far
	}
	d.profilesRead = true
	return nil
}

// profileFromName extracts the GPU instance profile from a MIG device name
// such as "NVIDIA A100-SXM4-40GB MIG 3g.20gb" or "… MIG 1c.3g.20gb"; the
// compute-instance prefix is dropped because the price book knows GPU
// instance profiles.
func profileFromName(name string) string {
	i := strings.LastIndex(name, "MIG ")
	if i < 0 {
		return ""
	}
	p := strings.TrimSpace(name[i+4:])
	if j := strings.IndexByte(p, ' '); j >= 0 {
		p = p[:j]
	}
	// "1c.3g.20gb" → "3g.20gb"
	if head, rest, ok := strings.Cut(p, "."); ok && strings.HasSuffix(head, "c") {
		if _, err := strconv.Atoi(strings.TrimSuffix(head, "c")); err == nil {
			p = rest
		}
	}
	if !strings.Contains(p, "g.") || strings.ContainsAny(p, "/") {
		return ""
	}
	return p
}

// migMemoryGB is the memory part of a profile name as NVIDIA's tools derive
// it: the instance's fraction of the board rounded up to eighths, times the
// board's memory in whole GB.
func migMemoryGB(totalBytes, migMB uint64) uint64 {
	if totalBytes == 0 {
		return (migMB + 1023) / 1024
	}
	frac := float64(migMB) * (1 << 20) / float64(totalBytes)
	frac = math.Ceil(frac*8) / 8
	totalGB := float64((totalBytes + 1<<30 - 1) >> 30)
	return uint64(math.Round(frac * totalGB))
}
