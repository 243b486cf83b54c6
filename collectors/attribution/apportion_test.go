package attribution

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
)

var (
	start = time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	end   = start.Add(10 * time.Second)
)

const tenSeconds = 10_000_000 // µs

func at(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }

func ppm(p uint32) collectors.Ratio { return collectors.Ratio{PPM: p * 10_000, OK: true} }

func owner(tenant, workload string) collectors.Owner {
	return collectors.Owner{Tenant: tenant, Workload: workload}
}

// proc is a process present for [from, to) seconds of the interval.
func proc(pid uint32, mig string, from, to float64, util uint32, memGiB uint64, o collectors.Owner) collectors.Process {
	return collectors.Process{
		PID: pid, MIGUUID: mig, ActiveFrom: at(from), ActiveTo: at(to),
		MemBytes: memGiB << 30, MemPeakBytes: memGiB << 30, SMUtil: ppm(util), Owner: o,
	}
}

func wholeGPU(procs ...collectors.Process) collectors.GPUReading {
	return collectors.GPUReading{
		GPU:                collectors.GPU{UUID: "GPU-1", Model: "A100-SXM4-40GB"},
		Processes:          procs,
		ProcessUtilization: true,
		Counters:           counters(map[meter.ID]uint64{meter.Energy: 1_000_003, meter.PCIeTx: 999, meter.PCIeRx: 5}),
	}
}

// counters are device counter deltas, each measured; the others missing.
func counters(values map[meter.ID]uint64) (c [meter.Count]collectors.Delta) {
	for id, v := range values {
		c[id] = collectors.Delta{Value: v, OK: true}
	}
	return c
}

func migGPU(insts []collectors.MIGInstance, procs ...collectors.Process) collectors.GPUReading {
	return collectors.GPUReading{
		GPU:              collectors.GPU{UUID: "GPU-2", Model: "H100-SXM5-80GB"},
		MIG:              true,
		TotalMilliSlices: 7000,
		Instances:        insts,
		Processes:        procs,
		Counters:         counters(map[meter.ID]uint64{meter.Energy: 700_001, meter.NVLinkTx: 7 << 20}),
	}
}

func inst(uuid, profile string, slices uint64, claims ...collectors.Owner) collectors.MIGInstance {
	return collectors.MIGInstance{UUID: uuid, Profile: profile, MilliSlices: slices * 1000, Claims: claims}
}

// want is one expected row; only the fields named are checked.
type want struct {
	f   fields
	sku string
}

type fields map[string]uint64

