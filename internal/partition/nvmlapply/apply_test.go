package nvmlapply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/partition"
)

// smiProfileID is what real drivers report as GpuInstanceProfileInfo.Id (the
// "Profile ID" of nvidia-smi mig -lgip), which differs from the profile
// index passed to GetGpuInstanceProfileInfo. The fake uses it so Apply is
// tested against that distinction.
var smiProfileID = map[int]uint32{0: 19, 7: 20, 9: 15, 1: 14, 2: 9, 3: 5, 4: 0}

// fakeGPU is a go-nvml mock device that behaves like real MIG hardware for
// the calls Apply makes: it enforces NVIDIA's placements from gpucatalog
// (not go-nvml's mock tables), keeps GPU and compute instances, and records
// every create and destroy.
type fakeGPU struct {
	*mock.Device
	uuid, name string
	model      gpucatalog.Model
	migMode    int
	gis        []*fakeGI
	nextID     uint32
	procs      []nvml.ProcessInfo
	log        []string
	failCreate bool // the next GPU instance create fails
}

type fakeGI struct {
	*mock.GpuInstance
	dev   *fakeGPU
	id    uint32
	prof  gpucatalog.Profile
	start int
	cis   []*mock.ComputeInstance
}

func newFakeGPU(uuid, name, model string) *fakeGPU {
	m, _ := gpucatalog.LookupModel(model)
	f := &fakeGPU{Device: &mock.Device{}, uuid: uuid, name: name, model: m, migMode: nvml.DEVICE_MIG_ENABLE}
	d := f.Device
	d.GetUUIDFunc = func() (string, nvml.Return) { return f.uuid, nvml.SUCCESS }
	d.GetNameFunc = func() (string, nvml.Return) { return f.name, nvml.SUCCESS }
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return f.migMode, f.migMode, nvml.SUCCESS }
	d.GetGpuInstanceProfileInfoFunc = func(idx int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		p, ok := f.profileByIndex(idx)
		if !ok {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.GpuInstanceProfileInfo{Id: smiProfileID[idx], SliceCount: uint32(p.ComputeSlices),
			InstanceCount: uint32(p.MaxInstances), MemorySizeMB: uint64(p.MemoryGB) * 1024}, nvml.SUCCESS
	}
	d.GetGpuInstancesFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
		var out []nvml.GpuInstance
		for _, gi := range f.gis {
			if smiProfileID[gi.prof.NVMLProfile] == info.Id {
				out = append(out, gi)
			}
		}
		return out, nvml.SUCCESS
	}
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		if f.failCreate {
			f.failCreate = false
			return nil, nvml.ERROR_UNKNOWN
		}
		var prof gpucatalog.Profile
		found := false
		for _, p := range f.model.Profiles {
			if smiProfileID[p.NVMLProfile] == info.Id {
				prof, found = p, true
			}
		}
		if !found || int(pl.Size) != prof.MemorySlices || !prof.ValidPlacement(int(pl.Start)) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		mask := gpucatalog.Placement{Start: int(pl.Start), Size: int(pl.Size)}.Mask()
		n := 0
		for _, gi := range f.gis {
			if gi.mask()&mask != 0 {
				return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
			}
			if gi.prof.Name == prof.Name {
				n++
			}
		}
		if n >= prof.MaxInstances {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		gi := f.addGI(prof, int(pl.Start))
		f.log = append(f.log, fmt.Sprintf("create %s@%d", prof.Name, pl.Start))
		return gi, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return f.procs, nvml.SUCCESS }
	d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	return f
}

func (f *fakeGPU) profileByIndex(idx int) (gpucatalog.Profile, bool) {
	for _, p := range f.model.Profiles {
		if p.NVMLProfile == idx {
			return p, true
		}
	}
	return gpucatalog.Profile{}, false
}

func (g *fakeGI) mask() uint8 {
	return gpucatalog.Placement{Start: g.start, Size: g.prof.MemorySlices}.Mask()
}

