package insights

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/partition"
)

// use is n intervals of 7 s (so that sevenths of the GPU are whole
// microseconds), each holding shareMicros of GPU time with smMicros of it
// SM-active and a memory peak of memBytes.
func use(start time.Time, n int, shareMicros, smMicros, memBytes int64) []Interval {
	const d = 7_000_000
	out := make([]Interval, n)
	for i := range out {
		out[i] = Interval{Start: start.Add(time.Duration(i) * 7 * time.Second), DurationMicros: d, GPUMicros: shareMicros, SMActiveMicros: smMicros, MemPeakBytes: memBytes}
	}
	return out
}

func TestRightSizeChoiceAtTheEdges(t *testing.T) {
	const (
		full    = 7_000_000
		seventh = 1_000_000
		gb      = 1_000_000_000
	)
	exact := RightSizeParams{Percentile: 1} // no headroom: edges are exact
	cases := []struct {
		name   string
		sku    string
		params RightSizeParams
		ivs    []Interval
		want   string // recommended SKU
		action Action
	}{
		{"oversized 7g using 4 GB and little SM becomes 1g.5gb (default headroom)", a100 + "/7g.40gb", DefaultRightSizeParams(), use(t0, 100, full, 300_000, 4*gb), a100 + "/1g.5gb", Downsize},
		{"memory exactly at 5 GB fits 1g.5gb", a100 + "/7g.40gb", exact, use(t0, 10, full, seventh, 5*gb), a100 + "/1g.5gb", Downsize},
		{"one byte more takes the wide 1g.10gb, not 2g", a100 + "/7g.40gb", exact, use(t0, 10, full, seventh, 5*gb+1), a100 + "/1g.10gb", Downsize},
		{"SM exactly 2/7 fits 2g.10gb", a100 + "/7g.40gb", exact, use(t0, 10, full, 2*seventh, gb), a100 + "/2g.10gb", Downsize},
		{"SM a microsecond over 2/7 needs 3g.20gb", a100 + "/7g.40gb", exact, use(t0, 10, full, 2*seventh+1, gb), a100 + "/3g.20gb", Downsize},
		{"headroom pushes 4.6 GB past 1g.5gb", a100 + "/3g.20gb", DefaultRightSizeParams(), use(t0, 10, 3*seventh, 0, 4_600_000_000), a100 + "/1g.10gb", Downsize},
		{"whole GPU with 15 GB and 0.3 GPUs of SM becomes 3g.20gb", a100, DefaultRightSizeParams(), use(t0, 10, full, 2_100_000, 15*gb), a100 + "/3g.20gb", Downsize},
		{"a MIG instance at its memory keeps its profile", a100 + "/3g.20gb", DefaultRightSizeParams(), use(t0, 10, 3*seventh, 3*seventh, 19*gb), a100 + "/3g.20gb", Keep},
		{"the smallest profile keeps", a100 + "/1g.5gb", DefaultRightSizeParams(), use(t0, 10, seventh, 0, 0), a100 + "/1g.5gb", Keep},
		{"unmeasured SM never shrinks compute", a100, DefaultRightSizeParams(), unmeasuredSM(use(t0, 10, full, 0, gb)), a100, Keep},
		{"time-sliced vGPU 10C using 3 GB becomes 4C", a100 + "/vgpu:A100-10C", DefaultRightSizeParams(), use(t0, 10, full/4, 300_000, 3*gb), a100 + "/vgpu:A100-4C", Downsize},
		{"MIG-backed vGPU 3-20C using 3 GB becomes 1-5C", a100 + "/vgpu:A100-3-20C", DefaultRightSizeParams(), use(t0, 10, 3*seventh, 300_000, 3*gb), a100 + "/vgpu:A100-1-5C", Downsize},
		{"a third of a time-sliced GPU with little demand becomes 1g.5gb", a100, DefaultRightSizeParams(), use(t0, 10, full/3, 300_000, 2*gb), a100 + "/1g.5gb", Downsize},
		{"a third of a time-sliced GPU needing 3g keeps its share", a100, DefaultRightSizeParams(), use(t0, 10, full/3, 2_100_000, 2*gb), a100, Keep},
		{"a model without a table keeps", "Tesla-T4", DefaultRightSizeParams(), use(t0, 10, full, 0, 0), "Tesla-T4", Keep},
		{"a vGPU of a model without a table keeps", "Tesla-T4/vgpu:T4-4C", DefaultRightSizeParams(), use(t0, 10, full/4, 0, gb), "Tesla-T4/vgpu:T4-4C", Keep},
		{"an unknown vGPU type keeps", a100 + "/vgpu:A100-3C", DefaultRightSizeParams(), use(t0, 10, full/4, 0, gb), a100 + "/vgpu:A100-3C", Keep},
		{"a passthrough GPU (the model's SKU) right-sizes like a whole GPU", a100, DefaultRightSizeParams(), use(t0, 10, full, 300_000, 3*gb), a100 + "/1g.5gb", Downsize},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := RightSize(RightSizeInput{From: t0, To: t0.Add(24 * time.Hour), Params: tc.params,
				Holdings: []Holding{holding("acme", "r", "gpu-1", tc.sku, tc.ivs)}})
			if err != nil {
				t.Fatal(err)
			}
			r := rep.Tenants[0]
			if r.Recommended.SKU != tc.want || r.Action != tc.action {
				t.Fatalf("recommended %s (%s, %s), want %s (%s); mem %d sm %v", r.Recommended.SKU, r.Action, r.Reason, tc.want, tc.action, r.MemBytes, r.SMGPUs)
			}
			if r.HeldGPUMicros-r.RecommendedGPUMicros != r.SavedGPUMicros {
				t.Errorf("saved %d ≠ held %d − recommended %d", r.SavedGPUMicros, r.HeldGPUMicros, r.RecommendedGPUMicros)
			}
			if tc.action == Keep && r.SavedGPUMicros != 0 {
				t.Errorf("keep saves %d", r.SavedGPUMicros)
			}
			if tc.action == Keep && r.Reason == "" {
				t.Error("keep without a reason")
			}
		})
	}
}

