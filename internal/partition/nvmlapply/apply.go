// Package nvmlapply makes a host's GPUs match a MIG partition plan through
// NVML. It is the only part of the planner that touches hardware (and cgo).
package nvmlapply

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/partition"
)

// ErrRefused marks an apply that found a reason not to touch the devices:
// MIG mode off, a busy instance in the way, a device of another model, or a
// device whose layout the plan does not describe. Nothing was changed. It
// is in the precondition category: the devices' state refuses the plan.
var ErrRefused = fault.Precondition(errors.New("apply refused"))

// ApplyOptions controls Apply.
type ApplyOptions struct {
	// Execute lets Apply change the devices. Without it Apply is a dry run:
	// it makes every check and reports what it would do.
	Execute bool
}

// Step is one change Apply makes (or would make) to a device.
type Step struct {
	GPU     string           `json:"gpu"`
	Action  partition.Action `json:"action"` // create or destroy
	Profile string           `json:"profile"`
	Start   int              `json:"start"`
	// GPUInstanceID is the NVML id of the GPU instance destroyed or created
	// (unknown, 0, for a create in a dry run).
	GPUInstanceID uint32 `json:"gpu_instance_id"`
	Done          bool   `json:"done"`
}

// ApplyReport says what Apply did or would do.
type ApplyReport struct {
	DryRun bool
	Steps  []Step
	// NotOnHost lists the plan's GPUs this host does not have.
	NotOnHost []string
	// Unchanged lists local GPUs the plan leaves as they are.
	Unchanged []string
}

// deviceGI is a GPU instance found on a device.
type deviceGI struct {
	gi      nvml.GpuInstance
	id      uint32
	prof    int
	start   int
	matched bool
}

type gpuWork struct {
	uuid    string
	dev     nvml.Device
	m       gpucatalog.Model
	infos   map[int]nvml.GpuInstanceProfileInfo // by profile index
	destroy []*deviceGI
	create  []partition.PlannedInstance
}

// Init initialises lib for Apply; shutdown releases it. A host without
// the NVIDIA driver says so.
func Init(lib nvml.Interface) (shutdown func(), err error) {
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
		return func() { lib.Shutdown() }, nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, errors.New("NVML library (libnvidia-ml.so.1) not found: apply plans on a GPU host with the NVIDIA driver installed")
	default:
		return nil, fmt.Errorf("initialise NVML: %v", ret)
	}
}

// Apply brings the devices of this host to the plan's layouts: it destroys
// the GPU instances the plan removes (compute instances first) and creates
// the planned ones at their placements, each with one compute instance
// spanning it. lib must be initialised. Every check runs on every GPU before
// anything changes, and any failed check refuses the whole apply
// (ErrRefused). A GPU already in its target layout needs nothing, so a
// re-run after a partial failure finishes the job.
func Apply(ctx context.Context, lib nvml.Interface, plan partition.Plan, opts ApplyOptions) (ApplyReport, error) {
	rep := ApplyReport{DryRun: !opts.Execute}
	if err := plan.Validate(); err != nil {
		return rep, fmt.Errorf("apply: invalid plan: %w", err)
	}
	local, err := localDevices(lib)
	if err != nil {
		return rep, fmt.Errorf("apply: %w", err)
	}
	var (
		refusals []error
		work     []*gpuWork
	)
	found := 0
	for _, g := range plan.GPUs {
		dev, ok := local[g.UUID]
		if !ok {
			rep.NotOnHost = append(rep.NotOnHost, g.UUID)
			continue
		}
		found++
		w, err := checkGPU(dev, g)
		if err != nil {
			refusals = append(refusals, fmt.Errorf("gpu %s: %w", g.UUID, err))
			continue
		}
		if w == nil {
			rep.Unchanged = append(rep.Unchanged, g.UUID)
			continue
		}
		work = append(work, w)
	}
	if found == 0 && len(plan.GPUs) > 0 {
		return rep, fault.Preconditionf("apply: none of the plan's %d GPUs is on this host", len(plan.GPUs))
	}
	if len(refusals) > 0 {
		return rep, fmt.Errorf("%w, nothing changed: %w", ErrRefused, errors.Join(refusals...))
	}
	for _, w := range work {
		for _, d := range w.destroy {
			rep.Steps = append(rep.Steps, Step{GPU: w.uuid, Action: partition.Destroy, Profile: w.m.Profiles[d.prof].Name, Start: d.start, GPUInstanceID: d.id})
		}
		for _, c := range w.create {
			rep.Steps = append(rep.Steps, Step{GPU: w.uuid, Action: partition.Create, Profile: c.Profile, Start: c.Start})
		}
	}
	if !opts.Execute {
		return rep, nil
	}
	i := 0
	for _, w := range work {
		for _, d := range w.destroy {
			if err := ctx.Err(); err != nil {
				return rep, fmt.Errorf("apply stopped after %d of %d steps: %w", i, len(rep.Steps), err)
			}
			if err := destroyGI(d.gi); err != nil {
				return rep, fmt.Errorf("apply stopped after %d of %d steps: gpu %s: destroy %s at slot %d: %w",
					i, len(rep.Steps), w.uuid, w.m.Profiles[d.prof].Name, d.start, err)
			}
			rep.Steps[i].Done = true
			i++
		}
		for _, c := range w.create {
			if err := ctx.Err(); err != nil {
				return rep, fmt.Errorf("apply stopped after %d of %d steps: %w", i, len(rep.Steps), err)
			}
			id, err := createGI(w, c)
			if err != nil {
				return rep, fmt.Errorf("apply stopped after %d of %d steps: gpu %s: create %s at slot %d: %w",
					i, len(rep.Steps), w.uuid, c.Profile, c.Start, err)
			}
			rep.Steps[i].GPUInstanceID, rep.Steps[i].Done = id, true
			i++
		}
	}
	return rep, nil
}