// addGI makes a GPU instance (as an existing one, or for a create).
func (f *fakeGPU) addGI(prof gpucatalog.Profile, start int) *fakeGI {
	gi := &fakeGI{GpuInstance: &mock.GpuInstance{}, dev: f, id: f.nextID, prof: prof, start: start}
	f.nextID++
	m := gi.GpuInstance
	m.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) {
		return nvml.GpuInstanceInfo{Device: f, Id: gi.id, ProfileId: smiProfileID[prof.NVMLProfile],
			Placement: nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(prof.MemorySlices)}}, nvml.SUCCESS
	}
	m.GetComputeInstanceProfileInfoFunc = func(ci, eng int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
		// A GPU instance offers compute profiles up to its own size.
		sizes := map[int]int{0: 1, 1: 2, 2: 3, 3: 4, 4: 7}
		if n, ok := sizes[ci]; !ok || n > prof.ComputeSlices || eng != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.ComputeInstanceProfileInfo{Id: uint32(ci), SliceCount: uint32(sizes[ci])}, nvml.SUCCESS
	}
	m.CreateComputeInstanceFunc = func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		if int(info.SliceCount) != prof.ComputeSlices || len(gi.cis) > 0 {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		ci := &mock.ComputeInstance{}
		ci.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) {
			return nvml.ComputeInstanceInfo{Device: f, GpuInstance: gi, ProfileId: info.Id}, nvml.SUCCESS
		}
		ci.DestroyFunc = func() nvml.Return {
			gi.cis = slices.DeleteFunc(gi.cis, func(c *mock.ComputeInstance) bool { return c == ci })
			f.log = append(f.log, fmt.Sprintf("destroy ci of %s@%d", prof.Name, start))
			return nvml.SUCCESS
		}
		gi.cis = append(gi.cis, ci)
		return ci, nvml.SUCCESS
	}
	m.GetComputeInstancesFunc = func(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
		var out []nvml.ComputeInstance
		for _, ci := range gi.cis {
			if i, _ := ci.GetInfo(); i.ProfileId == info.Id {
				out = append(out, ci)
			}
		}
		return out, nvml.SUCCESS
	}
	m.DestroyFunc = func() nvml.Return {
		if len(gi.cis) > 0 {
			return nvml.ERROR_IN_USE // real drivers refuse while compute instances exist
		}
		f.gis = slices.DeleteFunc(f.gis, func(x *fakeGI) bool { return x == gi })
		f.log = append(f.log, fmt.Sprintf("destroy %s@%d", prof.Name, start))
		return nvml.SUCCESS
	}
	f.gis = append(f.gis, gi)
	return gi
}

// withInstance gives the fake an existing GPU instance with its compute
// instance, as after `nvidia-smi mig -cgi … -C`.
func (f *fakeGPU) withInstance(profile string, start int) *fakeGI {
	p, ok := gpucatalog.Lookup(f.model.Name, profile)
	if !ok {
		panic("test setup: unknown profile " + profile)
	}
	gi := f.addGI(p, start)
	ciInfo, _ := gi.GetComputeInstanceProfileInfo(p.NVMLComputeProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		panic("test setup: " + ret.Error())
	}
	return gi
}

func (f *fakeGPU) layout() []slot {
	var out []slot
	for _, gi := range f.gis {
		out = append(out, slot{gi.prof.Name, gi.start})
	}
	slices.SortFunc(out, func(a, b slot) int { return a.start - b.start })
	return out
}

func fakeLib(devs ...*fakeGPU) *mock.Interface {
	return &mock.Interface{
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
	}
}