func unmeasuredSM(ivs []Interval) []Interval {
	for i := range ivs {
		ivs[i].SMUnmeasured, ivs[i].SMActiveMicros = true, 0
	}
	return ivs
}

func TestRightSizePercentile(t *testing.T) {
	const gb = 1_000_000_000
	// 100 intervals at 4 GB, then k at 30 GB.
	mk := func(k int) []Interval {
		ivs := use(t0, 100+k, 7_000_000, 100_000, 4*gb)
		for i := 100; i < 100+k; i++ {
			ivs[i].MemPeakBytes = 30 * gb
		}
		return ivs
	}
	cases := []struct {
		name string
		k    int
		p    float64
		mem  int64
	}{
		{"p99 ignores the top 1 %", 1, 0.99, 4 * gb},
		{"p99 sees 2 %", 2, 0.99, 30 * gb},
		{"p100 is the maximum", 1, 1, 30 * gb},
		{"p50 is the median", 40, 0.5, 4 * gb},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := RightSize(RightSizeInput{From: t0, To: t0.Add(time.Hour), Params: RightSizeParams{Percentile: tc.p},
				Holdings: []Holding{holding("acme", "", "g", a100+"/7g.40gb", mk(tc.k))}})
			if err != nil {
				t.Fatal(err)
			}
			if got := rep.Tenants[0].MemBytes; got != tc.mem {
				t.Errorf("mem percentile %d, want %d", got, tc.mem)
			}
		})
	}
}

