package sim

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// vgpuBoards are the board prefixes of NVIDIA's vGPU type names of the
// models the vGPU preset supports (NVIDIA Virtual GPU Software User
// Guide, "Virtual GPU Types for Supported GPUs"; gpucatalog.LookupVGPU
// reads the same names).
var vgpuBoards = map[string]string{
	gpucatalog.A100SXM4_40GB: "A100",
	gpucatalog.H100SXM5_80GB: "H100XM",
}

// VGPUModels lists the models the vGPU preset supports.
func VGPUModels() []string { return []string{gpucatalog.A100SXM4_40GB, gpucatalog.H100SXM5_80GB} }

// vgpuRole is a GPU's part in the vGPU preset.
type vgpuRole struct {
	cfg VGPUGPUConfig
	// slots are the vGPU types run side by side, each slot holding one VM
	// at a time; a MIG-backed GPU has one per GPU instance.
	slots []string
	// permanent: the slots are filled at the start and never emptied.
	permanent bool
	// replace is the chance that a slot whose VM stops gets a new one
	// later in the same step.
	replace float64
}

// vgpuRoles is the preset's layout on a model of memGB: GPU i has role
// i%8. Types are "<board>-<GB>C"; MIG-backed ones "<board>-<slices>-<GB>C".
func vgpuRoles(m modelSpec) ([]vgpuRole, error) {
	board, ok := vgpuBoards[m.name]
	if !ok {
		return nil, fmt.Errorf("vgpu preset: %s is not one of %v", m.name, VGPUModels())
	}
	memGB := m.mig.MemoryGB
	ts := func(div int) string { return board + "-" + strconv.Itoa(memGB/div) + "C" }
	var gis, migTypes []string
	for _, prefix := range []string{"3g", "2g", "1g"} {
		for _, p := range m.mig.Profiles {
			if strings.HasPrefix(p.Name, prefix+".") && !strings.Contains(p.Name, "+") {
				gis = append(gis, p.Name)
				migTypes = append(migTypes, fmt.Sprintf("%s-%d-%dC", board, p.ComputeSlices, p.MemoryGB))
				break
			}
		}
	}
	roles := []vgpuRole{
		// Fixed share, a mix of types: 2 × 1/4 + 3 × 1/10 of the GPU.
		{cfg: VGPUGPUConfig{Mode: TimeSlicedVGPU, Scheduler: collectors.SchedulerFixedShare, TimesliceMicros: 2000}, slots: []string{ts(4), ts(4), ts(10), ts(10), ts(10)}, replace: 0.3},
		// Equal share.
		{cfg: VGPUGPUConfig{Mode: TimeSlicedVGPU, Scheduler: collectors.SchedulerEqualShare, TimesliceMicros: 2000}, slots: []string{ts(4), ts(4), ts(4)}, replace: 0.3},
		// Best effort with adaptive round robin: by measured use.
		{cfg: VGPUGPUConfig{Mode: TimeSlicedVGPU, Scheduler: collectors.SchedulerBestEffort, ARR: true, AvgFactor: 33, TimesliceMicros: 1000}, slots: []string{ts(5), ts(5), ts(5)}, replace: 0.3},
		// Best effort on a GPU that reports no per-vGPU utilization: the
		// reader cannot tell when an instance came or went, so its VMs run
		// for good.
		{cfg: VGPUGPUConfig{Mode: TimeSlicedVGPU, Scheduler: collectors.SchedulerBestEffort, NoUtilization: true}, slots: []string{ts(8), ts(8)}, permanent: true},
		// MIG-backed: one vGPU per GPU instance, one compute slice unused.
		{cfg: VGPUGPUConfig{Mode: MIGBackedVGPU, GPUInstances: gis}, slots: migTypes, replace: 0.3},
		// Passed through to one VM.
		{cfg: VGPUGPUConfig{Mode: Passthrough}},
		// Fixed share, half GPUs replaced within steps.
		{cfg: VGPUGPUConfig{Mode: TimeSlicedVGPU, Scheduler: collectors.SchedulerFixedShare}, slots: []string{ts(2), ts(2)}, replace: 0.7},
		// Bare metal and idle.
		{},
	}
	for _, r := range roles {
		for _, t := range r.slots {
			if _, ok := gpucatalog.LookupVGPU(m.name, t); !ok {
				return nil, fmt.Errorf("vgpu preset: %s is no vGPU type of %s", t, m.name)
			}
		}
	}
	return roles, nil
}