// planFor runs the planner on a fleet read from the fakes, as an operator
// would from a fleet file exported on the host.
func planFor(t *testing.T, demand partition.Demand, devs ...*fakeGPU) partition.Plan {
	t.Helper()
	var fleet partition.Fleet
	for _, d := range devs {
		g := partition.GPU{Host: "node1", UUID: d.uuid, Model: d.model.Name}
		for _, gi := range d.gis {
			busy := slices.ContainsFunc(d.procs, func(p nvml.ProcessInfo) bool { return p.GpuInstanceId == gi.id })
			g.Instances = append(g.Instances, partition.Instance{Profile: gi.prof.Name, Start: ptr(gi.start), UUID: fmt.Sprintf("MIG-%s-%d", d.uuid, gi.id), Busy: busy})
		}
		fleet.GPUs = append(fleet.GPUs, g)
	}
	plan, err := partition.Solve(fleet, demand)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func TestNVMLProfileConstantsMatchGoNVML(t *testing.T) {
	// gpucatalog copies these values to stay free of cgo; pin them to go-nvml.
	want := map[string]int{
		"1g.10gb": nvml.GPU_INSTANCE_PROFILE_1_SLICE, "1g.10gb+me": nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1,
		"1g.20gb": nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, "2g.20gb": nvml.GPU_INSTANCE_PROFILE_2_SLICE,
		"3g.40gb": nvml.GPU_INSTANCE_PROFILE_3_SLICE, "4g.40gb": nvml.GPU_INSTANCE_PROFILE_4_SLICE,
		"7g.80gb": nvml.GPU_INSTANCE_PROFILE_7_SLICE,
	}
	ci := map[int]int{1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
		3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, 7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE}
	for name, id := range want {
		p, _ := gpucatalog.Lookup(gpucatalog.H100SXM5_80GB, name)
		if p.NVMLProfile != id || p.NVMLComputeProfile != ci[p.ComputeSlices] {
			t.Errorf("%s: NVML profile %d compute %d, go-nvml has %d and %d", name, p.NVMLProfile, p.NVMLComputeProfile, id, ci[p.ComputeSlices])
		}
	}
}

func TestApplyCreatesThePlannedLayout(t *testing.T) {
	dev := newFakeGPU("GPU-a", "NVIDIA H100 80GB HBM3", gpucatalog.H100SXM5_80GB)
	dev.withInstance("1g.10gb", 0) // idle, nobody wants it: in the way of the 4g
	plan := planFor(t, oneTenant(gpucatalog.H100SXM5_80GB,
		partition.Request{Profile: "4g.40gb", Count: 1}, partition.Request{Profile: "2g.20gb", Count: 1}, partition.Request{Profile: "1g.10gb", Count: 1}), dev)

	rep, err := Apply(context.Background(), fakeLib(dev), plan, ApplyOptions{Execute: true})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	want := layoutOf(plan.GPUs[0])
	if got := dev.layout(); !slices.Equal(got, want) {
		t.Errorf("device layout %v, plan %v", got, want)
	}
	for _, gi := range dev.gis {
		if len(gi.cis) != 1 {
			t.Errorf("%s@%d has %d compute instances, want 1 spanning it", gi.prof.Name, gi.start, len(gi.cis))
		}
	}
	for _, st := range rep.Steps {
		if !st.Done {
			t.Errorf("step %+v not done", st)
		}
	}
	// The 1g at slot 0 is reused or moved; either way the device now has
	// exactly the plan and a second apply has nothing to do.
	before := len(dev.log)
	rep, err = Apply(context.Background(), fakeLib(dev), plan, ApplyOptions{Execute: true})
	if err != nil || len(rep.Steps) != 0 || len(dev.log) != before {
		t.Errorf("second apply: %d steps, err %v, device calls %v", len(rep.Steps), err, dev.log[before:])
	}
}

func TestApplyDestroysComputeInstancesFirst(t *testing.T) {
	dev := newFakeGPU("GPU-a", "NVIDIA A100-SXM4-40GB", gpucatalog.A100SXM4_40GB)
	dev.withInstance("3g.20gb", 0)
	dev.withInstance("3g.20gb", 4)
	plan := planFor(t, oneTenant(gpucatalog.A100SXM4_40GB, partition.Request{Profile: "7g.40gb", Count: 1}), dev)
	if _, err := Apply(context.Background(), fakeLib(dev), plan, ApplyOptions{Execute: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	want := []string{"destroy ci of 3g.20gb@0", "destroy 3g.20gb@0", "destroy ci of 3g.20gb@4", "destroy 3g.20gb@4", "create 7g.40gb@0"}
	if !slices.Equal(dev.log, want) {
		t.Errorf("device calls %v, want %v", dev.log, want)
	}
}

func TestApplyDryRunChangesNothing(t *testing.T) {
	dev := newFakeGPU("GPU-a", "NVIDIA H200", gpucatalog.H200SXM5_141GB)
	dev.withInstance("7g.141gb", 0)
	plan := planFor(t, oneTenant(gpucatalog.H200SXM5_141GB, partition.Request{Profile: "1g.18gb", Count: 7}), dev)
	rep, err := Apply(context.Background(), fakeLib(dev), plan, ApplyOptions{})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if !rep.DryRun || len(rep.Steps) != 8 {
		t.Errorf("dry run reported %d steps (dry %t), want 1 destroy and 7 creates", len(rep.Steps), rep.DryRun)
	}
	if len(dev.log) != 0 || !slices.Equal(dev.layout(), []slot{{"7g.141gb", 0}}) {
		t.Errorf("dry run touched the device: %v", dev.log)
	}
}

// Each refusal leaves every device as it was, including devices that had
// nothing wrong with them.
func TestApplyRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(bad *fakeGPU, plan *partition.Plan)
		want  string
	}{
		{"MIG mode off", func(bad *fakeGPU, _ *partition.Plan) { bad.migMode = nvml.DEVICE_MIG_DISABLE }, "MIG mode is off"},
		{"instance to remove has running processes", func(bad *fakeGPU, _ *partition.Plan) {
			// The plan was made while it was idle; work started since.
			bad.procs = []nvml.ProcessInfo{{Pid: 4242, GpuInstanceId: bad.gis[0].id}}
		}, "has 1 running processes"},
		{"device is another model", func(bad *fakeGPU, _ *partition.Plan) { bad.name = "NVIDIA H200" }, `device is "NVIDIA H200", the plan is for H100-SXM5-80GB`},
		{"device model unknown", func(bad *fakeGPU, _ *partition.Plan) { bad.name = "NVIDIA H100 PCIe" }, "the plan is for H100-SXM5-80GB"},
		{"device gained an instance the plan does not know", func(bad *fakeGPU, _ *partition.Plan) { bad.withInstance("1g.10gb", 6) }, "the plan does not know"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			good := newFakeGPU("GPU-good", "NVIDIA H100 80GB HBM3", gpucatalog.H100SXM5_80GB)
			bad := newFakeGPU("GPU-bad", "NVIDIA H100 80GB HBM3", gpucatalog.H100SXM5_80GB)
			bad.withInstance("1g.10gb", 0) // idle now, in the way of a 3g
			plan := planFor(t, partition.Demand{Tenants: []partition.TenantDemand{
				{Tenant: "acme", Reserved: []partition.Request{{Model: gpucatalog.H100SXM5_80GB, Profile: "3g.40gb", Count: 2}}},
				{Tenant: "beta", Reserved: []partition.Request{{Model: gpucatalog.H100SXM5_80GB, Profile: "3g.40gb", Count: 2}}},
			}}, good, bad)
			if !plan.GPUs[0].Changed || !plan.GPUs[1].Changed || len(plan.GPUs[1].Remove) != 1 {
				t.Fatalf("test setup: want both GPUs changed and the 1g removed, got %+v", plan.GPUs)
			}
			tc.setup(bad, &plan)
			goodBefore, badBefore := good.layout(), bad.layout()
			_, err := Apply(context.Background(), fakeLib(good, bad), plan, ApplyOptions{Execute: true})
			if !errors.Is(err, ErrRefused) || !fault.IsPrecondition(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Apply error %v, want a refusal (a precondition) containing %q", err, tc.want)
			}
			if len(good.log)+len(bad.log) != 0 || !slices.Equal(good.layout(), goodBefore) || !slices.Equal(bad.layout(), badBefore) {
				t.Errorf("refused apply changed devices: good %v, bad %v", good.log, bad.log)
			}
		})
	}
}

