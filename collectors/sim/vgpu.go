package sim

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// VGPUMode is how a GPU of a simulated host is used.
type VGPUMode int

const (
	// BareMetal: not virtualized (GetVirtualizationMode NONE); host
	// processes run on it as on any host.
	BareMetal VGPUMode = iota
	// TimeSlicedVGPU: a vGPU host's GPU shared by time-sliced vGPU
	// instances under the configured scheduler policy.
	TimeSlicedVGPU
	// MIGBackedVGPU: a vGPU host's GPU in MIG mode whose GPU instances
	// are each given to one MIG-backed vGPU instance. The compute
	// instances live inside the VMs, so the host sees no MIG devices.
	MIGBackedVGPU
	// Passthrough: the whole GPU is passed through to one VM
	// (GetVirtualizationMode PASSTHROUGH).
	Passthrough
)

var vgpuModeNames = [...]string{"bare metal", "time-sliced vGPU", "MIG-backed vGPU", "passthrough"}

func (m VGPUMode) String() string {
	if m >= 0 && int(m) < len(vgpuModeNames) {
		return vgpuModeNames[m]
	}
	return fmt.Sprintf("VGPUMode(%d)", int(m))
}

// VGPUConfig makes a host a KVM hypervisor with NVIDIA's vGPU manager.
// GPUs[i] configures GPU i; GPUs beyond the list are bare metal.
type VGPUConfig struct {
	GPUs []VGPUGPUConfig
}

// VGPUGPUConfig is one GPU of a vGPU host.
type VGPUGPUConfig struct {
	Mode VGPUMode
	// Scheduler is the vGPU scheduler policy (time-sliced and
	// MIG-backed GPUs report it; only time-sliced ones are scheduled by it).
	Scheduler collectors.VGPUScheduler
	// TimesliceMicros is the scheduler's time slice in the scheduler
	// state; 0 reports none (the driver's default).
	TimesliceMicros uint32
	// ARR enables adaptive round robin: the scheduler parameters are then
	// {AvgFactor, Timeslice} instead of {Timeslice}.
	ARR       bool
	AvgFactor uint32
	// NoUtilization makes GetVgpuUtilization answer NOT_SUPPORTED.
	NoUtilization bool
	// GPUInstances are the GPU instance profiles of a MIG-backed GPU
	// (e.g. "3g.20gb"), created at start, each for one vGPU at a time.
	GPUInstances []string
}

func (c *VGPUConfig) validate(m modelSpec, gpus int) error {
	var errs []error
	if len(c.GPUs) > gpus {
		errs = append(errs, fmt.Errorf("vgpu: %d gpus configured on a host of %d", len(c.GPUs), gpus))
	}
	for i, g := range c.GPUs {
		if g.Mode < BareMetal || g.Mode > Passthrough {
			errs = append(errs, fmt.Errorf("vgpu: gpu %d: unknown mode %d", i, g.Mode))
		}
		if g.Scheduler > collectors.SchedulerFixedShare {
			errs = append(errs, fmt.Errorf("vgpu: gpu %d: unknown scheduler %d", i, g.Scheduler))
		}
		if g.Mode != MIGBackedVGPU && len(g.GPUInstances) > 0 {
			errs = append(errs, fmt.Errorf("vgpu: gpu %d: gpu instances on a %s gpu", i, g.Mode))
		}
		if g.Mode == MIGBackedVGPU {
			if len(g.GPUInstances) == 0 {
				errs = append(errs, fmt.Errorf("vgpu: gpu %d: a MIG-backed gpu needs gpu instances", i))
			}
			if _, err := placeProfiles(m, g.GPUInstances); err != nil {
				errs = append(errs, fmt.Errorf("vgpu: gpu %d: %w", i, err))
			}
		}
	}
	return errors.Join(errs...)
}