// PresetVGPU is the vGPU host layout the fleet uses, for gpus GPUs of
// model (one of VGPUModels): GPU i has role i%8 of fixed share (a mix
// of types), equal share, best effort, best effort without per-vGPU
// utilization, MIG-backed vGPU (3g+2g+1g), passthrough, fixed share of
// half GPUs, and bare metal.
func PresetVGPU(model string, gpus int) (*VGPUConfig, error) {
	m, ok := lookupModel(model)
	if !ok {
		return nil, fmt.Errorf("vgpu preset: %q is not simulated", model)
	}
	roles, err := vgpuRoles(m)
	if err != nil {
		return nil, err
	}
	c := &VGPUConfig{}
	for i := 0; i < gpus; i++ {
		c.GPUs = append(c.GPUs, roles[i%len(roles)].cfg)
	}
	return c, nil
}

// vgpuVMSpec is one VM of the preset's pool.
type vgpuVMSpec struct {
	name    string
	tenant  tenantSpec
	mapping VMMapping
	idType  VMIDType
}

// vgpuScheduler starts and stops a vGPU host's VMs: at each step
// boundary it picks the instants inside the coming step at which VMs
// stop and start.
type vgpuScheduler struct {
	h     *Host
	nth   int // the host's place among the fleet's vGPU hosts, from 0
	rng   *rand.Rand
	seed  uint64
	slots []*vgpuSlot
	vms   []string         // the pool, in order
	busy  map[string]int64 // vm → the last step it runs in (-1: running on)
}

type vgpuSlot struct {
	gpu       *GPU
	typ       string
	role      *vgpuRole
	cur       *VGPU
	endStep   int64 // the step its VM stops in
	permanent bool
}

func newVGPUScheduler(h *Host, nth int, seed uint64) *vgpuScheduler {
	return &vgpuScheduler{h: h, nth: nth, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x76675075)), busy: map[string]int64{}}
}

// layout defines the VM pool and the slots, and passes the passthrough
// GPUs through. The pool: five VMs per mapped tenant, most mapped by
// libvirt metadata, every fifth by the map file, some known to NVML by
// UUID; and two CI VMs nothing maps. VM names are unique in the fleet
// (the map file has one namespace): the n-th vGPU host's are numbered
// from 5n+1 (vm-acme-01 to -05 on the first, -06 to -10 on the second).
func (s *vgpuScheduler) layout() error {
	roles, err := vgpuRoles(s.h.model)
	if err != nil {
		return err
	}
	var pool []vgpuVMSpec
	k := 0
	for _, t := range fleetTenants {
		if t.department == "" {
			continue
		}
		for j := 1; j <= 5; j++ {
			spec := vgpuVMSpec{name: fmt.Sprintf("vm-%s-%02d", t.name, 5*s.nth+j), tenant: t}
			if k%5 == 3 {
				spec.mapping = VMByMapFile
			}
			if k%7 == 2 || k%7 == 3 {
				spec.idType = VMIDUUID
			}
			pool = append(pool, spec)
			k++
		}
	}
	pool = append(pool, vgpuVMSpec{name: fmt.Sprintf("vm-ci-%02d", 2*s.nth+1)}, vgpuVMSpec{name: fmt.Sprintf("vm-ci-%02d", 2*s.nth+2), idType: VMIDUUID})
	for i, spec := range pool {
		vm := VM{
			Name: spec.name, Tenant: spec.tenant.name, Department: spec.tenant.department,
			Mapping: spec.mapping, IDType: spec.idType,
			Util:          vmUtil(splitmix(s.seed^uint64(i)<<20), i%3),
			FBUsedPercent: 20 + uint32(splitmix(s.seed+uint64(i))%71),
		}
		if err := s.h.DefineVM(vm); err != nil {
			return err
		}
		s.vms = append(s.vms, spec.name)
	}
	for i, g := range s.h.gpus {
		r := &roles[i%len(roles)]
		if r.cfg.Mode == Passthrough {
			t := fleetTenants[i%4]
			name := fmt.Sprintf("vm-%s-pt%02d", t.name, s.nth*len(s.h.gpus)+i)
			vm := VM{Name: name, Tenant: t.name, Department: t.department, Util: vmUtil(splitmix(s.seed+uint64(i)<<32), 0)}
			if err := s.h.DefineVM(vm); err != nil {
				return err
			}
			if err := g.PassThrough(name); err != nil {
				return err
			}
			continue
		}
		for _, t := range r.slots {
			s.slots = append(s.slots, &vgpuSlot{gpu: g, typ: t, role: r, permanent: r.permanent})
		}
	}
	return nil
}

