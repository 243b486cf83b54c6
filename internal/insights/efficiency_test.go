package insights

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/pricing"
)

func contractFor(t *testing.T, b *pricing.Book, tenant, sku, gpus string) *pricing.Contract {
	t.Helper()
	rate := dec("1.50")
	c := &pricing.Contract{Tenant: tenant, Start: t0.AddDate(0, -1, 0), End: t0.AddDate(0, 2, 0), Reservations: []pricing.Reservation{{SKU: sku, GPUs: dec(gpus), Rate: &rate}}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

const (
	a100 = "A100-SXM4-40GB"
	h100 = "H100-SXM5-80GB"
)

func TestIdleRunsWindowsAndThresholds(t *testing.T) {
	p := DefaultIdleParams() // 5 %, 30 min, 1 min gap
	const win = 180          // 30 min of 10 s intervals
	full := int64(win) * step.Microseconds()
	cases := []struct {
		name          string
		segs          []seg
		idle          int64
		spans         int
		unmeasured    int64
		measuredNotes string
	}{
		{"idle exactly the window counts", []seg{{n: win, share: 1, sm: 0}}, full, 1, 0, ""},
		{"idle one interval short of the window does not", []seg{{n: win - 1, share: 1, sm: 0}}, 0, 0, 0, ""},
		{"activity just under the threshold is idle", []seg{{n: win, share: 1, sm: 0.0499}}, full, 1, 0, ""},
		{"activity at the threshold is not idle", []seg{{n: win, share: 1, sm: 0.05}}, 0, 0, 0, ""},
		{"one busy interval splits the run", []seg{{n: win / 2, share: 1}, {n: 1, share: 1, sm: 0.9}, {n: win / 2, share: 1}}, 0, 0, 0, ""},
		{"busy then idle: only the idle part", []seg{{n: 60, share: 1, sm: 0.8}, {n: win + 10, share: 1}}, (win + 10) * step.Microseconds(), 1, 0, ""},
		{"unmeasured in the middle splits the run and is not idle", []seg{{n: win - 10, share: 1}, {n: 20, share: 1, unmeasured: true}, {n: win - 10, share: 1}}, 0, 0, 20 * step.Microseconds(), ""},
		{"all unmeasured is never idle", []seg{{n: 2 * win, share: 1, unmeasured: true}}, 0, 0, 2 * win * step.Microseconds(), ""},
		{"a gap within max gap joins the run", []seg{{n: win / 2, share: 1}, {n: win / 2, share: 1, gap: time.Minute}}, full, 1, 0, ""},
		{"a gap beyond max gap splits it", []seg{{n: win / 2, share: 1}, {n: win / 2, share: 1, gap: time.Minute + time.Second}}, 0, 0, 0, ""},
		{"a gap counts toward the window, not toward idle time", []seg{{n: win/2 - 3, share: 1}, {n: win / 2, share: 1, gap: 30 * time.Second}}, (win - 3) * step.Microseconds(), 1, 0, ""},
		{"two qualifying runs", []seg{{n: win, share: 1}, {n: 1, share: 1, sm: 1}, {n: win, share: 1}}, 2 * full, 2, 0, ""},
		{"a MIG share counts its GPU-equivalents", []seg{{n: win, share: 3.0 / 7}}, int64(win) * int64(float64(step.Microseconds())*3.0/7), 1, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := holding("acme", "research", "gpu-1", a100, intervals(t0, tc.segs...))
			if err := h.Validate(); err != nil {
				t.Fatal(err)
			}
			var seen int64
			tot, spans := idleRuns(h, p, func(iv Interval) { seen += iv.GPUMicros })
			if tot.IdleGPUMicros != tc.idle || len(spans) != tc.spans {
				t.Fatalf("idle %d µs in %d spans, want %d in %d", tot.IdleGPUMicros, len(spans), tc.idle, tc.spans)
			}
			if seen != tc.idle {
				t.Errorf("onIdle saw %d µs, want %d", seen, tc.idle)
			}
			if tot.UnmeasuredGPUMicros != tc.unmeasured {
				t.Errorf("unmeasured %d, want %d", tot.UnmeasuredGPUMicros, tc.unmeasured)
			}
			if tot.HeldGPUMicros != tot.MeasuredGPUMicros+tot.UnmeasuredGPUMicros || tot.IdleGPUMicros > tot.MeasuredGPUMicros {
				t.Errorf("totals do not reconcile: %+v", tot)
			}
		})
	}
}

func TestEfficiencyReportAndIdleCost(t *testing.T) {
	b := book(t)
	from, to := t0, t0.Add(24*time.Hour)
	twoHours := 720
	in := EfficiencyInput{
		From: from, To: to, Params: DefaultIdleParams(),
		Holdings: []Holding{
			// hoarder: 2 h idle on a whole A100, then 1 h busy.
			holding("hoarder", "research", "gpu-1", a100, intervals(from, seg{n: twoHours, share: 1}, seg{n: 360, share: 1, sm: 0.7})),
			// busy: 3 h busy, 20 min idle (under the window).
			holding("busy", "research", "gpu-2", a100, intervals(from, seg{n: 1080, share: 1, sm: 0.6}, seg{n: 120, share: 1})),
			// blind: 3 h with no SM readings: nothing idle, all unmeasured.
			holding("blind", "physics", "gpu-3", a100, intervals(from, seg{n: 1080, share: 1, unmeasured: true})),
			// tiered: 2 h idle on an H100 priced 10 for the first hour, 1 after.
			holding("tiered", "physics", "gpu-4", h100, intervals(from, seg{n: 360, share: 1, sm: 0.5}, seg{n: twoHours, share: 1})),
			// nobook: idle, but no pricing.
			holding("nobook", "physics", "gpu-5", a100, intervals(from, seg{n: twoHours, share: 1})),
		},
		Pricing: map[string]TenantPricing{"hoarder": {Book: b}, "busy": {Book: b}, "blind": {Book: b}, "tiered": {Book: b}},
	}
	rep, err := Efficiency(in)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]TenantEfficiency{}
	for _, r := range rep.Tenants {
		got[r.Tenant] = r
	}
	hour := int64(3_600_000_000)
	cases := []struct {
		tenant     string
		held, idle int64
		unmeasured int64
		cost       string // "" when nil
	}{
		{"hoarder", 3 * hour, 2 * hour, 0, "4.00"},
		{"busy", 3*hour + hour/3, 0, 0, "0.00"},
		{"blind", 3 * hour, 0, 3 * hour, "0.00"},
		// 3 h priced 10 + 1 + 1 = 12; without the 2 idle hours 10: saves 2.
		{"tiered", 3 * hour, 2 * hour, 0, "2.00"},
		{"nobook", 2 * hour, 2 * hour, 0, ""},
	}
	for _, tc := range cases {
		r, ok := got[tc.tenant]
		if !ok {
			t.Fatalf("no row for %s", tc.tenant)
		}
		if r.HeldGPUMicros != tc.held || r.IdleGPUMicros != tc.idle || r.UnmeasuredGPUMicros != tc.unmeasured {
			t.Errorf("%s: held %d idle %d unmeasured %d, want %d %d %d", tc.tenant, r.HeldGPUMicros, r.IdleGPUMicros, r.UnmeasuredGPUMicros, tc.held, tc.idle, tc.unmeasured)
		}
		switch {
		case tc.cost == "" && r.IdleCost != nil:
			t.Errorf("%s: cost %v, want none", tc.tenant, r.IdleCost)
		case tc.cost != "" && (r.IdleCost == nil || !r.IdleCost.Amount.Equal(dec(tc.cost)) || r.IdleCost.Currency != "USD"):
			t.Errorf("%s: cost %v, want %s USD", tc.tenant, r.IdleCost, tc.cost)
		}
	}
	if u, ok := got["blind"].Utilization(); ok {
		t.Errorf("blind: utilization %v reported without a measurement", u)
	}
	if u, ok := got["hoarder"].Utilization(); !ok || u < 0.2333 || u > 0.2334 {
		t.Errorf("hoarder: utilization %v, want 0.7/3", u)
	}
	if len(got["hoarder"].IdleSpans) != 1 || !got["hoarder"].IdleSpans[0].To.Equal(from.Add(2*time.Hour)) {
		t.Errorf("hoarder spans %+v", got["hoarder"].IdleSpans)
	}
	if len(rep.Departments) != 2 || rep.Departments[0].Department != "physics" || rep.Departments[1].Department != "research" {
		t.Fatalf("departments %+v", rep.Departments)
	}
	phys := rep.Departments[0]
	if phys.IdleGPUMicros != 4*hour || len(phys.IdleCost) != 1 || !phys.IdleCost[0].Amount.Equal(dec("2")) {
		t.Errorf("physics: idle %d cost %v", phys.IdleGPUMicros, phys.IdleCost)
	}
	var sum Totals
	for _, r := range rep.Tenants {
		sum.add(r.Totals)
	}
	if sum != rep.Fleet {
		t.Errorf("fleet %+v is not the sum of tenants %+v", rep.Fleet, sum)
	}

	// Regrouped as the chargeback's --slurm-accounts does: hoarder and
	// tiered under "sciences", the rest where they were.
	re := Regroup(rep, map[string]string{"hoarder": "sciences", "tiered": "sciences", "ghost": "nowhere"})
	if len(re.Departments) != 3 || re.Departments[2].Department != "sciences" {
		t.Fatalf("regrouped departments %+v", re.Departments)
	}
	sci := re.Departments[2]
	if sci.IdleGPUMicros != 4*hour || len(sci.IdleCost) != 1 || !sci.IdleCost[0].Amount.Equal(dec("6")) ||
		strings.Join(sci.Tenants, ",") != "hoarder,tiered" {
		t.Errorf("sciences: idle %d cost %v tenants %v", sci.IdleGPUMicros, sci.IdleCost, sci.Tenants)
	}
	if re.Fleet != rep.Fleet || rep.Departments[0].Department != "physics" || rep.Tenants[0].Department == "sciences" {
		t.Errorf("Regroup changed the fleet or the report it was given")
	}
}