// placeProfiles finds a placement of GPU instance profiles by name.
func placeProfiles(m modelSpec, names []string) ([]gpucatalog.Profile, error) {
	var want []gpucatalog.Profile
	slicesUsed := 0
	for _, name := range names {
		p, ok := m.profile(name)
		if !ok {
			return nil, fmt.Errorf("%s has no profile %q", m.name, name)
		}
		slicesUsed += p.ComputeSlices
		want = append(want, p)
	}
	if slicesUsed > gpucatalog.ComputeSlices {
		return nil, fmt.Errorf("%v need %d of %d compute slices", names, slicesUsed, gpucatalog.ComputeSlices)
	}
	if _, ok := place(want, 0); !ok {
		return nil, fmt.Errorf("no placement fits %v", names)
	}
	return want, nil
}

// VMIDType is how NVML names a VM (GetVmID).
type VMIDType int

const (
	VMIDDomain VMIDType = iota // the libvirt domain name (VGPU_VM_ID_DOMAIN_ID)
	VMIDUUID                   // the domain UUID (VGPU_VM_ID_UUID)
)

// VMMapping is where attribution finds a VM's tenant.
type VMMapping int

const (
	// VMByMetadata: gpumeter:owner metadata in the libvirt domain XML.
	VMByMetadata VMMapping = iota
	// VMByMapFile: a `vm <VM id> <tenant> <department>` line in the
	// fleet's map file; the domain XML has no gpumeter metadata.
	VMByMapFile
)

// VM is a virtual machine of a vGPU host: a libvirt domain.
type VM struct {
	Name string // domain name, e.g. "vm-acme-01"
	UUID string // domain UUID; empty: derived from the host and name
	// Tenant and Department are what attribution is expected to find;
	// an empty Tenant is a VM nothing maps (its use is unattributed).
	Tenant     string
	Department string
	Mapping    VMMapping
	IDType     VMIDType
	// Util gives its vGPUs' utilization (percent) in a step; nil: SMUtil.
	// A time-sliced instance reports it as a share of the whole GPU (under
	// fixed share at most 100/max instances of its type), a MIG-backed one
	// as a share of its GPU instance, a passthrough GPU as the device's.
	Util   func(step int64) uint32
	SMUtil uint32
	// FBUsedPercent is the share of its vGPU type's framebuffer the VM
	// uses (GetFbUsage); 0 is read as 50.
	FBUsedPercent uint32
}

// ID is the VM's id as NVML reports it.
func (vm VM) ID() string {
	if vm.IDType == VMIDUUID {
		return vm.UUID
	}
	return vm.Name
}

// Workload is the VM's workload in samples and in the ledger: "vm/<id>".
func (vm VM) Workload() string { return "vm/" + vm.ID() }

// bookedTenant is who the ledger credits.
func (vm VM) bookedTenant() string {
	if vm.Tenant == "" {
		return collectors.UnattributedTenant
	}
	return vm.Tenant
}

func (vm VM) utilAt(step int64) uint32 {
	if vm.Util != nil {
		return min(vm.Util(step), 100)
	}
	return min(vm.SMUtil, 100)
}

type vmState struct {
	VM
	mdevs map[int]string // GPU index → mdev UUID, of the vGPUs it was given
	pci   string         // bus id of a GPU passed through to it
}

// DefineVM defines a VM on the host (its libvirt domain XML is written
// under LibvirtDir).
func (h *Host) DefineVM(vm VM) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if vm.Name == "" {
		return fmt.Errorf("sim host %s: define vm: no name", h.cfg.Name)
	}
	if _, dup := h.vms[vm.Name]; dup {
		return fmt.Errorf("sim host %s: define vm %s: already defined", h.cfg.Name, vm.Name)
	}
	if vm.UUID == "" {
		vm.UUID = uuidFrom(h.cfg.Name, "vm", vm.Name)
	}
	if vm.Tenant == "" && vm.Department != "" {
		return fmt.Errorf("sim host %s: define vm %s: a department without a tenant", h.cfg.Name, vm.Name)
	}
	if vm.FBUsedPercent > 100 {
		return fmt.Errorf("sim host %s: define vm %s: framebuffer use %d%% is above 100", h.cfg.Name, vm.Name, vm.FBUsedPercent)
	}
	for _, o := range h.vms {
		if o.UUID == vm.UUID {
			return fmt.Errorf("sim host %s: define vm %s: uuid %s is vm %s's", h.cfg.Name, vm.Name, vm.UUID, o.Name)
		}
	}
	st := &vmState{VM: vm, mdevs: map[int]string{}}
	if err := h.writeDomain(st); err != nil {
		return err
	}
	h.vms[vm.Name] = st
	return nil
}