func TestRightSizeSavingsDemandAndLayout(t *testing.T) {
	b := book(t)
	hours := 2 * 3600 / 7 // 2 h minus a few seconds of 7 s intervals
	const gb = 1_000_000_000
	fleet := partition.Fleet{GPUs: []partition.GPU{
		{Host: "h1", UUID: "gpu-1", Model: a100, MIGDisabled: true},
		{Host: "h1", UUID: "gpu-2", Model: a100, Instances: []partition.Instance{{Profile: "7g.40gb", UUID: "mig-1", Tenant: "big", Busy: true}}},
		{Host: "h1", UUID: "gpu-3", Model: a100, MIGDisabled: true},
		{Host: "h1", UUID: "gpu-4", Model: a100, MIGDisabled: true},
	}}
	in := RightSizeInput{
		From: t0, To: t0.Add(24 * time.Hour), Params: DefaultRightSizeParams(),
		Holdings: []Holding{
			// big: a 7g instance using 4 GB: 1g.5gb would do.
			{Tenant: "big", GPUUUID: "gpu-2", InstanceUUID: "mig-1", SKU: a100 + "/7g.40gb", Intervals: use(t0, hours, 7_000_000, 200_000, 4*gb)},
			// whole: two whole GPUs at once, 15 GB, 0.3 GPUs: two 3g.20gb.
			holding("whole", "", "gpu-1", a100, use(t0, 100, 7_000_000, 2_100_000, 15*gb)),
			holding("whole", "", "gpu-3", a100, use(t0, 100, 7_000_000, 2_100_000, 15*gb)),
			// busy: a whole GPU kept whole: no MIG demand, its GPU stays whole.
			holding("busy", "", "gpu-4", a100, use(t0, 100, 7_000_000, 7_000_000, 30*gb)),
			// odd: a 7g instance into 1g.10gb, which the book does not price.
			{Tenant: "odd", GPUUUID: "gpu-2", InstanceUUID: "mig-9", SKU: a100 + "/7g.40gb", Intervals: use(t0, 10, 7_000_000, 0, 9*gb)},
		},
		Pricing: map[string]TenantPricing{"big": {Book: b}, "odd": {Book: b}},
		Fleet:   &fleet,
	}
	rep, err := RightSize(in)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]RightSizing{}
	for _, r := range rep.Tenants {
		got[r.Tenant] = r
	}
	big := got["big"]
	held := int64(hours) * 7_000_000
	if big.HeldGPUMicros != held || big.RecommendedGPUMicros != held/7 || big.SavedGPUMicros != held-held/7 {
		t.Errorf("big: held %d recommended %d saved %d", big.HeldGPUMicros, big.RecommendedGPUMicros, big.SavedGPUMicros)
	}
	// 2.10 per GPU-hour on both SKUs: saving = 6/7 of the hours held × 2.10.
	want := GPUHours(held - held/7).Mul(dec("2.10")).Round(2)
	if big.Saving == nil || !big.Saving.Amount.Equal(want) {
		t.Errorf("big: saving %v, want %s", big.Saving, want)
	}
	if w := got["whole"]; w.Concurrent != 2 || w.Instances != 2 || w.Recommended.SKU != a100+"/3g.20gb" || w.Saving != nil {
		t.Errorf("whole: %+v", w)
	}
	if o := got["odd"]; o.Saving != nil || len(o.Unpriced) != 1 || o.Unpriced[0] != a100+"/1g.10gb" {
		t.Errorf("odd: saving %v unpriced %v", o.Saving, o.Unpriced)
	}
	var reqs []string
	for _, td := range rep.Demand.Tenants {
		for _, r := range td.Pending {
			reqs = append(reqs, td.Tenant+":"+r.Profile+"×"+strconv.Itoa(r.Count))
		}
	}
	if strings.Join(reqs, " ") != "big:1g.5gb×1 odd:1g.10gb×1 whole:3g.20gb×2" {
		t.Errorf("demand %v", reqs)
	}
	if rep.Plan == nil || len(rep.Plan.Unmet) != 0 {
		t.Fatalf("plan %+v", rep.Plan)
	}
	// Two 3g.20gb take all 8 memory slots of an A100, so the two 1g
	// instances need a second GPU: two of the three GPUs are used.
	if rep.GPUsUsed != 2 {
		t.Errorf("gpus used %d, want 2", rep.GPUsUsed)
	}
	for _, g := range rep.Plan.GPUs {
		if g.MIGDisabled != (g.UUID == "gpu-4") {
			t.Errorf("%s: mig disabled %v; only the kept whole GPU stays whole", g.UUID, g.MIGDisabled)
		}
	}
}

func TestRightSizeValidate(t *testing.T) {
	_, err := RightSize(RightSizeInput{
		From: t0, To: t0.Add(time.Hour), Params: RightSizeParams{Percentile: 0, MemHeadroom: -1},
		Holdings:  []Holding{holding("a", "", "g", a100, use(t0.Add(2*time.Hour), 1, 1, 0, 0))},
		VGPUTypes: map[string][]string{a100: {"A100-3-20C", "nope"}},
		Fleet:     &partition.Fleet{GPUs: []partition.GPU{{UUID: "", Model: "x"}}},
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"percentile", "mem headroom", "outside the period", `"A100-3-20C" is no time-sliced`, `"nope"`, "fleet:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