func TestEfficiencyIdleCostUnderReservationIsZero(t *testing.T) {
	b := book(t)
	from, to := t0, t0.Add(24*time.Hour)
	ct := contractFor(t, b, "hoarder", a100, "1")
	rep, err := Efficiency(EfficiencyInput{
		From: from, To: to, Params: DefaultIdleParams(),
		Holdings: []Holding{holding("hoarder", "", "gpu-1", a100, intervals(from, seg{n: 720, share: 1}))},
		Pricing:  map[string]TenantPricing{"hoarder": {Book: b, Contract: ct}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Tenants[0].IdleCost; c == nil || !c.Amount.IsZero() {
		t.Errorf("idle hours inside a take-or-pay reservation cost %v, want 0", c)
	}
}

func TestEfficiencyValidateCollectsEveryProblem(t *testing.T) {
	bad := EfficiencyInput{
		From: t0.Add(time.Minute), To: t0,
		Params: IdleParams{SMThreshold: 2, Window: 0, MaxGap: -1},
		Holdings: []Holding{
			{Tenant: "", GPUUUID: "", SKU: "", Intervals: []Interval{{Start: t0, DurationMicros: 0}}},
			holding("a", "", "g", a100, []Interval{{Start: t0, DurationMicros: 10, GPUMicros: 20, SMActiveMicros: 30}, {Start: t0, DurationMicros: 10}}),
			holding("a", "", "g", a100, nil),
		},
		Pricing: map[string]TenantPricing{"x": {}},
	}
	_, err := Efficiency(bad)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"not a whole hour", "not after", "sm threshold", "window", "max gap", "tenant is empty", "gpu uuid is empty", "sku is empty", "duration 0", "exceeds the interval", "exceeds gpu", "before the previous interval ends", "repeats holdings[1]", "book is required"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