// VMs lists the host's VMs by name.
func (h *Host) VMs() []VM {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]VM, 0, len(h.vms))
	for _, v := range h.vms {
		out = append(out, v.VM)
	}
	slices.SortFunc(out, func(a, b VM) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// vgpuGI is a GPU instance of a MIG-backed vGPU GPU.
type vgpuGI struct {
	id      uint32
	profile gpucatalog.Profile
	handle  *server.GpuInstance
}

// VGPU is one simulated vGPU instance.
type VGPU struct {
	gpu    *GPU
	handle uint32
	uuid   string
	vm     *vmState
	typ    gpucatalog.VGPUType
	gi     *vgpuGI // MIG-backed: its GPU instance
	vf     int     // SR-IOV virtual function, from 1
	mdev   string
	fbUsed uint64

	created   time.Time
	destroyed time.Time // zero: not (yet) destroyed
	sampled   bool      // its creation sample was taken

	nv vgpuInstance
}

// vgpuInstance is the NVML handle of a simulated vGPU: the mock with the
// handle number utilization samples carry.
type vgpuInstance struct {
	*mock.VgpuInstance
	handle uint32
}

// Handle is the number NVML's utilization samples name the instance by.
func (v vgpuInstance) Handle() uint32 { return v.handle }

var _ nvml.VgpuInstance = vgpuInstance{}

// UUID is the vGPU instance's UUID.
func (v *VGPU) UUID() string { return v.uuid }

// Handle is the instance's handle in utilization samples.
func (v *VGPU) Handle() uint32 { return v.handle }

// VM is the VM that holds it.
func (v *VGPU) VM() VM { return v.vm.VM }

// Type is its vGPU type name, e.g. "A100-4C".
func (v *VGPU) Type() string { return v.typ.Name }

// Mdev is its mediated device UUID.
func (v *VGPU) Mdev() string { return v.mdev }

// Created is when it was (or will be) created.
func (v *VGPU) Created() time.Time { return v.created }

// Destroyed is when it was (or will be) destroyed; zero while not set.
func (v *VGPU) Destroyed() time.Time {
	v.gpu.host.mu.RLock()
	defer v.gpu.host.mu.RUnlock()
	return v.destroyed
}

// Mode is how the GPU is used.
func (g *GPU) Mode() VGPUMode { return g.vmode }

// VGPUSpec describes a vGPU instance to create.
type VGPUSpec struct {
	VM   string // a defined VM's name
	Type string // a vGPU type of the host's model, e.g. "A100-4C"
	// At is the creation instant in whole microseconds, not before the
	// host's time; zero: now. The instance exists from At on.
	At time.Time
	// GPUInstance is the GPU instance id of a MIG-backed vGPU; 0 picks the
	// first GPU instance of the type's profile that is free at At.
	GPUInstance uint32
}

// CreateVGPU creates a vGPU instance on a vGPU host's GPU at spec.At. A
// GPU runs either time-sliced or MIG-backed types, a GPU instance one
// vGPU at a time, and a VM at most one vGPU per GPU at a time.
func (g *GPU) CreateVGPU(spec VGPUSpec) (*VGPU, error) {
	h := g.host
	h.mu.Lock()
	defer h.mu.Unlock()
	fail := func(format string, args ...any) (*VGPU, error) {
		return nil, fmt.Errorf("sim gpu %d: create vgpu %s for %s: %s", g.index, spec.Type, spec.VM, fmt.Sprintf(format, args...))
	}
	at := spec.At
	if at.IsZero() {
		at = h.now
	}
	at = at.UTC()
	switch {
	case g.vmode != TimeSlicedVGPU && g.vmode != MIGBackedVGPU:
		return fail("the gpu is %s", g.vmode)
	case g.lost:
		return fail("the gpu is lost")
	case at.Before(h.now):
		return fail("%s is before the host's time %s", at.Format(time.RFC3339Nano), h.now.Format(time.RFC3339Nano))
	case at.Truncate(time.Microsecond) != at:
		return fail("%s is not a whole microsecond", at.Format(time.RFC3339Nano))
	}
	vm, ok := h.vms[spec.VM]
	if !ok {
		return fail("no such vm")
	}
	typ, ok := gpucatalog.LookupVGPU(h.model.name, spec.Type)
	if !ok {
		return fail("not a vGPU type of %s", h.model.name)
	}
	if (typ.MIGProfile != "") != (g.vmode == MIGBackedVGPU) {
		return fail("a %s gpu cannot run this type", g.vmode)
	}
	alive := func(v *VGPU) bool { return v.destroyed.IsZero() || v.destroyed.After(at) }
	for _, v := range g.vgpus {
		if v.vm == vm && alive(v) {
			return fail("the vm holds vgpu %s on this gpu", v.uuid)
		}
	}
	var gi *vgpuGI
	if typ.MIGProfile != "" {
		for _, cand := range g.vgis {
			if cand.profile.Name != typ.MIGProfile || (spec.GPUInstance != 0 && cand.id != spec.GPUInstance) {
				continue
			}
			if slices.ContainsFunc(g.vgpus, func(v *VGPU) bool { return v.gi == cand && alive(v) }) {
				continue
			}
			gi = cand
			break
		}
		if gi == nil {
			return fail("no free gpu instance of profile %s", typ.MIGProfile)
		}
	}
	vf := 1
	for slices.ContainsFunc(g.vgpus, func(v *VGPU) bool { return v.vf == vf && alive(v) }) {
		vf++
	}
	g.nextHandle++
	v := &VGPU{
		gpu:     g,
		handle:  g.nextHandle,
		uuid:    uuidFrom(g.uuid, "vgpu", fmt.Sprint(g.nextHandle)),
		vm:      vm,
		typ:     typ,
		gi:      gi,
		vf:      vf,
		created: at,
	}
	pct := uint64(vm.FBUsedPercent)
	if pct == 0 {
		pct = 50
	}
	v.fbUsed = (uint64(typ.FramebufferGB) << 30) * pct / 100 &^ (1<<20 - 1)
	mdev, ok := vm.mdevs[g.index]
	if !ok {
		mdev = uuidFrom(h.cfg.Name, "mdev", vm.Name, g.uuid)
		vm.mdevs[g.index] = mdev
		if err := h.writeDomain(vm); err != nil {
			delete(vm.mdevs, g.index)
			return nil, err
		}
	}
	v.mdev = mdev
	v.nv = vgpuInstance{VgpuInstance: v.newMock(), handle: v.handle}
	g.vgpus = append(g.vgpus, v)
	if at.Equal(h.now) {
		// The driver's first sample of a new instance, at its creation.
		g.vgpuSample(v, at, h.step)
	}
	return v, nil
}

// Destroy destroys the instance at at (whole microseconds, not before the
// host's time, in a later step than its creation: the driver lists every
// instance at least once).
func (v *VGPU) Destroy(at time.Time) error {
	g := v.gpu
	h := g.host
	h.mu.Lock()
	defer h.mu.Unlock()
	at = at.UTC()
	fail := func(format string, args ...any) error {
		return fmt.Errorf("sim gpu %d: destroy vgpu %s: %s", g.index, v.uuid, fmt.Sprintf(format, args...))
	}
	switch {
	case !v.destroyed.IsZero():
		return fail("already destroyed at %s", v.destroyed.Format(time.RFC3339Nano))
	case at.Before(h.now):
		return fail("%s is before the host's time %s", at.Format(time.RFC3339Nano), h.now.Format(time.RFC3339Nano))
	case at.Truncate(time.Microsecond) != at:
		return fail("%s is not a whole microsecond", at.Format(time.RFC3339Nano))
	case h.stepOf(at) <= h.stepOf(v.created):
		return fail("%s is in the step it is created in (%s)", at.Format(time.RFC3339Nano), v.created.Format(time.RFC3339Nano))
	}
	v.destroyed = at
	return nil
}

// PassThrough gives a passthrough GPU to a VM from now on: the VM's
// domain XML gets the GPU as a PCI host device.
func (g *GPU) PassThrough(vmName string) error {
	h := g.host
	h.mu.Lock()
	defer h.mu.Unlock()
	if g.vmode != Passthrough {
		return fmt.Errorf("sim gpu %d: pass through to %s: the gpu is %s", g.index, vmName, g.vmode)
	}
	vm, ok := h.vms[vmName]
	if !ok {
		return fmt.Errorf("sim gpu %d: pass through to %s: no such vm", g.index, vmName)
	}
	if g.passVM != nil {
		return fmt.Errorf("sim gpu %d: pass through to %s: passed through to %s", g.index, vmName, g.passVM.Name)
	}
	if vm.pci != "" {
		return fmt.Errorf("sim gpu %d: pass through to %s: the vm holds gpu %s", g.index, vmName, vm.pci)
	}
	vm.pci = g.busID
	if err := h.writeDomain(vm); err != nil {
		vm.pci = ""
		return err
	}
	g.passVM = vm
	return nil
}

// VGPUs lists the GPU's vGPU instances that exist or will (those
// destroyed before the host's time are gone), by handle.
func (g *GPU) VGPUs() []*VGPU {
	g.host.mu.RLock()
	defer g.host.mu.RUnlock()
	return slices.Clone(g.vgpus)
}

// stepOf is the index of the step holding t (steps from the host's start).
func (h *Host) stepOf(t time.Time) int64 {
	return int64(t.Sub(h.cfg.Start.UTC()) / h.cfg.Step)
}

// setupVGPU puts a GPU in its configured mode.
func (g *GPU) setupVGPU(c VGPUGPUConfig) error {
	g.vmode, g.vcfg = c.Mode, c
	switch c.Mode {
	case BareMetal:
		g.virt = nvml.GPU_VIRTUALIZATION_MODE_NONE
	case Passthrough:
		g.virt = nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH
	default:
		g.virt = nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU
	}
	if c.Mode != MIGBackedVGPU {
		return nil
	}
	m := g.host.model
	want, err := placeProfiles(m, c.GPUInstances)
	if err != nil {
		return fmt.Errorf("sim gpu %d: %w", g.index, err)
	}
	at, _ := place(want, 0)
	for k, p := range want {
		id := uint32(k + 1)
		g.vgis = append(g.vgis, &vgpuGI{id: id, profile: p, handle: g.placeGPUInstance(id, p, at[k])})
	}
	g.mig = true
	g.dev.MigMode = nvml.DEVICE_MIG_ENABLE
	return nil
}

// vgpuPresence is one vGPU instance's part of a step.
type vgpuPresence struct {
	v        *VGPU
	from, to uint64 // µs since the epoch, within the step
	util     uint32 // percent, this step's
}

func (p vgpuPresence) micros() uint64 { return p.to - p.from }

// utilAt is the instance's utilization in a step: its VM's, capped at
// the fixed share of its type under fixed-share scheduling.
func (v *VGPU) utilAt(step int64) uint32 {
	u := v.vm.utilAt(step)
	if v.gpu.vmode == TimeSlicedVGPU && v.gpu.vcfg.Scheduler == collectors.SchedulerFixedShare && v.typ.MaxInstances > 0 {
		u = min(u, uint32(100/v.typ.MaxInstances))
	}
	return u
}

// vgpuSample records a utilization sample of v at t with the value of
// step's utilization.
func (g *GPU) vgpuSample(v *VGPU, t time.Time, step int64) {
	if g.vcfg.NoUtilization {
		return
	}
	u := v.utilAt(step)
	s := nvml.VgpuInstanceUtilizationSample{VgpuInstance: v.handle, TimeStamp: micros(t)}
	binary.LittleEndian.PutUint32(s.SmUtil[:], u)
	binary.LittleEndian.PutUint32(s.MemUtil[:], u/2)
	g.vsamples = append(g.vsamples, s)
	if t.Equal(v.created) {
		v.sampled = true
	}
}

// stepVGPU runs one step [now, end) of a vGPU host's GPU: which instances
// were present and for how long, their utilization samples (one at each
// creation and destruction inside the step, one at the step's end for
// each instance alive then), and drops the instances destroyed by end.
func (g *GPU) stepVGPU(step int64, now, end time.Time) {
	g.vstep = g.vstep[:0]
	if g.vmode == Passthrough {
		g.passUtil = 0
		if g.passVM != nil {
			g.passUtil = g.passVM.utilAt(step)
		}
		return
	}
	if g.vmode == BareMetal {
		return
	}
	nowUs, endUs := micros(now), micros(end)
	for _, v := range g.vgpus {
		c := v.created
		if !v.sampled && c.After(now) && !c.After(end) {
			// Created inside the step, or at its end (then with the next
			// step's utilization).
			g.vgpuSample(v, c, g.host.stepOf(c))
		}
		if !c.Before(end) {
			continue // not yet
		}
		d := v.destroyed
		from, to := max(micros(c), nowUs), endUs
		if !d.IsZero() {
			to = min(to, micros(d))
		}
		if to <= from {
			continue
		}
		u := v.utilAt(step)
		g.vstep = append(g.vstep, vgpuPresence{v: v, from: from, to: to, util: u})
		if to < endUs {
			g.vgpuSample(v, d, step) // destroyed inside the step
		} else {
			g.vgpuSample(v, end, step)
		}
	}
	g.vgpus = slices.DeleteFunc(g.vgpus, func(v *VGPU) bool { return !v.destroyed.IsZero() && !v.destroyed.After(end) })
	// The driver keeps a short history.
	keep := endUs - min(endUs, uint64(max(20*g.host.cfg.Step, 2*time.Minute)/time.Microsecond))
	i := 0
	for i < len(g.vsamples) && g.vsamples[i].TimeStamp <= keep {
		i++
	}
	g.vsamples = g.vsamples[i:]
}

// vgpuBusy is the step's board activity as busyNum/busyDen, from the
// present instances' utilization weighted by presence.
func (g *GPU) vgpuBusy(stepUs uint64) (num, den uint64) {
	switch g.vmode {
	case Passthrough:
		return uint64(g.passUtil), 100
	case MIGBackedVGPU:
		for _, p := range g.vstep {
			num += collectors.MulDiv(uint64(p.v.gi.profile.ComputeSlices)*uint64(p.util), p.micros(), stepUs)
		}
		return min(num, gpucatalog.ComputeSlices*100), gpucatalog.ComputeSlices * 100
	}
	for _, p := range g.vstep {
		num += collectors.MulDiv(uint64(p.util), p.micros(), stepUs)
	}
	return min(num, 100), 100
}

// installVGPU fills the virtualization functions of the device. A GPU
// that is no vGPU host answers NOT_SUPPORTED to the vGPU-host queries.
// GetVgpuProcessUtilization is always NOT_SUPPORTED: the simulated VMs
// have no processes the host could see.
func (g *GPU) installVGPU() {
	h, d := g.host, g.dev
	isHost := func() bool { return g.virt == nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU }
	d.GetVirtualizationModeFunc = func() (nvml.GpuVirtualizationMode, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return g.virt, nvml.SUCCESS
	}
	d.GetHostVgpuModeFunc = func() (nvml.HostVgpuMode, nvml.Return) {
		defer h.readLock()()
		switch {
		case g.lost:
			return 0, nvml.ERROR_GPU_IS_LOST
		case !isHost():
			return 0, nvml.ERROR_NOT_SUPPORTED
		case h.model.sriov:
			return nvml.HOST_VGPU_MODE_SRIOV, nvml.SUCCESS
		}
		return nvml.HOST_VGPU_MODE_NON_SRIOV, nvml.SUCCESS
	}
	d.GetVgpuSchedulerStateFunc = func() (nvml.VgpuSchedulerGetState, nvml.Return) {
		defer h.readLock()()
		switch {
		case g.lost:
			return nvml.VgpuSchedulerGetState{}, nvml.ERROR_GPU_IS_LOST
		case !isHost():
			return nvml.VgpuSchedulerGetState{}, nvml.ERROR_NOT_SUPPORTED
		}
		return schedulerState(g.vcfg), nvml.SUCCESS
	}
	d.GetActiveVgpusFunc = func() ([]nvml.VgpuInstance, nvml.Return) {
		defer h.readLock()()
		switch {
		case g.lost:
			return nil, nvml.ERROR_GPU_IS_LOST
		case !isHost():
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		out := make([]nvml.VgpuInstance, 0, len(g.vgpus))
		for _, v := range g.vgpus {
			if v.existsAt(h.now) {
				out = append(out, v.nv)
			}
		}
		return out, nvml.SUCCESS
	}
	d.GetVgpuUtilizationFunc = func(lastSeen uint64) (nvml.ValueType, []nvml.VgpuInstanceUtilizationSample, nvml.Return) {
		defer h.readLock()()
		switch {
		case g.lost:
			return 0, nil, nvml.ERROR_GPU_IS_LOST
		case !isHost() || g.vcfg.NoUtilization:
			return 0, nil, nvml.ERROR_NOT_SUPPORTED
		}
		var out []nvml.VgpuInstanceUtilizationSample
		for _, s := range g.vsamples {
			if s.TimeStamp > lastSeen {
				out = append(out, s)
			}
		}
		return nvml.VALUE_TYPE_UNSIGNED_INT, out, nvml.SUCCESS
	}
	d.GetVgpuProcessUtilizationFunc = func(uint64) ([]nvml.VgpuProcessUtilizationSample, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
}

// existsAt reports whether NVML lists the instance at t.
func (v *VGPU) existsAt(t time.Time) bool {
	return !v.created.After(t) && (v.destroyed.IsZero() || v.destroyed.After(t))
}

// schedulerState encodes the scheduler state as NVML does: the
// parameters are a union of {timeslice} and, with adaptive round robin,
// {avgFactor, timeslice}, little-endian uint32s.
func schedulerState(c VGPUGPUConfig) nvml.VgpuSchedulerGetState {
	s := nvml.VgpuSchedulerGetState{ArrMode: nvml.VGPU_SCHEDULER_ARR_DISABLE}
	switch c.Scheduler {
	case collectors.SchedulerEqualShare:
		s.SchedulerPolicy = nvml.VGPU_SCHEDULER_POLICY_EQUAL_SHARE
	case collectors.SchedulerFixedShare:
		s.SchedulerPolicy = nvml.VGPU_SCHEDULER_POLICY_FIXED_SHARE
	default:
		s.SchedulerPolicy = nvml.VGPU_SCHEDULER_POLICY_BEST_EFFORT
	}
	if c.ARR {
		s.ArrMode = nvml.VGPU_SCHEDULER_ARR_ENABLE
		binary.LittleEndian.PutUint32(s.SchedulerParams[0:4], c.AvgFactor)
		binary.LittleEndian.PutUint32(s.SchedulerParams[4:8], c.TimesliceMicros)
	} else {
		binary.LittleEndian.PutUint32(s.SchedulerParams[0:4], c.TimesliceMicros)
	}
	return s
}

// newMock makes the instance's NVML functions. After its destruction an
// instance answers NOT_FOUND, on a lost GPU GPU_IS_LOST.
func (v *VGPU) newMock() *mock.VgpuInstance {
	g := v.gpu
	h := g.host
	gone := func() nvml.Return {
		h.mu.RLock()
		defer h.mu.RUnlock()
		switch {
		case g.lost:
			return nvml.ERROR_GPU_IS_LOST
		case !v.existsAt(h.now):
			return nvml.ERROR_NOT_FOUND
		}
		return nvml.SUCCESS
	}
	typ := v.newType()
	return &mock.VgpuInstance{
		GetUUIDFunc: func() (string, nvml.Return) {
			if ret := gone(); ret != nvml.SUCCESS {
				return "", ret
			}
			return v.uuid, nvml.SUCCESS
		},
		GetVmIDFunc: func() (string, nvml.VgpuVmIdType, nvml.Return) {
			if ret := gone(); ret != nvml.SUCCESS {
				return "", 0, ret
			}
			if v.vm.IDType == VMIDUUID {
				return v.vm.UUID, nvml.VGPU_VM_ID_UUID, nvml.SUCCESS
			}
			return v.vm.Name, nvml.VGPU_VM_ID_DOMAIN_ID, nvml.SUCCESS
		},
		GetTypeFunc: func() (nvml.VgpuTypeId, nvml.Return) {
			if ret := gone(); ret != nvml.SUCCESS {
				return nil, ret
			}
			return typ, nvml.SUCCESS
		},
		GetGpuInstanceIdFunc: func() (int, nvml.Return) {
			if ret := gone(); ret != nvml.SUCCESS {
				return 0, ret
			}
			if v.gi == nil {
				return int(^uint32(0)), nvml.SUCCESS
			}
			return int(v.gi.id), nvml.SUCCESS
		},
		GetFbUsageFunc: func() (uint64, nvml.Return) {
			if ret := gone(); ret != nvml.SUCCESS {
				return 0, ret
			}
			return v.fbUsed, nvml.SUCCESS
		},
		GetLicenseInfoFunc: func() (nvml.VgpuLicenseInfo, nvml.Return) {
			if ret := gone(); ret != nvml.SUCCESS {
				return nvml.VgpuLicenseInfo{}, ret
			}
			return nvml.VgpuLicenseInfo{IsLicensed: 1, CurrentState: 3}, nvml.SUCCESS
		},
		GetLicenseStatusFunc: func() (int, nvml.Return) {
			if ret := gone(); ret != nvml.SUCCESS {
				return 0, ret
			}
			return 1, nvml.SUCCESS
		},
		GetMdevUUIDFunc: func() (string, nvml.Return) {
			if ret := gone(); ret != nvml.SUCCESS {
				return "", ret
			}
			return v.mdev, nvml.SUCCESS
		},
		GetGpuPciIdFunc: func() (string, nvml.Return) {
			if ret := gone(); ret != nvml.SUCCESS {
				return "", ret
			}
			// The virtual function's address on the GPU's bus.
			return fmt.Sprintf("%s%02X.%X", g.busID[:len(g.busID)-4], v.vf/8, v.vf%8), nvml.SUCCESS
		},
		GetVmDriverVersionFunc: func() (string, nvml.Return) {
			if ret := gone(); ret != nvml.SUCCESS {
				return "", ret
			}
			return "570.133.20", nvml.SUCCESS
		},
	}
}

// newType makes the NVML vGPU type of the instance.
func (v *VGPU) newType() *mock.VgpuTypeId {
	t := v.typ
	profileID := ^uint32(0)
	if v.gi != nil {
		profileID = uint32(v.gi.profile.NVMLProfile)
	}
	return &mock.VgpuTypeId{
		GetNameFunc:  func() (string, nvml.Return) { return t.Name, nvml.SUCCESS },
		GetClassFunc: func() (string, nvml.Return) { return "Compute", nvml.SUCCESS },
		GetLicenseFunc: func() (string, nvml.Return) {
			return "NVIDIA-Virtual-Compute-Server,9.0;Quadro-Virtual-DWS,5.0", nvml.SUCCESS
		},
		GetMaxInstancesFunc: func(nvml.Device) (int, nvml.Return) { return t.MaxInstances, nvml.SUCCESS },
		GetMaxInstancesPerVmFunc: func() (int, nvml.Return) {
			return 1, nvml.SUCCESS
		},
		GetFramebufferSizeFunc:      func() (uint64, nvml.Return) { return uint64(t.FramebufferGB) << 30, nvml.SUCCESS },
		GetGpuInstanceProfileIdFunc: func() (uint32, nvml.Return) { return profileID, nvml.SUCCESS },
	}
}
