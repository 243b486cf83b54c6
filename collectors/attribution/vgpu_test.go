package attribution

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
)

var vt0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

const vIv = 10 * time.Second // 10,000,000 µs

// vi is a time-sliced instance held the whole interval by VM vm.
func vi(uuid, typ string, maxInst uint32, vm string) collectors.VGPUInstance {
	return collectors.VGPUInstance{UUID: uuid, VMID: vm, VMIDType: "domain", Type: typ, MaxInstances: maxInst, GPUInstanceID: -1}
}

func withUtil(v collectors.VGPUInstance, pct uint32) collectors.VGPUInstance {
	v.SMActive = collectors.Ratio{PPM: pct * 10_000, OK: true}
	return v
}

func between(v collectors.VGPUInstance, from, to time.Duration) collectors.VGPUInstance {
	if from > 0 {
		v.ActiveFrom = vt0.Add(from)
	}
	if to < vIv {
		v.ActiveTo = vt0.Add(to)
	}
	return v
}

func migBacked(uuid, typ string, gi int, slices uint64, vm string) collectors.VGPUInstance {
	return collectors.VGPUInstance{UUID: uuid, VMID: vm, VMIDType: "domain", Type: typ, MaxInstances: 1, GPUInstanceID: gi, MilliSlices: slices * 1000}
}

func vgpuReading(policy collectors.VGPUScheduler, mig bool, insts ...collectors.VGPUInstance) *collectors.GPUReading {
	g := &collectors.GPUReading{
		GPU:            collectors.GPU{UUID: "GPU-v", Model: "A100-SXM4-40GB"},
		Virtualization: collectors.VirtHostVGPU, Scheduler: policy, VGPUs: insts,
	}
	if mig {
		g.MIG, g.TotalMilliSlices = true, 7000
	}
	return g
}

// byWorkload sums GPU µs per workload ("" idle) and checks that the rows
// of the GPU add up to the interval exactly.
func byWorkload(t *testing.T, samples []collectors.Sample) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	var sum uint64
	for _, s := range samples {
		out[s.Workload] += s.GPUMicroseconds
		sum += s.GPUMicroseconds
	}
	if sum != uint64(vIv/time.Microsecond) {
		t.Fatalf("GPU µs add up to %d, want the interval %d: %+v", sum, vIv/time.Microsecond, samples)
	}
	return out
}