func TestApplyRefusesWhenAKeptInstanceIsGone(t *testing.T) {
	dev := newFakeGPU("GPU-a", "NVIDIA H100 80GB HBM3", gpucatalog.H100SXM5_80GB)
	dev.withInstance("3g.40gb", 4)
	plan := planFor(t, oneTenant(gpucatalog.H100SXM5_80GB, partition.Request{Profile: "3g.40gb", Count: 2}), dev)
	if got := layoutOf(plan.GPUs[0]); !slices.Equal(got, []slot{{"3g.40gb", 0}, {"3g.40gb", 4}}) || plan.GPUs[0].Instances[1].Action != partition.Keep {
		t.Fatalf("test setup: plan %+v", plan.GPUs[0])
	}
	// Someone destroys the kept instance between plan and apply.
	ci := dev.gis[0].cis[0]
	ci.Destroy()
	dev.gis[0].Destroy()
	dev.log = nil
	_, err := Apply(context.Background(), fakeLib(dev), plan, ApplyOptions{Execute: true})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "kept instance 3g.40gb at slot 4 is not on the device") || len(dev.log) != 0 {
		t.Errorf("Apply error %v, calls %v", err, dev.log)
	}
}

func TestApplyRejectsAnInvalidPlan(t *testing.T) {
	dev := newFakeGPU("GPU-a", "NVIDIA H100 80GB HBM3", gpucatalog.H100SXM5_80GB)
	plan := partition.Plan{GPUs: []partition.GPUPlan{{UUID: "GPU-a", Model: gpucatalog.H100SXM5_80GB, Changed: true, Instances: []partition.PlannedInstance{
		{Profile: "3g.40gb", Start: 2, Action: partition.Create},
	}}}}
	_, err := Apply(context.Background(), fakeLib(dev), plan, ApplyOptions{Execute: true})
	if err == nil || !strings.Contains(err.Error(), "cannot start at slot 2") || len(dev.log) != 0 {
		t.Errorf("Apply error %v, device calls %v: want the plan rejected before any call", err, dev.log)
	}
}