func TestApportion(t *testing.T) {
	a := owner("alpha", "ns-a/pod-a")
	b := owner("beta", "ns-b/pod-b")
	cases := []struct {
		name string
		gpu  collectors.GPUReading
		want map[string]want // only the fields set are checked, gpu always
	}{
		{
			name: "whole GPU held by one process all interval goes to its tenant",
			gpu:  wholeGPU(proc(1, "", 0, 10, 80, 4, a)),
			want: map[string]want{"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": tenSeconds, "sm": 8_000_000, "memMiBs": 4096 * 10, "energy": 1_000_003, "pcieTx": 999}, sku: "A100-SXM4-40GB"}},
		},
		{
			name: "whole GPU unclaimed and unused is idle",
			gpu:  wholeGPU(),
			want: map[string]want{"GPU-1  ": {f: fields{"gpu": tenSeconds, "energy": 1_000_003, "pcieTx": 999}}},
		},
		{
			name: "whole GPU claimed by a pod without processes goes to the pod",
			gpu:  func() collectors.GPUReading { g := wholeGPU(); g.Claims = []collectors.Owner{a}; return g }(),
			want: map[string]want{"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": tenSeconds, "energy": 1_000_003, "pcieTx": 999}}},
		},
		{
			name: "a process present half the interval leaves the other half idle",
			gpu:  wholeGPU(proc(1, "", 5, 10, 50, 2, a)),
			want: map[string]want{
				"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": 5_000_000, "sm": 2_500_000, "memMiBs": 2048 * 5, "pcieTx": 999}},
				"GPU-1  ":                {f: fields{"gpu": 5_000_000, "sm": 0, "pcieTx": 0}},
			},
		},
		{
			name: "a claimed GPU's unused time goes to the claimant, merged with its process",
			gpu: func() collectors.GPUReading {
				g := wholeGPU(proc(1, "", 5, 10, 50, 2, a))
				g.Claims = []collectors.Owner{a}
				return g
			}(),
			want: map[string]want{"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": tenSeconds, "sm": 2_500_000, "memMiBs": 2048 * 5}}},
		},
		{
			name: "time-sliced GPU is split by SM utilization",
			gpu:  wholeGPU(proc(1, "", 0, 10, 60, 4, a), proc(2, "", 0, 10, 20, 8, b)),
			want: map[string]want{
				"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": 7_500_000, "sm": 6_000_000, "memMiBs": 40960}},
				"GPU-1 beta ns-b/pod-b":  {f: fields{"gpu": 2_500_000, "sm": 2_000_000, "memMiBs": 81920}},
			},
		},
		{
			name: "time-sliced GPU where nothing ran is split by memory",
			gpu:  wholeGPU(proc(1, "", 0, 10, 0, 1, a), proc(2, "", 0, 10, 0, 3, b)),
			want: map[string]want{
				"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": 2_500_000}},
				"GPU-1 beta ns-b/pod-b":  {f: fields{"gpu": 7_500_000}},
			},
		},
		{
			name: "without per-process utilization the split is by memory",
			gpu: func() collectors.GPUReading {
				g := wholeGPU(proc(1, "", 0, 10, 90, 1, a), proc(2, "", 0, 10, 10, 1, b))
				g.ProcessUtilization = false
				return g
			}(),
			want: map[string]want{
				"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": 5_000_000}},
				"GPU-1 beta ns-b/pod-b":  {f: fields{"gpu": 5_000_000}},
			},
		},
		{
			name: "without utilization or memory the split is by presence",
			gpu:  wholeGPU(proc(1, "", 0, 10, 0, 0, a), proc(2, "", 0, 5, 0, 0, b)),
			want: map[string]want{
				"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": 6_666_667}},
				"GPU-1 beta ns-b/pod-b":  {f: fields{"gpu": 3_333_333}},
			},
		},
		{
			name: "a process that exited mid-interval is weighed by its presence",
			gpu:  wholeGPU(proc(1, "", 0, 10, 50, 10, a), proc(2, "", 0, 4, 50, 20, b)),
			want: map[string]want{
				"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": 7_142_857, "memMiBs": 10240 * 10}},
				"GPU-1 beta ns-b/pod-b":  {f: fields{"gpu": 2_857_143, "memMiBs": 20480 * 4}},
			},
		},
		{
			name: "usage nothing attributed is kept as its own row",
			gpu:  wholeGPU(proc(77, "", 0, 10, 30, 1, collectors.Owner{})),
			want: map[string]want{"GPU-1 (unattributed) pid/77": {f: fields{"gpu": tenSeconds}}},
		},
		{
			name: "a workload without tenant is unattributed and keeps the workload",
			gpu:  wholeGPU(proc(5, "", 0, 10, 30, 1, collectors.Owner{Workload: "slurm/42"})),
			want: map[string]want{"GPU-1 (unattributed) slurm/42": {f: fields{"gpu": tenSeconds}}},
		},
		{
			name: "processes of one pod make one row",
			gpu:  wholeGPU(proc(1, "", 0, 10, 30, 1, a), proc(2, "", 0, 10, 10, 1, a)),
			want: map[string]want{"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": tenSeconds, "sm": 4_000_000, "memMiBs": 2048 * 10}}},
		},
		{
			name: "two claimants share unused time equally",
			gpu:  func() collectors.GPUReading { g := wholeGPU(); g.Claims = []collectors.Owner{b, a, a}; return g }(),
			want: map[string]want{
				"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": 5_000_000}},
				"GPU-1 beta ns-b/pod-b":  {f: fields{"gpu": 5_000_000}},
			},
		},
		{
			name: "device utilization gives SM-active time where per-process is missing",
			gpu: func() collectors.GPUReading {
				g := wholeGPU()
				g.Claims = []collectors.Owner{a}
				g.ProcessUtilization = false
				g.SMActive = ppm(40)
				return g
			}(),
			want: map[string]want{"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": tenSeconds, "sm": 4_000_000}}},
		},
		{
			name: "energy and traffic not reported stay zero",
			gpu: func() collectors.GPUReading {
				g := wholeGPU(proc(1, "", 0, 10, 80, 4, a))
				g.Counters[meter.Energy], g.Counters[meter.PCIeTx] = collectors.Delta{}, collectors.Delta{Value: 5}
				return g
			}(),
			want: map[string]want{"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": tenSeconds, "energy": 0, "pcieTx": 0}}},
		},
		{
			name: "MIG instances get compute-slice shares and the spare slice is idle",
			gpu: migGPU([]collectors.MIGInstance{inst("MIG-c", "3g.40gb", 3), inst("MIG-a", "1g.10gb", 1), inst("MIG-b", "2g.20gb", 2)},
				proc(1, "MIG-a", 0, 10, 0, 5, a), proc(2, "MIG-b", 0, 10, 0, 10, b), proc(3, "MIG-c", 0, 10, 0, 20, owner("gamma", "ns-c/pod-c"))),
			want: map[string]want{
				"MIG-a alpha ns-a/pod-a": {f: fields{"gpu": 1_428_572}, sku: "H100-SXM5-80GB/1g.10gb"},
				"MIG-b beta ns-b/pod-b":  {f: fields{"gpu": 2_857_143}, sku: "H100-SXM5-80GB/2g.20gb"},
				"MIG-c gamma ns-c/pod-c": {f: fields{"gpu": 4_285_714}, sku: "H100-SXM5-80GB/3g.40gb"},
				"GPU-2  ":                {f: fields{"gpu": 1_428_571}, sku: "H100-SXM5-80GB"},
			},
		},
		{
			name: "equal MIG instances break the remainder tie in UUID order",
			gpu:  migGPU([]collectors.MIGInstance{inst("MIG-z", "1g.10gb", 1, owner("zeta", "")), inst("MIG-y", "1g.10gb", 1, owner("ypsilon", ""))}),
			want: map[string]want{
				"MIG-y ypsilon ": {f: fields{"gpu": 1_428_572}},
				"MIG-z zeta ":    {f: fields{"gpu": 1_428_571}},
				"GPU-2  ":        {f: fields{"gpu": 7_142_857}},
			},
		},
		{
			name: "an empty unclaimed MIG instance is idle under its own UUID and SKU",
			gpu:  migGPU([]collectors.MIGInstance{inst("MIG-a", "4g.40gb", 4), inst("MIG-b", "3g.40gb", 3)}),
			want: map[string]want{
				"MIG-a  ": {f: fields{"gpu": 5_714_286}, sku: "H100-SXM5-80GB/4g.40gb"},
				"MIG-b  ": {f: fields{"gpu": 4_285_714}, sku: "H100-SXM5-80GB/3g.40gb"},
			},
		},
		{
			name: "a rented MIG instance is its tenant's whether used or not",
			gpu: migGPU([]collectors.MIGInstance{inst("MIG-a", "7g.80gb", 7, collectors.Owner{Tenant: "alpha", Department: "physics"})},
				proc(1, "MIG-a", 5, 10, 0, 5, a)),
			want: map[string]want{
				"MIG-a alpha ":           {f: fields{"gpu": 5_000_000}},
				"MIG-a alpha ns-a/pod-a": {f: fields{"gpu": 5_000_000, "memMiBs": 5120 * 5}},
			},
		},
		{
			name: "GPM activity gives MIG rows SM-active time",
			gpu: func() collectors.GPUReading {
				g := migGPU([]collectors.MIGInstance{inst("MIG-a", "7g.80gb", 7)}, proc(1, "MIG-a", 0, 10, 0, 5, a))
				g.Instances[0].SMActive = ppm(25)
				return g
			}(),
			want: map[string]want{"MIG-a alpha ns-a/pod-a": {f: fields{"gpu": tenSeconds, "sm": 2_500_000, "energy": 700_001, "nvlinkTx": 7 << 20}}},
		},
		{
			name: "a process on no known MIG device keeps its row but gets no time",
			gpu:  migGPU([]collectors.MIGInstance{inst("MIG-a", "7g.80gb", 7)}, proc(9, "MIG-gone", 0, 10, 0, 5, a)),
			want: map[string]want{
				"MIG-a  ":                {f: fields{"gpu": tenSeconds}},
				"GPU-2 alpha ns-a/pod-a": {f: fields{"gpu": 0, "memMiBs": 5120 * 10}},
			},
		},
		{
			name: "energy is split by GPU time plus SM-active time, idle included",
			gpu: func() collectors.GPUReading {
				g := wholeGPU(proc(1, "", 5, 10, 100, 1, a))
				g.Counters[meter.Energy] = collectors.Delta{Value: 1500, OK: true}
				return g
			}(),
			// alpha: 5 s + 5 s active, idle: 5 s → 2:1
			want: map[string]want{
				"GPU-1 alpha ns-a/pod-a": {f: fields{"gpu": 5_000_000, "sm": 5_000_000, "energy": 1000, "pcieTx": 999}},
				"GPU-1  ":                {f: fields{"gpu": 5_000_000, "energy": 500, "pcieTx": 0}},
			},
		},
		{
			name: "traffic on an unused GPU stays on the idle row",
			gpu:  wholeGPU(),
			want: map[string]want{"GPU-1  ": {f: fields{"gpu": tenSeconds, "pcieTx": 999}}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Apportion(nil, "host-1", start, end, &tc.gpu)
			checkApportionInvariants(t, &tc.gpu, got)
			rows := map[string]collectors.Sample{}
			for _, s := range got {
				dev := s.GPUUUID
				if s.MIGUUID != "" {
					dev = s.MIGUUID
				}
				rows[dev+" "+s.Tenant+" "+s.Workload] = s
			}
			if len(rows) != len(tc.want) {
				t.Errorf("rows %v, want %d rows", slices.Sorted(maps.Keys(rows)), len(tc.want))
			}
			for key, w := range tc.want {
				s, ok := rows[key]
				if !ok {
					t.Errorf("row %q missing; have %v", key, slices.Sorted(maps.Keys(rows)))
					continue
				}
				if _, ok := w.f["gpu"]; !ok {
					t.Errorf("%q: case does not say the gpu time", key)
				}
				actual := fields{
					"gpu": s.GPUMicroseconds, "sm": s.SMActiveMicroseconds, "memMiBs": s.MemMiBSeconds,
					"energy": s.EnergyMillijoules, "pcieTx": s.PCIeTxBytes, "nvlinkTx": s.NVLinkTxBytes,
				}
				for field, v := range w.f {
					if got, ok := actual[field]; !ok || got != v {
						t.Errorf("%q: %s %d, want %d", key, field, got, v)
					}
				}
				if w.sku != "" && s.SKU != w.sku {
					t.Errorf("%q: sku %q, want %q", key, s.SKU, w.sku)
				}
			}
		})
	}
}

