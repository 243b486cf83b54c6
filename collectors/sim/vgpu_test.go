package sim_test

import (
	"encoding/binary"
	"encoding/xml"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/sim"
)

const stepUs = 10_000_000 // the vGPU tests' 10 s step

// newVGPUHost is a one-host A100-SXM4-40GB hypervisor with 10 s steps,
// the given GPUs, and VMs: vm-a (acme, metadata), vm-b (globex, map
// file), vm-c (initech, known to NVML by UUID) and vm-x (nothing maps
// it, known by UUID), each at a constant utilization.
func newVGPUHost(t *testing.T, gpus ...sim.VGPUGPUConfig) *sim.Host {
	t.Helper()
	h, err := sim.NewHost(sim.HostConfig{
		Name: "hv", Model: "A100-SXM4-40GB", GPUs: len(gpus), Seed: 1,
		Start: fleetStart, Step: 10 * time.Second, Root: t.TempDir(),
		VGPU: &sim.VGPUConfig{GPUs: gpus},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range []sim.VM{
		{Name: "vm-a", Tenant: "acme", Department: "research", SMUtil: 30, FBUsedPercent: 50},
		{Name: "vm-b", Tenant: "globex", Department: "platform", Mapping: sim.VMByMapFile, SMUtil: 50, FBUsedPercent: 25},
		{Name: "vm-c", Tenant: "initech", IDType: sim.VMIDUUID, SMUtil: 40, FBUsedPercent: 100},
		{Name: "vm-x", IDType: sim.VMIDUUID, SMUtil: 80, FBUsedPercent: 10},
	} {
		if err := h.DefineVM(vm); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func vmByName(t *testing.T, h *sim.Host, name string) sim.VM {
	t.Helper()
	for _, vm := range h.VMs() {
		if vm.Name == name {
			return vm
		}
	}
	t.Fatalf("no vm %s", name)
	return sim.VM{}
}

// create makes a vGPU at offset off from the host's time.
func create(t *testing.T, g *sim.GPU, vm, typ string, at time.Time) *sim.VGPU {
	t.Helper()
	v, err := g.CreateVGPU(sim.VGPUSpec{VM: vm, Type: typ, At: at})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func device(t *testing.T, h *sim.Host, i int) gonvml.Device {
	t.Helper()
	d, ret := h.NVML().DeviceGetHandleByIndex(i)
	if ret != gonvml.SUCCESS {
		t.Fatalf("device %d: %v", i, ret)
	}
	return d
}

func at(h *sim.Host, d time.Duration) time.Time { return h.Now().Add(d) }

func TestVGPUHostAnswersVirtualizationQueries(t *testing.T) {
	h := newVGPUHost(t,
		sim.VGPUGPUConfig{},
		sim.VGPUGPUConfig{Mode: sim.TimeSlicedVGPU},
		sim.VGPUGPUConfig{Mode: sim.MIGBackedVGPU, GPUInstances: []string{"3g.20gb", "2g.10gb", "1g.5gb"}},
		sim.VGPUGPUConfig{Mode: sim.Passthrough},
	)
	cases := []struct {
		name     string
		gpu      int
		mode     gonvml.GpuVirtualizationMode
		hostMode gonvml.Return // of GetHostVgpuMode
		mig      int
	}{
		{"bare metal is NONE", 0, gonvml.GPU_VIRTUALIZATION_MODE_NONE, gonvml.ERROR_NOT_SUPPORTED, gonvml.DEVICE_MIG_DISABLE},
		{"time-sliced vGPU host is HOST_VGPU on SR-IOV", 1, gonvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU, gonvml.SUCCESS, gonvml.DEVICE_MIG_DISABLE},
		{"MIG-backed vGPU host is HOST_VGPU in MIG mode", 2, gonvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU, gonvml.SUCCESS, gonvml.DEVICE_MIG_ENABLE},
		{"passthrough is PASSTHROUGH", 3, gonvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH, gonvml.ERROR_NOT_SUPPORTED, gonvml.DEVICE_MIG_DISABLE},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := device(t, h, tc.gpu)
			if mode, ret := d.GetVirtualizationMode(); ret != gonvml.SUCCESS || mode != tc.mode {
				t.Errorf("virtualization mode %v %v, want %v", mode, ret, tc.mode)
			}
			hm, ret := d.GetHostVgpuMode()
			if ret != tc.hostMode || (ret == gonvml.SUCCESS && hm != gonvml.HOST_VGPU_MODE_SRIOV) {
				t.Errorf("host vgpu mode %v %v, want SR-IOV / %v", hm, ret, tc.hostMode)
			}
			if mode, _, ret := d.GetMigMode(); ret != gonvml.SUCCESS || mode != tc.mig {
				t.Errorf("mig mode %v %v, want %v", mode, ret, tc.mig)
			}
			if procs, ret := d.GetComputeRunningProcesses(); ret != gonvml.SUCCESS || len(procs) != 0 {
				t.Errorf("processes %v %v, want none", procs, ret)
			}
			_, ret = d.GetActiveVgpus()
			if want := tc.hostMode; ret != want {
				t.Errorf("active vgpus: %v, want %v", ret, want)
			}
		})
	}
	// MIG mode without MIG devices: the compute instances are the VMs'.
	d := device(t, h, 2)
	if n, ret := d.GetMaxMigDeviceCount(); ret != gonvml.SUCCESS || n != 7 {
		t.Fatalf("max mig devices %d %v", n, ret)
	}
	for i := 0; i < 7; i++ {
		if _, ret := d.GetMigDeviceHandleByIndex(i); ret != gonvml.ERROR_NOT_FOUND {
			t.Errorf("mig device %d: %v, want NOT_FOUND", i, ret)
		}
	}
	for id := 1; id <= 3; id++ {
		gi, ret := d.GetGpuInstanceById(id)
		if ret != gonvml.SUCCESS {
			t.Fatalf("gpu instance %d: %v", id, ret)
		}
		if info, ret := gi.GetInfo(); ret != gonvml.SUCCESS || info.Id != uint32(id) {
			t.Errorf("gpu instance %d info %+v %v", id, info, ret)
		}
	}
	// Host processes have no place on a vGPU GPU.
	if _, err := h.Start(sim.Process{GPU: 1}); err == nil {
		t.Error("a host process started on a vGPU host's GPU")
	}
}

func TestVGPUSchedulerStateBytes(t *testing.T) {
	cases := []struct {
		name        string
		cfg         sim.VGPUGPUConfig
		policy, arr uint32
		params      [2]uint32
	}{
		{"best effort by default", sim.VGPUGPUConfig{}, gonvml.VGPU_SCHEDULER_POLICY_BEST_EFFORT, gonvml.VGPU_SCHEDULER_ARR_DISABLE, [2]uint32{0, 0}},
		{"equal share, time slice in bytes 0-3", sim.VGPUGPUConfig{Scheduler: collectors.SchedulerEqualShare, TimesliceMicros: 2000}, gonvml.VGPU_SCHEDULER_POLICY_EQUAL_SHARE, gonvml.VGPU_SCHEDULER_ARR_DISABLE, [2]uint32{2000, 0}},
		{"fixed share", sim.VGPUGPUConfig{Scheduler: collectors.SchedulerFixedShare, TimesliceMicros: 1500}, gonvml.VGPU_SCHEDULER_POLICY_FIXED_SHARE, gonvml.VGPU_SCHEDULER_ARR_DISABLE, [2]uint32{1500, 0}},
		{"adaptive round robin: avg factor, then time slice", sim.VGPUGPUConfig{ARR: true, AvgFactor: 33, TimesliceMicros: 1000}, gonvml.VGPU_SCHEDULER_POLICY_BEST_EFFORT, gonvml.VGPU_SCHEDULER_ARR_ENABLE, [2]uint32{33, 1000}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Mode = sim.TimeSlicedVGPU
			h := newVGPUHost(t, tc.cfg)
			s, ret := device(t, h, 0).GetVgpuSchedulerState()
			if ret != gonvml.SUCCESS {
				t.Fatal(ret)
			}
			got := [2]uint32{binary.LittleEndian.Uint32(s.SchedulerParams[0:4]), binary.LittleEndian.Uint32(s.SchedulerParams[4:8])}
			if s.SchedulerPolicy != tc.policy || s.ArrMode != tc.arr || got != tc.params {
				t.Errorf("state %+v (params %v), want policy %d arr %d params %v", s, got, tc.policy, tc.arr, tc.params)
			}
		})
	}
	h := newVGPUHost(t, sim.VGPUGPUConfig{})
	if _, ret := device(t, h, 0).GetVgpuSchedulerState(); ret != gonvml.ERROR_NOT_SUPPORTED {
		t.Errorf("bare metal scheduler state: %v", ret)
	}
}

// handler is how the reader learns a simulated instance's sample handle.
type handler interface{ Handle() uint32 }

func activeHandles(t *testing.T, d gonvml.Device) []uint32 {
	t.Helper()
	list, ret := d.GetActiveVgpus()
	if ret != gonvml.SUCCESS {
		t.Fatalf("active vgpus: %v", ret)
	}
	var out []uint32
	for _, vi := range list {
		hd, ok := vi.(handler)
		if !ok {
			t.Fatalf("%T has no Handle()", vi)
		}
		out = append(out, hd.Handle())
	}
	return out
}

type sample struct {
	handle uint32
	atUs   uint64 // since fleetStart
	util   uint32
}

func utilSamples(t *testing.T, d gonvml.Device, lastSeen uint64) []sample {
	t.Helper()
	vt, list, ret := d.GetVgpuUtilization(lastSeen)
	if ret != gonvml.SUCCESS || vt != gonvml.VALUE_TYPE_UNSIGNED_INT {
		t.Fatalf("vgpu utilization: %v %v", vt, ret)
	}
	var out []sample
	for _, s := range list {
		sm, mem := binary.LittleEndian.Uint32(s.SmUtil[:4]), binary.LittleEndian.Uint32(s.MemUtil[:4])
		if mem != sm/2 || sm > 100 {
			t.Errorf("sample %+v: sm %d mem %d", s, sm, mem)
		}
		out = append(out, sample{s.VgpuInstance, s.TimeStamp - uint64(fleetStart.UnixMicro()), sm})
	}
	slices.SortFunc(out, func(a, b sample) int {
		if a.atUs != b.atUs {
			return int(int64(a.atUs) - int64(b.atUs))
		}
		return int(a.handle) - int(b.handle)
	})
	return out
}

func TestVGPUActiveInstancesAndUtilizationSamplesOverTime(t *testing.T) {
	vmUtil := func(step int64) uint32 { return uint32(10 + 10*step) } // 10 % in step 0, 20 % in step 1, …
	h, err := sim.NewHost(sim.HostConfig{Name: "hv", Model: "A100-SXM4-40GB", GPUs: 2, Start: fleetStart, Step: 10 * time.Second,
		VGPU: &sim.VGPUConfig{GPUs: []sim.VGPUGPUConfig{{Mode: sim.TimeSlicedVGPU}, {Mode: sim.TimeSlicedVGPU, NoUtilization: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range []sim.VM{{Name: "vm-a", Tenant: "acme", Util: vmUtil}, {Name: "vm-b", Tenant: "globex", IDType: sim.VMIDUUID, Util: vmUtil}} {
		if err := h.DefineVM(vm); err != nil {
			t.Fatal(err)
		}
	}
	g := h.GPU(0)
	d := device(t, h, 0)
	a := create(t, g, "vm-a", "A100-4C", h.Now())                                   // at the start
	b := create(t, g, "vm-b", "A100-10C", at(h, 3*time.Second+17*time.Microsecond)) // inside step 0
	if err := a.Destroy(at(h, 16*time.Second+5*time.Microsecond)); err != nil {     // inside step 1
		t.Fatal(err)
	}
	if a.Handle() == b.Handle() || a.UUID() == b.UUID() {
		t.Fatalf("handles %d %d, uuids %s %s", a.Handle(), b.Handle(), a.UUID(), b.UUID())
	}
	if got := activeHandles(t, d); !slices.Equal(got, []uint32{a.Handle()}) {
		t.Fatalf("at the start: %v, want [%d]", got, a.Handle())
	}
	// The creation sample of an instance created at the host's time is
	// there at once.
	if got := utilSamples(t, d, 0); !slices.Equal(got, []sample{{a.Handle(), 0, 10}}) {
		t.Fatalf("samples at the start: %v", got)
	}
	for _, step := range []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second} {
		if err := h.AdvanceTo(fleetStart.Add(step)); err != nil {
			t.Fatal(err)
		}
	}
	want := []sample{
		{a.Handle(), 0, 10},          // a created
		{b.Handle(), 3_000_017, 10},  // b created inside step 0
		{a.Handle(), 10_000_000, 10}, // step 0 ends
		{b.Handle(), 10_000_000, 10},
		{a.Handle(), 16_000_005, 20}, // a destroyed inside step 1
		{b.Handle(), 20_000_000, 20}, // step 1 ends
		{b.Handle(), 30_000_000, 30}, // step 2 ends
	}
	if got := utilSamples(t, d, 0); !slices.Equal(got, want) {
		t.Fatalf("samples:\n got %v\nwant %v", got, want)
	}
	if got := utilSamples(t, d, uint64(fleetStart.Add(16*time.Second).UnixMicro())); !slices.Equal(got, want[4:]) {
		t.Fatalf("samples after 16 s: %v, want %v", got, want[4:])
	}
	if got := activeHandles(t, d); !slices.Equal(got, []uint32{b.Handle()}) {
		t.Fatalf("after a's end: %v, want [%d]", got, b.Handle())
	}
	// A new instance gets a new handle; the old one is not reused.
	c := create(t, g, "vm-a", "A100-4C", at(h, time.Second))
	if c.Handle() <= b.Handle() {
		t.Fatalf("new handle %d after %d", c.Handle(), b.Handle())
	}
	// Utilization not supported.
	if _, _, ret := device(t, h, 1).GetVgpuUtilization(0); ret != gonvml.ERROR_NOT_SUPPORTED {
		t.Errorf("utilization on a gpu without it: %v", ret)
	}
	if _, ret := d.GetVgpuProcessUtilization(0); ret != gonvml.ERROR_NOT_SUPPORTED {
		t.Errorf("process utilization: %v", ret)
	}
	// Device utilization: the instances' sum, by presence (step 2: b alone at 30 %).
	if u, ret := d.GetUtilizationRates(); ret != gonvml.SUCCESS || u.Gpu != 30 {
		t.Errorf("device utilization %+v %v, want 30", u, ret)
	}
}

func TestVGPUInstanceQueries(t *testing.T) {
	h := newVGPUHost(t,
		sim.VGPUGPUConfig{Mode: sim.TimeSlicedVGPU, Scheduler: collectors.SchedulerFixedShare},
		sim.VGPUGPUConfig{Mode: sim.MIGBackedVGPU, GPUInstances: []string{"3g.20gb", "2g.10gb", "1g.5gb"}},
	)
	ts := create(t, h.GPU(0), "vm-a", "A100-4C", h.Now())
	byUUID := create(t, h.GPU(0), "vm-c", "A100-10C", h.Now())
	mig := create(t, h.GPU(1), "vm-b", "A100-2-10C", h.Now())
	if _, err := h.GPU(1).CreateVGPU(sim.VGPUSpec{VM: "vm-c", Type: "A100-2-10C"}); err == nil {
		t.Error("a second vGPU on a taken GPU instance")
	}
	if _, err := h.GPU(0).CreateVGPU(sim.VGPUSpec{VM: "vm-x", Type: "A100-3-20C"}); err == nil {
		t.Error("a MIG-backed type on a time-sliced GPU")
	}
	if _, err := h.GPU(1).CreateVGPU(sim.VGPUSpec{VM: "vm-x", Type: "A100-4C"}); err == nil {
		t.Error("a time-sliced type on a MIG-backed GPU")
	}
	if _, err := h.GPU(0).CreateVGPU(sim.VGPUSpec{VM: "vm-a", Type: "A100-4C"}); err == nil {
		t.Error("a second vGPU of one VM on one GPU")
	}
	if _, err := h.GPU(0).CreateVGPU(sim.VGPUSpec{VM: "vm-x", Type: "A100-4C", At: h.Now().Add(-time.Second)}); err == nil {
		t.Error("a vGPU created in the past")
	}
	find := func(gpu int, v *sim.VGPU) gonvml.VgpuInstance {
		list, _ := device(t, h, gpu).GetActiveVgpus()
		for _, vi := range list {
			if u, _ := vi.GetUUID(); u == v.UUID() {
				return vi
			}
		}
		t.Fatalf("vgpu %s not listed", v.UUID())
		return nil
	}
	cases := []struct {
		name                  string
		gpu                   int
		v                     *sim.VGPU
		vmID                  string
		idType                gonvml.VgpuVmIdType
		typ                   string
		maxInst               int
		fbGiB                 uint64
		profileID, instanceID uint32
		fbUsed                uint64
	}{
		{"time-sliced, VM by domain name", 0, ts, "vm-a", gonvml.VGPU_VM_ID_DOMAIN_ID, "A100-4C", 10, 4, ^uint32(0), ^uint32(0), 2 << 30},
		{"time-sliced, VM by UUID", 0, byUUID, vmByName(t, h, "vm-c").UUID, gonvml.VGPU_VM_ID_UUID, "A100-10C", 4, 10, ^uint32(0), ^uint32(0), 10 << 30},
		{"MIG-backed on its GPU instance", 1, mig, "vm-b", gonvml.VGPU_VM_ID_DOMAIN_ID, "A100-2-10C", 3, 10, gonvml.GPU_INSTANCE_PROFILE_2_SLICE, 2, 10 << 30 / 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vi := find(tc.gpu, tc.v)
			if id, typ, ret := vi.GetVmID(); ret != gonvml.SUCCESS || id != tc.vmID || typ != tc.idType {
				t.Errorf("vm id %q %v %v, want %q %v", id, typ, ret, tc.vmID, tc.idType)
			}
			vt, ret := vi.GetType()
			if ret != gonvml.SUCCESS {
				t.Fatal(ret)
			}
			name, _ := vt.GetName()
			maxInst, _ := vt.GetMaxInstances(device(t, h, tc.gpu))
			fb, _ := vt.GetFramebufferSize()
			profile, _ := vt.GetGpuInstanceProfileId()
			if name != tc.typ || maxInst != tc.maxInst || fb != tc.fbGiB<<30 || profile != tc.profileID {
				t.Errorf("type %s max %d fb %d profile %#x, want %s %d %d GiB %#x", name, maxInst, fb, profile, tc.typ, tc.maxInst, tc.fbGiB, tc.profileID)
			}
			if gi, ret := vi.GetGpuInstanceId(); ret != gonvml.SUCCESS || uint32(gi) != tc.instanceID {
				t.Errorf("gpu instance %d %v, want %d", gi, ret, tc.instanceID)
			}
			if fb, ret := vi.GetFbUsage(); ret != gonvml.SUCCESS || fb != tc.fbUsed {
				t.Errorf("fb used %d %v, want %d", fb, ret, tc.fbUsed)
			}
			if lic, ret := vi.GetLicenseInfo(); ret != gonvml.SUCCESS || lic.IsLicensed != 1 {
				t.Errorf("licence %+v %v", lic, ret)
			}
			if mdev, ret := vi.GetMdevUUID(); ret != gonvml.SUCCESS || mdev != tc.v.Mdev() || len(mdev) != 36 {
				t.Errorf("mdev %q %v", mdev, ret)
			}
			pci, ret := vi.GetGpuPciId()
			bus := pciBus(t, device(t, h, tc.gpu))
			if ret != gonvml.SUCCESS || !strings.HasPrefix(pci, bus[:len(bus)-4]) || strings.HasSuffix(pci, ".0") {
				t.Errorf("vf %q %v on gpu %s", pci, ret, bus)
			}
		})
	}
	// A destroyed instance's handle answers NOT_FOUND.
	vi := find(0, ts)
	if err := ts.Destroy(h.Now().Add(15 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := h.AdvanceTo(h.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, ret := vi.GetFbUsage(); ret != gonvml.ERROR_NOT_FOUND {
		t.Errorf("fb usage of a destroyed vgpu: %v", ret)
	}
}

func pciBus(t *testing.T, d gonvml.Device) string {
	t.Helper()
	p, ret := d.GetPciInfo()
	if ret != gonvml.SUCCESS {
		t.Fatal(ret)
	}
	var b []byte
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// sortedUUIDs is the instances' ledger order.
func byUUID(vs ...*sim.VGPU) []*sim.VGPU {
	vs = slices.Clone(vs)
	slices.SortFunc(vs, func(a, b *sim.VGPU) int { return strings.Compare(a.UUID(), b.UUID()) })
	return vs
}

func TestVGPULedgerRules(t *testing.T) {
	fixed := sim.VGPUGPUConfig{Mode: sim.TimeSlicedVGPU, Scheduler: collectors.SchedulerFixedShare}
	equal := sim.VGPUGPUConfig{Mode: sim.TimeSlicedVGPU, Scheduler: collectors.SchedulerEqualShare}
	best := sim.VGPUGPUConfig{Mode: sim.TimeSlicedVGPU}
	cases := []struct {
		name  string
		cfg   sim.VGPUGPUConfig
		steps int
		// run sets the GPU up at the start and returns the expected µs
		// per VM over the steps (idle is the rest).
		run func(t *testing.T, h *sim.Host, g *sim.GPU) map[string]uint64
	}{
		{"fixed share: 1/max of each type, the rest idle", fixed, 1, func(t *testing.T, h *sim.Host, g *sim.GPU) map[string]uint64 {
			create(t, g, "vm-a", "A100-4C", h.Now())
			create(t, g, "vm-b", "A100-10C", h.Now())
			return map[string]uint64{"vm-a": stepUs / 10, "vm-b": stepUs / 4}
		}},
		{"fixed share: created mid-step holds its share from then", fixed, 2, func(t *testing.T, h *sim.Host, g *sim.GPU) map[string]uint64 {
			create(t, g, "vm-b", "A100-10C", at(h, 2500*time.Millisecond))
			return map[string]uint64{"vm-b": 7_500_000/4 + stepUs/4}
		}},
		{"fixed share: more shares than fit are split pro rata, nothing idle", fixed, 1, func(t *testing.T, h *sim.Host, g *sim.GPU) map[string]uint64 {
			vs := byUUID(create(t, g, "vm-a", "A100-20C", h.Now()), create(t, g, "vm-b", "A100-20C", h.Now()), create(t, g, "vm-c", "A100-20C", h.Now()))
			want := map[string]uint64{}
			for i, v := range vs {
				want[v.VM().Name] = 3_333_333 + map[bool]uint64{true: 1}[i == 0]
			}
			return want
		}},
		{"equal share: cut where instances come and go", equal, 2, func(t *testing.T, h *sim.Host, g *sim.GPU) map[string]uint64 {
			a := create(t, g, "vm-a", "A100-10C", h.Now())
			c := create(t, g, "vm-c", "A100-10C", h.Now())
			b := create(t, g, "vm-b", "A100-10C", at(h, 14*time.Second))
			if err := c.Destroy(at(h, 16*time.Second)); err != nil {
				t.Fatal(err)
			}
			// step 0: a, c halves; step 1: [0,4 s) a+c, [4,6 s) a+b+c, [6,10 s) a+b.
			want := map[string]uint64{"vm-a": 5_000_000 + 2_000_000 + 2_000_000, "vm-b": 2_000_000, "vm-c": 5_000_000 + 2_000_000}
			for i, v := range byUUID(a, b, c) {
				want[v.VM().Name] += 666_666 + map[bool]uint64{true: 1}[i < 2]
			}
			return want
		}},
		{"equal share: one instance holds the whole GPU", equal, 1, func(t *testing.T, h *sim.Host, g *sim.GPU) map[string]uint64 {
			create(t, g, "vm-a", "A100-40C", h.Now())
			return map[string]uint64{"vm-a": stepUs}
		}},
		{"best effort: measured use, the rest idle", best, 1, func(t *testing.T, h *sim.Host, g *sim.GPU) map[string]uint64 {
			create(t, g, "vm-a", "A100-8C", h.Now())                                 // 30 %
			create(t, g, "vm-b", "A100-8C", h.Now())                                 // 50 %
			create(t, g, "vm-c", "A100-8C", at(h, 5*time.Second+3*time.Microsecond)) // 40 % of 4.999997 s
			return map[string]uint64{"vm-a": 3_000_000, "vm-b": 5_000_000, "vm-c": 1_999_998}
		}},
		{"best effort: use above the GPU is split by use, nothing idle", best, 1, func(t *testing.T, h *sim.Host, g *sim.GPU) map[string]uint64 {
			create(t, g, "vm-b", "A100-8C", h.Now()) // 50 %
			create(t, g, "vm-x", "A100-8C", h.Now()) // 80 %
			return map[string]uint64{"vm-b": 3_846_154, "vm-x": 6_153_846}
		}},
		{"best effort without utilization: presence by framebuffer used", sim.VGPUGPUConfig{Mode: sim.TimeSlicedVGPU, NoUtilization: true}, 1, func(t *testing.T, h *sim.Host, g *sim.GPU) map[string]uint64 {
			create(t, g, "vm-a", "A100-8C", h.Now())              // 4 GiB used
			create(t, g, "vm-b", "A100-8C", at(h, 5*time.Second)) // 2 GiB used, half the step
			// occupied 10 s, weights 10 s × 4 GiB : 5 s × 2 GiB = 4 : 1.
			return map[string]uint64{"vm-a": 8_000_000, "vm-b": 2_000_000}
		}},
		{"best effort without utilization: unoccupied time is idle", sim.VGPUGPUConfig{Mode: sim.TimeSlicedVGPU, NoUtilization: true}, 1, func(t *testing.T, h *sim.Host, g *sim.GPU) map[string]uint64 {
			create(t, g, "vm-b", "A100-8C", at(h, 6*time.Second))
			return map[string]uint64{"vm-b": 4_000_000}
		}},
		{"MIG-backed: compute slices of 7, unpartitioned slices idle", sim.VGPUGPUConfig{Mode: sim.MIGBackedVGPU, GPUInstances: []string{"3g.20gb", "1g.5gb"}}, 1, func(t *testing.T, h *sim.Host, g *sim.GPU) map[string]uint64 {
			create(t, g, "vm-a", "A100-3-20C", h.Now())
			create(t, g, "vm-b", "A100-1-5C", h.Now())
			// 1e7 × [3, 1, 3]/7 = 4285714 r2, 1428571 r3, 4285714 r2: the one left over to vm-b.
			return map[string]uint64{"vm-a": 4_285_714, "vm-b": 1_428_572}
		}},
		{"MIG-backed: destroyed mid-step", sim.VGPUGPUConfig{Mode: sim.MIGBackedVGPU, GPUInstances: []string{"3g.20gb"}}, 2, func(t *testing.T, h *sim.Host, g *sim.GPU) map[string]uint64 {
			v := create(t, g, "vm-a", "A100-3-20C", h.Now())
			if err := v.Destroy(at(h, 13500*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			// 13.5 s × 3/7 over two steps: 4285714 (r2) + 3.5 s × 3/7 = 1500000.
			return map[string]uint64{"vm-a": 4_285_714 + 1_500_000}
		}},
		{"passthrough: the whole GPU to its VM", sim.VGPUGPUConfig{Mode: sim.Passthrough}, 2, func(t *testing.T, h *sim.Host, g *sim.GPU) map[string]uint64 {
			if err := g.PassThrough("vm-c"); err != nil {
				t.Fatal(err)
			}
			return map[string]uint64{"vm-c": 2 * stepUs}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newVGPUHost(t, tc.cfg)
			want := tc.run(t, h, h.GPU(0))
			if err := h.AdvanceTo(fleetStart.Add(time.Duration(tc.steps) * 10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			l := h.Ledger()
			var booked uint64
			wantTenants := map[string]uint64{}
			for name, us := range want {
				vm := vmByName(t, h, name)
				if got := l.GPUMicrosecondsByWorkload[vm.Workload()]; got != us {
					t.Errorf("%s (%s): %d µs, want %d", name, vm.Workload(), got, us)
				}
				tenant := vm.Tenant
				if tenant == "" {
					tenant = collectors.UnattributedTenant
				}
				wantTenants[tenant] += us
				booked += us
			}
			if len(l.GPUMicrosecondsByWorkload) != len(want) {
				t.Errorf("workloads %v, want %v", l.GPUMicrosecondsByWorkload, want)
			}
			wantTenants[""] = uint64(tc.steps)*stepUs - booked
			for tenant, us := range wantTenants {
				if l.GPUMicroseconds[tenant] != us {
					t.Errorf("tenant %q: %d µs, want %d (ledger %v)", tenant, l.GPUMicroseconds[tenant], us, l.GPUMicroseconds)
				}
			}
			if l.GPUSteps != uint64(tc.steps) || l.TotalEnergyMillijoules == 0 {
				t.Errorf("%d gpu-steps, %d mJ", l.GPUSteps, l.TotalEnergyMillijoules)
			}
		})
	}
}

func TestVGPUUnmappedVMBooksUnattributed(t *testing.T) {
	h := newVGPUHost(t, sim.VGPUGPUConfig{Mode: sim.TimeSlicedVGPU, Scheduler: collectors.SchedulerEqualShare})
	create(t, h.GPU(0), "vm-x", "A100-10C", h.Now())
	if err := h.AdvanceTo(fleetStart.Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	l := h.Ledger()
	x := vmByName(t, h, "vm-x")
	if l.GPUMicroseconds[collectors.UnattributedTenant] != stepUs || l.GPUMicrosecondsByWorkload["vm/"+x.UUID] != stepUs {
		t.Fatalf("ledger %v / %v, want all under %s and vm/%s", l.GPUMicroseconds, l.GPUMicrosecondsByWorkload, collectors.UnattributedTenant, x.UUID)
	}
}

func TestVGPUDestroyRules(t *testing.T) {
	h := newVGPUHost(t, sim.VGPUGPUConfig{Mode: sim.TimeSlicedVGPU})
	v := create(t, h.GPU(0), "vm-a", "A100-4C", at(h, 2*time.Second))
	for _, bad := range []time.Time{at(h, 9*time.Second), at(h, time.Second), at(h, 15*time.Second+time.Nanosecond)} {
		if err := v.Destroy(bad); err == nil {
			t.Errorf("destroy at %s accepted", bad.Format(time.RFC3339Nano))
		}
	}
	if err := v.Destroy(at(h, 10*time.Second)); err != nil {
		t.Errorf("destroy at the next step's start: %v", err)
	}
	if err := v.Destroy(at(h, 20*time.Second)); err == nil {
		t.Error("destroyed twice")
	}
	if _, err := h.GPU(0).CreateVGPU(sim.VGPUSpec{VM: "vm-nope", Type: "A100-4C"}); err == nil {
		t.Error("a vGPU for an undefined VM")
	}
	if _, err := h.GPU(0).CreateVGPU(sim.VGPUSpec{VM: "vm-b", Type: "H100XM-4C"}); err == nil {
		t.Error("another model's type")
	}
}

// domainXML is what the tests read of a libvirt domain.
type domainXML struct {
	Name     string `xml:"name"`
	UUID     string `xml:"uuid"`
	Metadata struct {
		Owner *struct {
			Tenant     string `xml:"https://gpumeter.dev/xmlns/libvirt/1 tenant"`
			Department string `xml:"https://gpumeter.dev/xmlns/libvirt/1 department"`
		} `xml:"https://gpumeter.dev/xmlns/libvirt/1 owner"`
	} `xml:"metadata"`
	Hostdevs []struct {
		Type    string `xml:"type,attr"`
		Address struct {
			UUID     string `xml:"uuid,attr"`
			Domain   string `xml:"domain,attr"`
			Bus      string `xml:"bus,attr"`
			Slot     string `xml:"slot,attr"`
			Function string `xml:"function,attr"`
		} `xml:"source>address"`
	} `xml:"devices>hostdev"`
}

func readDomain(t *testing.T, h *sim.Host, name string) domainXML {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.LibvirtDir(), name+".xml"))
	if err != nil {
		t.Fatal(err)
	}
	var d domainXML
	if err := xml.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, b)
	}
	return d
}

func TestVGPUHostWritesLibvirtDomains(t *testing.T) {
	h := newVGPUHost(t, sim.VGPUGPUConfig{Mode: sim.TimeSlicedVGPU}, sim.VGPUGPUConfig{Mode: sim.Passthrough})
	v := create(t, h.GPU(0), "vm-a", "A100-4C", h.Now())
	if err := h.GPU(1).PassThrough("vm-c"); err != nil {
		t.Fatal(err)
	}
	if err := h.GPU(1).PassThrough("vm-b"); err == nil {
		t.Error("one GPU passed through twice")
	}
	a := readDomain(t, h, "vm-a")
	if a.Name != "vm-a" || a.UUID != vmByName(t, h, "vm-a").UUID || a.Metadata.Owner == nil || a.Metadata.Owner.Tenant != "acme" || a.Metadata.Owner.Department != "research" {
		t.Errorf("vm-a: %+v", a)
	}
	if len(a.Hostdevs) != 1 || a.Hostdevs[0].Type != "mdev" || a.Hostdevs[0].Address.UUID != v.Mdev() {
		t.Errorf("vm-a devices %+v, want the mdev %s", a.Hostdevs, v.Mdev())
	}
	if b := readDomain(t, h, "vm-b"); b.Metadata.Owner != nil || len(b.Hostdevs) != 0 {
		t.Errorf("vm-b (mapped by the map file): %+v", b)
	}
	if x := readDomain(t, h, "vm-x"); x.Metadata.Owner != nil {
		t.Errorf("vm-x (unmapped): %+v", x)
	}
	c := readDomain(t, h, "vm-c")
	bus := pciBus(t, device(t, h, 1)) // "00000000:2A:00.0"
	if len(c.Hostdevs) != 1 || c.Hostdevs[0].Type != "pci" {
		t.Fatalf("vm-c devices %+v", c.Hostdevs)
	}
	ad := c.Hostdevs[0].Address
	if got := "0000" + strings.TrimPrefix(ad.Domain, "0x") + ":" + strings.ToUpper(strings.TrimPrefix(ad.Bus, "0x")) + ":" + strings.TrimPrefix(ad.Slot, "0x") + "." + strings.TrimPrefix(ad.Function, "0x"); got != bus {
		t.Errorf("vm-c passthrough address %+v = %s, want the GPU's %s", ad, got, bus)
	}
	entries, err := os.ReadDir(h.LibvirtDir())
	if err != nil || len(entries) != 4 {
		t.Errorf("libvirt dir: %v %v, want 4 domains", entries, err)
	}
}

func TestVGPUHostConfigValidate(t *testing.T) {
	base := sim.HostConfig{Name: "hv", Model: "A100-SXM4-40GB", GPUs: 1, Start: fleetStart, Step: time.Second}
	cases := []struct {
		name string
		vgpu sim.VGPUConfig
		want string
	}{
		{"more GPUs than the host", sim.VGPUConfig{GPUs: make([]sim.VGPUGPUConfig, 2)}, "gpus configured"},
		{"MIG-backed without GPU instances", sim.VGPUConfig{GPUs: []sim.VGPUGPUConfig{{Mode: sim.MIGBackedVGPU}}}, "needs gpu instances"},
		{"GPU instances that do not fit", sim.VGPUConfig{GPUs: []sim.VGPUGPUConfig{{Mode: sim.MIGBackedVGPU, GPUInstances: []string{"4g.20gb", "4g.20gb"}}}}, "compute slices"},
		{"GPU instances on a time-sliced GPU", sim.VGPUConfig{GPUs: []sim.VGPUGPUConfig{{Mode: sim.TimeSlicedVGPU, GPUInstances: []string{"1g.5gb"}}}}, "gpu instances on"},
		{"unknown mode", sim.VGPUConfig{GPUs: []sim.VGPUGPUConfig{{Mode: 9}}}, "unknown mode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.VGPU = &tc.vgpu
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := sim.PresetVGPU("H200-SXM5-141GB", 8); err == nil {
		t.Error("a vGPU preset for a model without one")
	}
}

func newVGPUFleet(t *testing.T, seed int64, root string) *sim.Fleet {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Start, cfg.Seed, cfg.Hosts, cfg.VGPUHosts, cfg.Root = fleetStart, seed, 0, 2, root
	f, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestVGPUFleetHasTheAdvertisedShape(t *testing.T) {
	f := newVGPUFleet(t, 3, t.TempDir())
	hosts := f.Hosts()
	if len(hosts) != 2 || hosts[0].Model() != "A100-SXM4-40GB" || hosts[1].Model() != "H100-SXM5-80GB" || hosts[0].Name() != "sim-vgpu-a100-01" {
		t.Fatalf("hosts %v %v", hosts[0].Name(), hosts[1].Name())
	}
	wantModes := []sim.VGPUMode{sim.TimeSlicedVGPU, sim.TimeSlicedVGPU, sim.TimeSlicedVGPU, sim.TimeSlicedVGPU, sim.MIGBackedVGPU, sim.Passthrough, sim.TimeSlicedVGPU, sim.BareMetal}
	policies := map[collectors.VGPUScheduler]bool{}
	for _, h := range hosts {
		for i, g := range h.GPUs() {
			if g.Mode() != wantModes[i] {
				t.Errorf("%s gpu %d: %s, want %s", h.Name(), i, g.Mode(), wantModes[i])
			}
			s, ret := device(t, h, i).GetVgpuSchedulerState()
			if ret == gonvml.SUCCESS && g.Mode() == sim.TimeSlicedVGPU {
				policies[map[uint32]collectors.VGPUScheduler{1: collectors.SchedulerBestEffort, 2: collectors.SchedulerEqualShare, 3: collectors.SchedulerFixedShare}[s.SchedulerPolicy]] = true
			}
		}
		if _, _, ret := device(t, h, 3).GetVgpuUtilization(0); ret != gonvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s gpu 3 reports utilization", h.Name())
		}
		// Fixed share mixes types; the MIG-backed GPU runs them on its GPU instances.
		types := map[string]bool{}
		for _, v := range h.GPU(0).VGPUs() {
			types[v.Type()] = true
		}
		if len(types) < 2 {
			t.Errorf("%s fixed-share gpu runs %v", h.Name(), types)
		}
		for _, v := range h.GPU(4).VGPUs() {
			if !strings.Contains(v.Type(), "-1-") && !strings.Contains(v.Type(), "-2-") && !strings.Contains(v.Type(), "-3-") {
				t.Errorf("%s MIG-backed gpu runs %s", h.Name(), v.Type())
			}
		}
	}
	for _, pt := range []struct {
		host int
		vm   string
	}{{0, "vm-globex-pt05"}, {1, "vm-globex-pt13"}} {
		if got := readDomain(t, hosts[pt.host], pt.vm); len(got.Hostdevs) != 1 || got.Hostdevs[0].Type != "pci" {
			t.Errorf("%s passthrough vm %s: %+v", hosts[pt.host].Name(), pt.vm, got)
		}
	}
	if len(policies) != 3 {
		t.Errorf("policies %v, want all three", policies)
	}
	m := f.MapFile()
	if _, err := attribution.ParseMapping(strings.NewReader(m)); err != nil {
		t.Fatalf("map file does not parse: %v", err)
	}
	uuidKeyed := vmByName(t, hosts[0], "vm-acme-04")
	for _, want := range []string{"\nvm " + uuidKeyed.UUID + " acme research", "\nvm vm-globex-04 globex platform", "\nvm vm-globex-09 globex platform"} {
		if !strings.Contains(m, want) {
			t.Errorf("map file lacks %q:\n%s", want, m)
		}
	}
}

func TestVGPUFleetStartsAndStopsVMsInsideSteps(t *testing.T) {
	f := newVGPUFleet(t, 7, "")
	h := f.Hosts()[0]
	seen := map[string]*sim.VGPU{}
	for m := 1; m <= 120; m++ {
		for _, g := range h.GPUs() {
			for _, v := range g.VGPUs() {
				seen[v.UUID()] = v
			}
		}
		if err := f.AdvanceTo(fleetStart.Add(time.Duration(m) * time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	var midStart, midStop, replaced int
	startsInStep := map[string]int{} // gpu/step → starts and stops
	for _, v := range seen {
		c, d := v.Created(), v.Destroyed()
		if c.Sub(fleetStart)%(10*time.Second) != 0 {
			midStart++
		}
		if !d.IsZero() {
			if d.Sub(fleetStart)%(10*time.Second) != 0 {
				midStop++
			}
			if d.Sub(c) < 10*time.Second || d.Truncate(10*time.Second).Equal(c.Truncate(10*time.Second)) {
				t.Errorf("vgpu %s lives %s to %s: within one step", v.UUID(), c, d)
			}
			startsInStep[d.Truncate(10*time.Second).String()+v.Type()]++
		}
		startsInStep[c.Truncate(10*time.Second).String()+v.Type()]++
	}
	for _, n := range startsInStep {
		if n > 1 {
			replaced++
		}
	}
	t.Logf("in 2 h: %d instances, %d started and %d stopped inside a step, %d replaced within a step", len(seen), midStart, midStop, replaced)
	if midStart < 5 || midStop < 5 || replaced == 0 {
		t.Errorf("in 2 h: %d instances, %d started and %d stopped inside a step, %d replaced within a step", len(seen), midStart, midStop, replaced)
	}
	l := f.Ledger()
	if total, want := ledgerTotal(l), uint64(2*8*7200*1e6); total != want {
		t.Errorf("ledger holds %d µs, want %d", total, want)
	}
	for _, vm := range h.VMs() {
		if vm.Tenant == "" && l.GPUMicrosecondsByWorkload[vm.Workload()] > 0 {
			if l.GPUMicroseconds[collectors.UnattributedTenant] == 0 {
				t.Error("an unmapped VM ran but nothing is unattributed")
			}
			return
		}
	}
	t.Error("no unmapped VM ran in 2 h")
}

func TestVGPUFleetIsDeterministicFromItsSeed(t *testing.T) {
	a, b, c := newVGPUFleet(t, 3, ""), newVGPUFleet(t, 3, ""), newVGPUFleet(t, 4, "")
	for _, f := range []*sim.Fleet{a, b, c} {
		if err := f.AdvanceTo(fleetStart.Add(30 * time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	la, lb, lc := a.Ledger(), b.Ledger(), c.Ledger()
	if !maps.Equal(la.GPUMicrosecondsByWorkload, lb.GPUMicrosecondsByWorkload) || la.TotalEnergyMillijoules != lb.TotalEnergyMillijoules || a.MapFile() != b.MapFile() {
		t.Errorf("same seed, different runs:\n%v\n%v", la.GPUMicrosecondsByWorkload, lb.GPUMicrosecondsByWorkload)
	}
	if maps.Equal(la.GPUMicrosecondsByWorkload, lc.GPUMicrosecondsByWorkload) {
		t.Error("different seeds, same VMs' use")
	}
}