func TestApplyPlanForOtherHosts(t *testing.T) {
	dev := newFakeGPU("GPU-here", "NVIDIA H100 80GB HBM3", gpucatalog.H100SXM5_80GB)
	plan := partition.Plan{GPUs: []partition.GPUPlan{{UUID: "GPU-elsewhere", Model: gpucatalog.H100SXM5_80GB}}}
	_, err := Apply(context.Background(), fakeLib(dev), plan, ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), "none of the plan's 1 GPUs is on this host") {
		t.Errorf("Apply error %v", err)
	}
}

func TestApplyStopsAtTheFirstFailedCall(t *testing.T) {
	dev := newFakeGPU("GPU-a", "NVIDIA H100 80GB HBM3", gpucatalog.H100SXM5_80GB)
	plan := planFor(t, oneTenant(gpucatalog.H100SXM5_80GB, partition.Request{Profile: "3g.40gb", Count: 2}), dev)
	dev.failCreate = true
	rep, err := Apply(context.Background(), fakeLib(dev), plan, ApplyOptions{Execute: true})
	if err == nil || !strings.Contains(err.Error(), "apply stopped after 0 of 2 steps") {
		t.Fatalf("Apply error %v", err)
	}
	if rep.Steps[0].Done || rep.Steps[1].Done {
		t.Errorf("steps %+v: none should be done", rep.Steps)
	}
	// A re-run finishes the job.
	if _, err := Apply(context.Background(), fakeLib(dev), plan, ApplyOptions{Execute: true}); err != nil {
		t.Fatalf("re-run: %v", err)
	}
	if got := dev.layout(); !slices.Equal(got, []slot{{"3g.40gb", 0}, {"3g.40gb", 4}}) {
		t.Errorf("layout %v", got)
	}
}