// checkApportionInvariants holds on every case: GPU time adds up to the
// interval, energy rows to the delta, traffic to its delta; every sample
// is valid with a unique id; the result does not depend on input order.
func checkApportionInvariants(t *testing.T, g *collectors.GPUReading, got []collectors.Sample) {
	t.Helper()
	var us, mj, tx uint64
	ids := map[uint64]bool{}
	for _, s := range got {
		if err := s.Validate(); err != nil {
			t.Errorf("invalid sample %+v: %v", s, err)
		}
		if ids[s.ID] {
			t.Errorf("duplicate sample id %d", s.ID)
		}
		ids[s.ID] = true
		us += s.GPUMicroseconds
		mj += s.EnergyMillijoules
		tx += s.PCIeTxBytes
		if s.SMActiveMicroseconds > s.GPUMicroseconds {
			t.Errorf("sm-active %d above gpu time %d", s.SMActiveMicroseconds, s.GPUMicroseconds)
		}
	}
	if us != tenSeconds {
		t.Errorf("gpu time adds up to %d µs, want %d", us, tenSeconds)
	}
	if g.Counters[meter.Energy].OK && mj != g.Counters[meter.Energy].Value {
		t.Errorf("energy adds up to %d mJ, want %d", mj, g.Counters[meter.Energy].Value)
	}
	if !g.Counters[meter.Energy].OK && mj != 0 {
		t.Errorf("energy %d mJ from a GPU that reported none", mj)
	}
	if g.Counters[meter.PCIeTx].OK && tx != g.Counters[meter.PCIeTx].Value {
		t.Errorf("pcie tx adds up to %d, want %d", tx, g.Counters[meter.PCIeTx].Value)
	}
	// Same input, same output; shuffled input, same output.
	again := Apportion(nil, "host-1", start, end, g)
	if !slices.Equal(again, got) {
		t.Errorf("second run differs")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5 {
		s := shuffled(g, rng)
		if other := Apportion(nil, "host-1", start, end, &s); !slices.Equal(other, got) {
			t.Errorf("result depends on input order:\n got %v\nwant %v", other, got)
			break
		}
	}
}

func shuffled(g *collectors.GPUReading, rng *rand.Rand) collectors.GPUReading {
	s := *g
	s.Processes = slices.Clone(g.Processes)
	s.Instances = slices.Clone(g.Instances)
	s.Claims = slices.Clone(g.Claims)
	rng.Shuffle(len(s.Processes), func(i, j int) { s.Processes[i], s.Processes[j] = s.Processes[j], s.Processes[i] })
	rng.Shuffle(len(s.Instances), func(i, j int) { s.Instances[i], s.Instances[j] = s.Instances[j], s.Instances[i] })
	rng.Shuffle(len(s.Claims), func(i, j int) { s.Claims[i], s.Claims[j] = s.Claims[j], s.Claims[i] })
	return s
}

func TestApportionSampleIDsAreStableAndDistinct(t *testing.T) {
	g := wholeGPU(proc(1, "", 0, 10, 60, 4, owner("alpha", "ns/a")), proc(2, "", 0, 10, 20, 8, owner("beta", "ns/b")))
	first := Apportion(nil, "host-1", start, end, &g)
	for _, s := range first {
		if want := collectors.SampleID("host-1", "GPU-1", s.Tenant, s.Workload, start); s.ID != want {
			t.Errorf("id %d, want SampleID(...) = %d", s.ID, want)
		}
	}
	// Another host, or the next interval, gives other ids.
	other := Apportion(nil, "host-2", start, end, &g)
	next := Apportion(nil, "host-1", end, end.Add(10*time.Second), &g)
	for i := range first {
		if first[i].ID == other[i].ID || first[i].ID == next[i].ID {
			t.Errorf("sample %d id collides across host or interval", i)
		}
	}
}

func TestApportionMakesNothingForFailedGPUsOrEmptyIntervals(t *testing.T) {
	g := wholeGPU(proc(1, "", 0, 10, 60, 4, owner("alpha", "ns/a")))
	g.Err = fmt.Errorf("gpu is lost")
	if got := Apportion(nil, "h", start, end, &g); len(got) != 0 {
		t.Fatalf("failed gpu made %d samples", len(got))
	}
	g.Err = nil
	if got := Apportion(nil, "h", start, start, &g); len(got) != 0 {
		t.Fatalf("empty interval made %d samples", len(got))
	}
	if got := Apportion(nil, "h", start, end, nil); len(got) != 0 {
		t.Fatalf("nil reading made %d samples", len(got))
	}
}

// "Not supported is not zero": a meter the GPU did not report is flagged
// unmeasured on every row of that GPU, not passed off as zero usage.
func TestApportionFlagsUnmeasuredMeters(t *testing.T) {
	cases := []struct {
		name string
		gpu  collectors.GPUReading
		want meter.Unmeasured
	}{
		// wholeGPU reports energy and PCIe, but no NVLink (a PCIe board).
		{"whole GPU without NVLink", wholeGPU(proc(1, "", 0, 10, 60, 4, owner("alpha", "ns/a"))), meter.UnmeasuredNVLink},
		{"whole GPU without per-process or device SM activity", func() collectors.GPUReading {
			g := wholeGPU(proc(1, "", 0, 10, 60, 4, owner("alpha", "ns/a")))
			g.ProcessUtilization = false
			g.Counters[meter.NVLinkTx], g.Counters[meter.NVLinkRx] = collectors.Delta{OK: true}, collectors.Delta{OK: true}
			return g
		}(), meter.UnmeasuredSMActive},
		// migGPU reports energy and NVLink TX only; its instances have no GPM.
		{"MIG GPU without GPM, PCIe or NVLink RX", migGPU([]collectors.MIGInstance{inst("MIG-a", "3g.40gb", 3, owner("alpha", "ns/a"))}),
			meter.UnmeasuredSMActive | meter.UnmeasuredPCIe | meter.UnmeasuredNVLink},
		{"first interval: no energy baseline yet", func() collectors.GPUReading {
			g := wholeGPU(proc(1, "", 0, 10, 60, 4, owner("alpha", "ns/a")))
			g.Counters[meter.Energy] = collectors.Delta{}
			g.Counters[meter.NVLinkTx], g.Counters[meter.NVLinkRx] = collectors.Delta{OK: true}, collectors.Delta{OK: true}
			return g
		}(), meter.UnmeasuredEnergy},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Apportion(nil, "h", start, end, &tc.gpu)
			if len(got) == 0 {
				t.Fatal("no samples")
			}
			for _, s := range got {
				if s.Unmeasured != tc.want {
					t.Errorf("row %s/%s: unmeasured %04b, want %04b", s.Tenant, s.MIGUUID, s.Unmeasured, tc.want)
				}
			}
		})
	}
}