func localDevices(lib nvml.Interface) (map[string]nvml.Device, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("count devices: %v", ret)
	}
	out := make(map[string]nvml.Device, n)
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("device %d: %v", i, ret)
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("device %d: uuid: %v", i, ret)
		}
		out[uuid] = dev
	}
	return out, nil
}

// checkGPU compares one device with its plan and works out the changes. It
// returns nil work when the device already has the target layout, and an
// error for every reason to refuse.
func checkGPU(dev nvml.Device, g partition.GPUPlan) (*gpuWork, error) {
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("device name: %v", ret)
	}
	if model, ok := gpucatalog.ModelFromDeviceName(name); !ok || model != g.Model {
		return nil, fmt.Errorf("device is %q, the plan is for %s", name, g.Model)
	}
	if g.MIGDisabled || !g.Changed {
		return nil, nil
	}
	mode, _, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("mig mode: %v", ret)
	}
	if mode != nvml.DEVICE_MIG_ENABLE {
		return nil, errors.New("MIG mode is off (enabling it resets the GPU: do that first)")
	}
	m, ok := gpucatalog.LookupModel(g.Model)
	if !ok {
		return nil, fmt.Errorf("model %q: no MIG profile table", g.Model)
	}
	w := &gpuWork{dev: dev, m: m, infos: map[int]nvml.GpuInstanceProfileInfo{}}
	w.uuid, _ = dev.GetUUID()
	var errs []error
	var gis []*deviceGI
	for p, prof := range m.Profiles {
		info, ret := dev.GetGpuInstanceProfileInfo(prof.NVMLProfile)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // this driver does not offer the profile
		}
		if ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("profile %s: %v", prof.Name, ret))
			continue
		}
		if int(info.SliceCount) != prof.ComputeSlices {
			errs = append(errs, fmt.Errorf("profile %s: device reports %d compute slices, the table %d", prof.Name, info.SliceCount, prof.ComputeSlices))
			continue
		}
		w.infos[p] = info
		list, ret := dev.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("list %s instances: %v", prof.Name, ret))
			continue
		}
		for _, gi := range list {
			gii, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				errs = append(errs, fmt.Errorf("%s instance info: %v", prof.Name, ret))
				continue
			}
			gis = append(gis, &deviceGI{gi: gi, id: gii.Id, prof: p, start: int(gii.Placement.Start)})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	slices.SortFunc(gis, func(a, b *deviceGI) int { return cmp.Compare(a.start, b.start) })

	// match finds the device instance a planned one stands for: same
	// profile and start, or for an inferred start any free one of the profile.
	match := func(in partition.PlannedInstance) *deviceGI {
		p, ok := m.ProfileIndex(in.Profile)
		if !ok {
			return nil
		}
		for _, d := range gis {
			if !d.matched && d.prof == p && d.start == in.Start {
				return d
			}
		}
		if in.Inferred {
			for _, d := range gis {
				if !d.matched && d.prof == p {
					return d
				}
			}
		}
		return nil
	}
	var used uint8
	for _, in := range g.Instances {
		if in.Action != partition.Keep {
			continue
		}
		d := match(in)
		if d == nil {
			errs = append(errs, fmt.Errorf("kept instance %s at slot %d is not on the device; re-plan from the device's layout", in.Profile, in.Start))
			continue
		}
		d.matched = true
		used |= m.Profiles[d.prof].MaskAt(d.start)
	}
	for _, in := range g.Remove {
		if d := match(in); d != nil {
			d.matched = true
			w.destroy = append(w.destroy, d)
		}
		// Already gone: an earlier apply got this far.
	}
	var creates []partition.PlannedInstance
	for _, in := range g.Instances {
		if in.Action != partition.Create {
			continue
		}
		if d := match(in); d != nil {
			d.matched = true // created by an earlier apply
			used |= m.Profiles[d.prof].MaskAt(d.start)
			continue
		}
		creates = append(creates, in)
	}
	for _, d := range gis {
		if !d.matched {
			errs = append(errs, fmt.Errorf("device has a %s instance at slot %d the plan does not know; re-plan", m.Profiles[d.prof].Name, d.start))
		}
	}
	for _, in := range creates {
		p, known := m.ProfileIndex(in.Profile)
		if !known {
			errs = append(errs, fmt.Errorf("model %s has no profile %s", m.Name, in.Profile))
			continue
		}
		if _, ok := w.infos[p]; !ok {
			errs = append(errs, fmt.Errorf("driver does not offer profile %s", in.Profile))
			continue
		}
		pm := m.Profiles[p].MaskAt(in.Start)
		if used&pm != 0 {
			errs = append(errs, fmt.Errorf("%s at slot %d would overlap an instance that stays; re-plan from the device's layout", in.Profile, in.Start))
			continue
		}
		used |= pm
	}
	if len(w.destroy) > 0 {
		busy, err := busyInstances(dev)
		if err != nil {
			errs = append(errs, err)
		}
		for _, d := range w.destroy {
			if n := busy[d.id]; n > 0 {
				errs = append(errs, fmt.Errorf("%s at slot %d (GPU instance %d) has %d running processes", m.Profiles[d.prof].Name, d.start, d.id, n))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// Largest first: NVIDIA's guide notes creation order matters for some
	// geometries when placement is left to the driver; with explicit
	// placements it is harmless and keeps the order predictable.
	slices.SortStableFunc(creates, func(a, b partition.PlannedInstance) int {
		ia, _ := m.ProfileIndex(a.Profile)
		ib, _ := m.ProfileIndex(b.Profile)
		pa, pb := m.Profiles[ia], m.Profiles[ib]
		return cmp.Or(cmp.Compare(pb.MemorySlices, pa.MemorySlices), cmp.Compare(pb.ComputeSlices, pa.ComputeSlices), cmp.Compare(a.Start, b.Start))
	})
	w.create = creates
	if len(w.destroy) == 0 && len(w.create) == 0 {
		return nil, nil
	}
	return w, nil
}

// busyInstances counts running processes per GPU instance id. On a MIG GPU
// the parent device lists the processes of every instance with its GPU
// instance id.
func busyInstances(dev nvml.Device) (map[uint32]int, error) {
	out := map[uint32]int{}
	procs, ret := dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("list running processes: %v", ret)
	}
	gfx, ret := dev.GetGraphicsRunningProcesses()
	switch ret {
	case nvml.SUCCESS:
		procs = append(procs, gfx...)
	case nvml.ERROR_NOT_SUPPORTED: // MIG instances run no graphics work
	default:
		return nil, fmt.Errorf("list graphics processes: %v", ret)
	}
	for _, p := range procs {
		out[p.GpuInstanceId]++
	}
	return out, nil
}

func destroyGI(gi nvml.GpuInstance) error {
	for ciProfile := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue // profile not offered by this instance
		}
		cis, ret := gi.GetComputeInstances(&info)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("list compute instances: %v", ret)
		}
		for _, ci := range cis {
			if ret := ci.Destroy(); ret != nvml.SUCCESS {
				return fmt.Errorf("destroy compute instance: %v", ret)
			}
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("destroy gpu instance: %v", ret)
	}
	return nil
}

func createGI(w *gpuWork, c partition.PlannedInstance) (uint32, error) {
	p, _ := w.m.ProfileIndex(c.Profile) // checkGPU refused unknown profiles
	prof := w.m.Profiles[p]
	info := w.infos[p]
	placement := nvml.GpuInstancePlacement{Start: uint32(c.Start), Size: uint32(prof.MemorySlices)}
	gi, ret := w.dev.CreateGpuInstanceWithPlacement(&info, &placement)
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("create gpu instance: %v", ret)
	}
	gii, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("gpu instance info: %v", ret)
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(prof.NVMLComputeProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return gii.Id, fmt.Errorf("compute instance profile: %v", ret)
	}
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		return gii.Id, fmt.Errorf("create compute instance: %v", ret)
	}
	return gii.Id, nil
}