// A fleet read from usage samples has no placements; the planner guesses
// them (first valid slot). Apply trusts the device: it matches the kept
// instance wherever it really is and refuses creates that would collide.
func TestApplyUsesDevicePlacementsForInferredInstances(t *testing.T) {
	// planInferred puts a busy instance of profile at slot start of a GPU,
	// where the planner will guess slot 0, and plans one instance of want
	// beside it on a fleet that does not know the start.
	planInferred := func(t *testing.T, profile string, start int, want string) (*fakeGPU, partition.Plan) {
		t.Helper()
		dev := newFakeGPU("GPU-a", "NVIDIA H100 80GB HBM3", gpucatalog.H100SXM5_80GB)
		gi := dev.withInstance(profile, start)
		dev.procs = []nvml.ProcessInfo{{Pid: 1, GpuInstanceId: gi.id}}
		fleet := partition.Fleet{GPUs: []partition.GPU{{Host: "h", UUID: "GPU-a", Model: gpucatalog.H100SXM5_80GB, Instances: []partition.Instance{
			{Profile: profile, UUID: "MIG-x", Tenant: "x", Busy: true},
		}}}}
		plan, err := partition.Solve(fleet, oneTenant(gpucatalog.H100SXM5_80GB, partition.Request{Profile: want, Count: 1}))
		if err != nil {
			t.Fatal(err)
		}
		return dev, plan
	}
	t.Run("wrong guess, no collision: applied", func(t *testing.T) {
		dev, plan := planInferred(t, "1g.10gb", 6, "2g.20gb")
		kept := plan.GPUs[0].Instances[0]
		if !kept.Inferred || kept.Start != 0 {
			t.Fatalf("test setup: want the 1g guessed at slot 0, got %+v", plan.GPUs[0].Instances)
		}
		if _, err := Apply(context.Background(), fakeLib(dev), plan, ApplyOptions{Execute: true}); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if len(dev.gis) != 2 || len(dev.log) != 1 || !strings.HasPrefix(dev.log[0], "create 2g.20gb@") {
			t.Errorf("device calls %v, layout %v: want one 2g created and the busy 1g untouched", dev.log, dev.layout())
		}
	})
	t.Run("wrong guess, collision: refused", func(t *testing.T) {
		dev, plan := planInferred(t, "3g.40gb", 4, "3g.40gb")
		if got := layoutOf(plan.GPUs[0]); !slices.Equal(got, []slot{{"3g.40gb", 0}, {"3g.40gb", 4}}) {
			t.Fatalf("test setup: plan %v", got)
		}
		_, err := Apply(context.Background(), fakeLib(dev), plan, ApplyOptions{Execute: true})
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "3g.40gb at slot 4 would overlap an instance that stays") || len(dev.log) != 0 {
			t.Errorf("Apply error %v, calls %v", err, dev.log)
		}
	})
}

type slot struct {
	profile string
	start   int
}

func layoutOf(g partition.GPUPlan) []slot {
	var out []slot
	for _, in := range g.Instances {
		out = append(out, slot{in.Profile, in.Start})
	}
	return out
}

func oneTenant(model string, reqs ...partition.Request) partition.Demand {
	for i := range reqs {
		reqs[i].Model = model
	}
	return partition.Demand{Tenants: []partition.TenantDemand{{Tenant: "acme", Reserved: reqs}}}
}

func ptr[T any](v T) *T { return &v }

// Init: a host without the driver is told so; a failed init is an error
// with NVML's code; a good one shuts the library down when done.
func TestInit(t *testing.T) {
	shut := 0
	for _, tc := range []struct {
		ret  nvml.Return
		want string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, "NVML library (libnvidia-ml.so.1) not found"},
		{nvml.ERROR_NO_PERMISSION, "initialise NVML"},
		{nvml.SUCCESS, ""},
	} {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return tc.ret }, ShutdownFunc: func() nvml.Return { shut++; return nvml.SUCCESS }}
		shutdown, err := Init(lib)
		if tc.want == "" {
			if err != nil {
				t.Fatal(err)
			}
			shutdown()
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("init %v: %v, want %q", tc.ret, err, tc.want)
		}
	}
	if shut != 1 {
		t.Errorf("shut down %d times, want once", shut)
	}
}