func TestApportionVGPUPolicies(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		g    *collectors.GPUReading
		want map[string]uint64 // workload → GPU µs; "" idle
	}{
		{"fixed share: one A100-4C holds a tenth", Options{},
			vgpuReading(collectors.SchedulerFixedShare, false, vi("v1", "A100-4C", 10, "vm-a")),
			map[string]uint64{"vm/vm-a": 1_000_000, "": 9_000_000}},
		{"fixed share: max instances fill the GPU", Options{},
			vgpuReading(collectors.SchedulerFixedShare, false, vi("v0", "A100-20C", 2, "vm-a"), vi("v1", "A100-20C", 2, "vm-b")),
			map[string]uint64{"vm/vm-a": 5_000_000, "vm/vm-b": 5_000_000}},
		{"fixed share: mixed sizes, rest idle", Options{},
			vgpuReading(collectors.SchedulerFixedShare, false, vi("v1", "A100-4C", 10, "vm-a"), vi("v2", "A100-20C", 2, "vm-b")),
			map[string]uint64{"vm/vm-a": 1_000_000, "vm/vm-b": 5_000_000, "": 4_000_000}},
		{"fixed share: created mid-interval holds its share of the rest", Options{},
			vgpuReading(collectors.SchedulerFixedShare, false, between(vi("v1", "A100-4C", 10, "vm-a"), 5*time.Second, vIv)),
			map[string]uint64{"vm/vm-a": 500_000, "": 9_500_000}},
		{"fixed share: one replaced another within the interval", Options{},
			vgpuReading(collectors.SchedulerFixedShare, false,
				between(vi("v1", "A100-40C", 1, "vm-a"), 0, 4*time.Second), between(vi("v2", "A100-40C", 1, "vm-b"), 6*time.Second, vIv)),
			map[string]uint64{"vm/vm-a": 4_000_000, "vm/vm-b": 4_000_000, "": 2_000_000}},
		{"fixed share: over-subscribed shares scale down, nothing idle", Options{},
			vgpuReading(collectors.SchedulerFixedShare, false, vi("v1", "A100-40C", 1, "vm-a"), vi("v2", "A100-40C", 1, "vm-b")),
			map[string]uint64{"vm/vm-a": 5_000_000, "vm/vm-b": 5_000_000}},
		{"equal share: three split in UUID order", Options{},
			vgpuReading(collectors.SchedulerEqualShare, false, vi("v3", "A100-4C", 10, "vm-c"), vi("v1", "A100-4C", 10, "vm-a"), vi("v2", "A100-4C", 10, "vm-b")),
			map[string]uint64{"vm/vm-a": 3_333_334, "vm/vm-b": 3_333_333, "vm/vm-c": 3_333_333}},
		{"equal share: one alone, then two", Options{},
			vgpuReading(collectors.SchedulerEqualShare, false, vi("v1", "A100-4C", 10, "vm-a"), between(vi("v2", "A100-4C", 10, "vm-b"), 5*time.Second, vIv)),
			map[string]uint64{"vm/vm-a": 7_500_000, "vm/vm-b": 2_500_000}},
		{"equal share: a gap with nobody is idle", Options{},
			vgpuReading(collectors.SchedulerEqualShare, false,
				between(vi("v1", "A100-4C", 10, "vm-a"), 0, 2*time.Second), between(vi("v2", "A100-4C", 10, "vm-b"), 5*time.Second, vIv)),
			map[string]uint64{"vm/vm-a": 2_000_000, "vm/vm-b": 5_000_000, "": 3_000_000}},
		{"equal share: one instance holds the GPU", Options{},
			vgpuReading(collectors.SchedulerEqualShare, false, vi("v1", "A100-4C", 10, "vm-a")),
			map[string]uint64{"vm/vm-a": 10_000_000}},
		{"best effort: measured use, rest idle", Options{},
			vgpuReading(collectors.SchedulerBestEffort, false, withUtil(vi("v1", "A100-4C", 10, "vm-a"), 30), withUtil(vi("v2", "A100-4C", 10, "vm-b"), 50)),
			map[string]uint64{"vm/vm-a": 3_000_000, "vm/vm-b": 5_000_000, "": 2_000_000}},
		{"best effort: unused time to the holders by presence", Options{BestEffortUnused: UnusedToHolders},
			vgpuReading(collectors.SchedulerBestEffort, false, withUtil(vi("v1", "A100-4C", 10, "vm-a"), 30), withUtil(vi("v2", "A100-4C", 10, "vm-b"), 50)),
			map[string]uint64{"vm/vm-a": 4_000_000, "vm/vm-b": 6_000_000}},
		{"best effort: use over the interval scales down", Options{},
			vgpuReading(collectors.SchedulerBestEffort, false, withUtil(vi("v1", "A100-4C", 10, "vm-a"), 70), withUtil(vi("v2", "A100-4C", 10, "vm-b"), 60)),
			map[string]uint64{"vm/vm-a": 5_384_615, "vm/vm-b": 4_615_385}},
		{"best effort: busy only while present", Options{},
			vgpuReading(collectors.SchedulerBestEffort, false, withUtil(between(vi("v1", "A100-4C", 10, "vm-a"), 5*time.Second, vIv), 40)),
			map[string]uint64{"vm/vm-a": 2_000_000, "": 8_000_000}},
		{"best effort without utilization: presence split by framebuffer held", Options{},
			func() *collectors.GPUReading {
				a, b := vi("v1", "A100-4C", 10, "vm-a"), vi("v2", "A100-20C", 2, "vm-b")
				a.FBUsedBytes, b.FBUsedBytes = 4<<30, 12<<30
				return vgpuReading(collectors.SchedulerBestEffort, false, a, b)
			}(),
			map[string]uint64{"vm/vm-a": 2_500_000, "vm/vm-b": 7_500_000}},
		{"best effort without utilization or memory: by presence, gaps idle", Options{},
			vgpuReading(collectors.SchedulerBestEffort, false, between(vi("v1", "A100-4C", 10, "vm-a"), 0, 6*time.Second)),
			map[string]uint64{"vm/vm-a": 6_000_000, "": 4_000_000}},
		{"no instances: all idle", Options{},
			vgpuReading(collectors.SchedulerFixedShare, false),
			map[string]uint64{"": 10_000_000}},
		{"MIG-backed: slices of 7, unpartitioned rest idle", Options{},
			vgpuReading(collectors.SchedulerBestEffort, true,
				migBacked("v3", "A100-1-5C", 13, 1, "vm-c"), migBacked("v1", "A100-3-20C", 1, 3, "vm-a"), migBacked("v2", "A100-2-10C", 5, 2, "vm-b")),
			// 3/7, 2/7, 1/7 and the idle 1/7 of 10 s by largest remainder.
			map[string]uint64{"vm/vm-a": 4_285_714, "vm/vm-b": 2_857_143, "vm/vm-c": 1_428_572, "": 1_428_571}},
		{"MIG-backed: created mid-interval", Options{},
			vgpuReading(collectors.SchedulerBestEffort, true, between(migBacked("v1", "A100-7-40C", 0, 7, "vm-a"), 5*time.Second, vIv)),
			map[string]uint64{"vm/vm-a": 5_000_000, "": 5_000_000}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := byWorkload(t, tc.opts.Apportion(nil, "host-1", vt0, vt0.Add(vIv), tc.g))
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for w, us := range tc.want {
				if got[w] != us {
					t.Fatalf("%q: %d µs, want %d (all: %v)", w, got[w], us, got)
				}
			}
		})
	}
}