// vmUtil is a VM's utilization per step: busy (training-like), bursty
// (inference) or mostly idle (a desktop), a pure function of the step.
func vmUtil(seed uint64, kind int) func(step int64) uint32 {
	return func(step int64) uint32 {
		x := splitmix(seed + uint64(step))
		switch kind {
		case 0:
			return 60 + uint32(x%41)
		case 1:
			if x%10 < 6 {
				return 5 + uint32(x>>8%30)
			}
			return 50 + uint32(x>>8%51)
		}
		if x%4 != 0 {
			return 0
		}
		return 1 + uint32(x>>8%15)
	}
}

// boundary schedules the coming step [t, t+step): VMs whose time is up
// stop at a random instant inside it (and some slots get a new VM later
// in the same step), free slots start one at a random instant inside it;
// at the host's start the first VMs start at once.
func (s *vgpuScheduler) boundary(t time.Time) error {
	h := s.h
	step := h.stepOf(t)
	first := t.Equal(h.cfg.Start.UTC())
	stepUs := int64(h.cfg.Step / time.Microsecond)
	inside := func(lo int64) time.Time { // a whole µs in (t+lo, t+step)
		return t.Add(time.Duration(lo+1+s.rng.Int64N(stepUs-lo-1)) * time.Microsecond)
	}
	for _, sl := range s.slots {
		if sl.cur != nil && !sl.permanent && sl.endStep == step {
			at := inside(0)
			if err := sl.cur.Destroy(at); err != nil {
				return err
			}
			s.busy[sl.cur.vm.Name] = step
			sl.cur = nil
			if off := int64(at.Sub(t) / time.Microsecond); off < stepUs-2 && s.rng.Float64() < sl.role.replace {
				if err := s.start(sl, step, inside(off)); err != nil {
					return err
				}
			}
			continue
		}
		if sl.cur != nil {
			continue
		}
		switch {
		case first && (sl.permanent || s.rng.Float64() < 0.7):
			if err := s.start(sl, step, t); err != nil {
				return err
			}
		case !first && !sl.permanent && s.rng.Float64() < 0.05:
			if err := s.start(sl, step, inside(0)); err != nil {
				return err
			}
		}
	}
	return nil
}

// start gives the slot a free VM from at, for 2 to 60 minutes (at least
// two steps).
func (s *vgpuScheduler) start(sl *vgpuSlot, step int64, at time.Time) error {
	var free []string
	for _, name := range s.vms {
		if last, running := s.busy[name]; !running || (last >= 0 && last < step) {
			free = append(free, name)
		}
	}
	if len(free) == 0 {
		return nil
	}
	vm := free[s.rng.IntN(len(free))]
	v, err := sl.gpu.CreateVGPU(VGPUSpec{VM: vm, Type: sl.typ, At: at})
	if err != nil {
		return err
	}
	s.busy[vm] = -1
	sl.cur = v
	steps := int64(time.Duration(2+s.rng.IntN(59)) * time.Minute / s.h.cfg.Step)
	sl.endStep = step + max(2, steps)
	return nil
}