func TestApportionVGPUSamples(t *testing.T) {
	a := withUtil(vi("vgpu-a", "A100-4C", 10, "vm-a"), 20)
	a.Claims = []collectors.Owner{{Tenant: "acme", Department: "research", Workload: "vm/vm-a"}}
	a.FBUsedBytes = 2 << 30
	b := vi("vgpu-b", "A100-4C", 10, "vm-b") // unmapped, no utilization
	g := vgpuReading(collectors.SchedulerFixedShare, false, a, b)
	g.Counters[meter.Energy] = collectors.Delta{Value: 1_000, OK: true}
	g.Counters[meter.PCIeTx], g.Counters[meter.PCIeRx] = collectors.Delta{Value: 100, OK: true}, collectors.Delta{Value: 100, OK: true}
	samples := Apportion(nil, "host-1", vt0, vt0.Add(vIv), g)
	if len(samples) != 3 {
		t.Fatalf("want rows for two instances and idle, got %+v", samples)
	}
	var energy, pcie uint64
	rows := map[string]collectors.Sample{}
	for _, s := range samples {
		rows[s.Workload] = s
		energy += s.EnergyMillijoules
		pcie += s.PCIeTxBytes
	}
	if energy != 1_000 || pcie != 100 {
		t.Fatalf("energy %d mJ, PCIe tx %d B: want the GPU's 1000 and 100 exactly", energy, pcie)
	}
	ra, rb, idle := rows["vm/vm-a"], rows["vm/vm-b"], rows[""]
	if ra.Tenant != "acme" || ra.Department != "research" || ra.MIGUUID != "vgpu-a" || ra.MIGProfile != "vgpu:A100-4C" ||
		ra.SKU != "A100-SXM4-40GB/vgpu:A100-4C" || ra.GPUUUID != "GPU-v" {
		t.Fatalf("mapped instance row: %+v", ra)
	}
	// 20 % of the whole GPU for 10 s, capped at its 1 s share.
	if ra.SMActiveMicroseconds != 1_000_000 || ra.Unmeasured.Has(meter.UnmeasuredSMActive) {
		t.Fatalf("SM active %d µs, unmeasured %v", ra.SMActiveMicroseconds, ra.Unmeasured)
	}
	if ra.MemPeakBytes != 2<<30 || ra.MemMiBSeconds != 2048*10 {
		t.Fatalf("memory: peak %d, MiB·s %d", ra.MemPeakBytes, ra.MemMiBSeconds)
	}
	if rb.Tenant != collectors.UnattributedTenant || rb.MIGUUID != "vgpu-b" || !rb.Unmeasured.Has(meter.UnmeasuredSMActive) {
		t.Fatalf("unmapped VM row: %+v", rb)
	}
	if idle.Tenant != "" || idle.MIGUUID != "" || idle.SKU != "A100-SXM4-40GB" || idle.PCIeTxBytes != 0 {
		t.Fatalf("idle row: %+v", idle)
	}
	if ra.ID == rb.ID || ra.ID != collectors.SampleID("host-1", "vgpu-a", "acme", "vm/vm-a", vt0) {
		t.Fatal("sample ids must be per vGPU instance and owner")
	}
}

// NVIDIA does not mix MIG-backed and time-sliced vGPU on one GPU: such
// a reading is refused by CheckVGPU and apportioned to nothing.
func TestApportionVGPURejectsImpossibleReadings(t *testing.T) {
	cases := []struct {
		name string
		g    *collectors.GPUReading
		want string
	}{
		{"MIG-backed mixed with time-sliced", vgpuReading(collectors.SchedulerBestEffort, true,
			migBacked("v1", "A100-3-20C", 1, 3, "vm-a"), vi("v2", "A100-4C", 10, "vm-b")), "MIG-backed and 1 time-sliced"},
		{"time-sliced on a MIG GPU", vgpuReading(collectors.SchedulerBestEffort, true, vi("v2", "A100-4C", 10, "vm-b")), "in MIG mode"},
		{"MIG-backed without MIG mode", vgpuReading(collectors.SchedulerBestEffort, false, migBacked("v1", "A100-3-20C", 1, 3, "vm-a")), "not in MIG mode"},
		{"fixed share without max instances", vgpuReading(collectors.SchedulerFixedShare, false, vi("v1", "A100-4C", 0, "vm-a")), "max instances"},
		{"instance listed twice", vgpuReading(collectors.SchedulerFixedShare, false, vi("v1", "A100-4C", 10, "vm-a"), vi("v1", "A100-4C", 10, "vm-a")), "twice"},
		{"instance without a type", vgpuReading(collectors.SchedulerFixedShare, false, vi("v1", "", 10, "vm-a")), "no type"},
		{"vGPUs on a bare-metal GPU", func() *collectors.GPUReading {
			g := vgpuReading(collectors.SchedulerFixedShare, false, vi("v1", "A100-4C", 10, "vm-a"))
			g.Virtualization = collectors.VirtNone
			return g
		}(), "virtualization mode none"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.g.CheckVGPU()
			if !errors.Is(err, collectors.ErrBadVGPUReading) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckVGPU = %v, want %q", err, tc.want)
			}
			if s := Apportion(nil, "h", vt0, vt0.Add(vIv), tc.g); len(s) != 0 {
				t.Fatalf("apportioned a refused reading: %+v", s)
			}
		})
	}
}
