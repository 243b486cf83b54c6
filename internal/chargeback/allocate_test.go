package chargeback

import (
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

var (
	usd = pricing.Currency{Code: "USD", MinorUnits: 2, Rounding: pricing.HalfAwayFromZero}
	nov = Period{Label: "2026-11", Start: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), End: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
)

// hour is 2026-11-<day> <h>:00 UTC.
func hour(day, h int) time.Time { return time.Date(2026, 11, day, h, 0, 0, 0, time.UTC) }

// costs builds a Cost map from meter, amount pairs.
func costs(kv ...string) map[pricing.Meter]decimal.Decimal {
	m := map[pricing.Meter]decimal.Decimal{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[pricing.Meter(kv[i])] = dec(kv[i+1])
	}
	return m
}

const (
	h100    = "H100-SXM5-80GB"
	mig3    = "H100-SXM5-80GB/3g.40gb"
	a100    = "A100-SXM4-40GB"
	gpuHour = 3_600_000_000 // GPU-microseconds in one GPU-hour
)

// fleetRows is a small fleet over two days, priced at $2.50 per GPU-hour
// and $0.15 per kWh:
//
//   - physics/alice holds a whole H100 for an hour on each day;
//   - physics/bob holds a 3g.40gb MIG instance (3/7 of the H100 next door:
//     1,542,857,143 µs, not a whole number of anything) on day 1, and the 4/7
//     no one was handed is idle;
//   - chemistry/carol and biology/dave time-slice an A100 60/40 on day 1;
//   - on day 2 that A100 sits idle.
//
// Exact fleet cost 12.725, so 12.73 after rounding once.
func fleetRows() []Row {
	return []Row{
		{Department: "physics", Tenant: "alice", SKU: h100, Site: "eu-west", Hour: hour(1, 10),
			GPUMicroseconds: gpuHour, SMActiveMicroseconds: 2_700_000_000, MemMiBSeconds: 81920 * 3600,
			EnergyMillijoules: 2_520_000_000, EnergySource: EnergyMeasured, // 0.7 kWh
			Cost: costs("gpu_hours", "2.50", "energy_kwh", "0.105")},
		{Department: "physics", Tenant: "bob", SKU: mig3, Site: "eu-west", Hour: hour(1, 10),
			GPUMicroseconds: 1_542_857_143, SMActiveMicroseconds: 1_000_000_000, MemMiBSeconds: 40960 * 3600,
			EnergyMillijoules: 1_080_000_000, EnergySource: EnergySplitBySlices, // 0.3 kWh
			Cost: costs("gpu_hours", "1.071428571", "energy_kwh", "0.045")},
		{SKU: h100, Site: "eu-west", Hour: hour(1, 10),
			GPUMicroseconds: 2_057_142_857, EnergyMillijoules: 360_000_000, EnergySource: EnergySplitBySlices, // 0.1 kWh
			Cost: costs("gpu_hours", "1.428571429", "energy_kwh", "0.015")},
		{Department: "chemistry", Tenant: "carol", SKU: a100, Hour: hour(1, 10),
			GPUMicroseconds: 2_160_000_000, SMActiveMicroseconds: 1_800_000_000, MemMiBSeconds: 24576 * 3600,
			EnergyMillijoules: 1_440_000_000, EnergySource: EnergyMeasured, // 0.4 kWh
			Cost: costs("gpu_hours", "1.50", "energy_kwh", "0.06")},
		{Department: "biology", Tenant: "dave", SKU: a100, Hour: hour(1, 10),
			GPUMicroseconds: 1_440_000_000, SMActiveMicroseconds: 360_000_000, MemMiBSeconds: 16384 * 3600,
			Unmeasured: meter.UnmeasuredTime{meter.GroupSMActive: 360_000_000, meter.GroupEnergy: 1_440_000_000},
			Cost:       costs("gpu_hours", "1.00")},
		{Department: "physics", Tenant: "alice", SKU: h100, Site: "eu-west", Hour: hour(2, 3),
			GPUMicroseconds: gpuHour, SMActiveMicroseconds: gpuHour, Cost: costs("gpu_hours", "2.50")},
		{SKU: a100, Hour: hour(2, 3), GPUMicroseconds: gpuHour, Cost: costs("gpu_hours", "2.50")},
	}
}

func fleetInput(mode IdleMode) Input {
	return Input{Period: nov, Currency: usd, Rows: fleetRows(), Idle: mode,
		Weights: map[string]decimal.Decimal{"physics": dec("3"), "chemistry": dec("1"), "biology": dec("0")}}
}

// tenantCosts maps "department/tenant" to its total cost, and "idle" to
// the idle row's.
func tenantCosts(rep Report) map[string]string {
	out := map[string]string{}
	for _, d := range rep.Departments {
		for _, t := range d.Tenants {
			out[d.Name+"/"+t.Name] = t.Cost.StringFixed(2) + " (idle " + t.IdleCost.StringFixed(2) + ")"
		}
	}
	if rep.Idle != nil {
		out["idle"] = rep.Idle.Cost.StringFixed(2)
	}
	return out
}

// The direct cost parts are the same in every mode: 12.73 split over
// (owner, meter) by exact cost gives dave 1.00, carol 1.50+0.06, alice
// 5.00+0.11, bob 1.07+0.05 and idle 3.93+0.01 = 3.94.
func TestAllocateIdleModes(t *testing.T) {
	cases := []struct {
		name string
		mode IdleMode
		want map[string]string
	}{
		{"own row: idle capacity is its own 3.94 row", IdleOwnRow, map[string]string{
			"biology/dave": "1.00 (idle 0.00)", "chemistry/carol": "1.56 (idle 0.00)",
			"physics/alice": "5.11 (idle 0.00)", "physics/bob": "1.12 (idle 0.00)", "idle": "3.94"}},
		// 394 cents by GPU-µs 1.44e9 : 2.16e9 : 7.2e9 : 1,542,857,143 = 45.9, 68.9, 229.7, 49.2
		// → floors 45, 68, 229, 49 (391), the 3 left to the largest remainders (dave, carol, alice).
		{"by use: 3.94 by GPU time held", IdleByUse, map[string]string{
			"biology/dave": "1.46 (idle 0.46)", "chemistry/carol": "2.25 (idle 0.69)",
			"physics/alice": "7.41 (idle 2.30)", "physics/bob": "1.61 (idle 0.49)"}},
		// weights biology 0, chemistry 1, physics 3: 0, 0.985 → 0.99, 2.955 → 2.95;
		// physics by use: 2.95 × 7.2e9/8,742,857,143 = 2.4294 → 2.43, bob 0.52.
		{"by weight: 0:1:3, then by use within physics", IdleByWeight, map[string]string{
			"biology/dave": "1.00 (idle 0.00)", "chemistry/carol": "2.55 (idle 0.99)",
			"physics/alice": "7.54 (idle 2.43)", "physics/bob": "1.64 (idle 0.52)"}},
		// 3.94 / 3 = 1.3133: 1.32, 1.31, 1.31; physics' 1.31 by use: 1.0788 → 1.08, 0.23.
		{"evenly: a third per department, then by use", IdleEvenly, map[string]string{
			"biology/dave": "2.32 (idle 1.32)", "chemistry/carol": "2.87 (idle 1.31)",
			"physics/alice": "6.19 (idle 1.08)", "physics/bob": "1.35 (idle 0.23)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := fleetInput(tc.mode)
			rep, err := Allocate(in)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, in, rep)
			got := tenantCosts(rep)
			for k, want := range tc.want {
				if got[k] != want {
					t.Errorf("%s = %s, want %s", k, got[k], want)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("rows %v, want %v", got, tc.want)
			}
			if !rep.Fleet.Cost.Equal(dec("12.73")) || !rep.Fleet.IdleCost.Equal(dec("3.94")) {
				t.Errorf("fleet cost %s, idle %s; want 12.73 (12.725 rounded once), 3.94", rep.Fleet.Cost, rep.Fleet.IdleCost)
			}
			if (rep.Idle != nil) != (tc.mode == IdleOwnRow) {
				t.Errorf("idle row %v in mode %s", rep.Idle, tc.mode)
			}
		})
	}
}

// The fleet's capacity is what tenants held plus what was idle, with MIG
// and time-sliced shares counted by what was held, not as whole GPUs.
func TestAllocateCapacityAndQuantities(t *testing.T) {
	rep, err := Allocate(fleetInput(IdleOwnRow))
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Fleet.GPUMicroseconds; got != 5*gpuHour {
		t.Errorf("fleet GPU time %d µs, want 5 GPU-hours (3 GPUs on day 1, 2 on day 2)", got)
	}
	if !rep.Fleet.GPUHours.Equal(dec("5")) {
		t.Errorf("fleet GPU-hours %s, want 5", rep.Fleet.GPUHours)
	}
	bob := rep.Departments[2].Tenants[1]
	if bob.Name != "bob" || len(bob.SKUs) != 1 || bob.SKUs[0].SKU != mig3 || !bob.SKUs[0].GPUHours.Equal(dec("0.428571429")) {
		t.Errorf("bob's SKUs %+v, want 0.428571429 GPU-hours of %s (3/7)", bob.SKUs, mig3)
	}
	if !bob.MemoryGiBHours.Equal(dec("40")) {
		t.Errorf("bob's memory %s GiB-hours, want 40", bob.MemoryGiBHours)
	}
	physics := rep.Departments[2]
	if len(physics.SKUs) != 2 || !physics.SKUs[0].GPUHours.Equal(dec("2")) || !physics.GPUHours.Equal(dec("2.428571429")) {
		t.Errorf("physics SKUs %+v, GPU-hours %s; want 2 of %s, 2.428571429 in all", physics.SKUs, physics.GPUHours, h100)
	}
	if rep.Idle.GPUMicroseconds != 2_057_142_857+gpuHour {
		t.Errorf("idle GPU time %d", rep.Idle.GPUMicroseconds)
	}
	if got := strings.Join(meterNames(rep.Meters), ","); got != "gpu_hours,energy_kwh" {
		t.Errorf("meters %s, want gpu_hours,energy_kwh (those priced, in book order)", got)
	}
}

func meterNames(ms []pricing.Meter) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m)
	}
	return out
}

func TestAllocateDaysAndShares(t *testing.T) {
	rep, err := Allocate(fleetInput(IdleByUse))
	if err != nil {
		t.Fatal(err)
	}
	// physics: direct 6.23 over day 1 (exact 3.721428571) and day 2 (2.50),
	// idle share 2.79 over the idle days (exact 1.443571429 and 2.50).
	var physics []string
	for _, d := range rep.Days {
		if d.Department == "physics" {
			physics = append(physics, d.Day.Format("01-02")+" "+d.Cost.StringFixed(2))
		}
	}
	if got, want := strings.Join(physics, ", "), "11-01 4.75, 11-02 4.27"; got != want {
		t.Errorf("physics per day %s, want %s", got, want)
	}
	shares := map[string]string{}
	for _, d := range rep.Departments {
		shares[d.Name] = d.SharePercent.StringFixed(2)
	}
	// 146, 225, 902 of 1273 cents: 11.469, 17.675, 70.856 percent.
	if shares["biology"] != "11.47" || shares["chemistry"] != "17.67" || shares["physics"] != "70.86" {
		t.Errorf("shares %v, want biology 11.47, chemistry 17.67, physics 70.86 (adding up to 100.00)", shares)
	}
}

// Three tenants of equal use split an idle cost of 0.10: 0.04, 0.03, 0.03
// in every sharing mode, and the own row keeps all of it.
func TestAllocateSplitsTenCentsThreeWays(t *testing.T) {
	rows := []Row{
		{Department: "a", Tenant: "t1", SKU: a100, Hour: hour(3, 0), GPUMicroseconds: gpuHour / 3, Cost: costs("gpu_hours", "0.333333333")},
		{Department: "b", Tenant: "t2", SKU: a100, Hour: hour(3, 0), GPUMicroseconds: gpuHour / 3, Cost: costs("gpu_hours", "0.333333333")},
		{Department: "c", Tenant: "t3", SKU: a100, Hour: hour(3, 0), GPUMicroseconds: gpuHour / 3, Cost: costs("gpu_hours", "0.333333334")},
		{SKU: a100, Hour: hour(3, 0), GPUMicroseconds: gpuHour / 10, Cost: costs("gpu_hours", "0.10")},
	}
	weights := map[string]decimal.Decimal{"a": dec("1"), "b": dec("1"), "c": dec("1")}
	for _, mode := range []IdleMode{IdleOwnRow, IdleByUse, IdleByWeight, IdleEvenly} {
		t.Run(string(mode), func(t *testing.T) {
			in := Input{Period: nov, Currency: usd, Rows: rows, Idle: mode, Weights: weights}
			rep, err := Allocate(in)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, in, rep)
			var idle []string
			for _, d := range rep.Departments {
				idle = append(idle, d.Tenants[0].IdleCost.StringFixed(2))
			}
			want := "0.04 0.03 0.03"
			if mode == IdleOwnRow {
				want = "0.00 0.00 0.00"
				if rep.Idle == nil || !rep.Idle.Cost.Equal(dec("0.10")) {
					t.Errorf("idle row %+v, want 0.10", rep.Idle)
				}
			}
			if got := strings.Join(idle, " "); got != want {
				t.Errorf("idle shares %s, want %s", got, want)
			}
		})
	}
}

// The fleet cost is rounded once, not summed from rounded parts.
func TestAllocateRoundsTheFleetOnce(t *testing.T) {
	cases := []struct {
		name   string
		each   string
		fleet  string
		tenant string
	}{
		{"three thirds of 0.999: 1.00, not 3 × 0.33", "0.333", "1.00", "0.34 0.33 0.33"},
		{"three half cents: 0.02, not 3 × 0.01", "0.005", "0.02", "0.01 0.01 0.00"},
		{"nothing below half a cent: 0.00", "0.001", "0.00", "0.00 0.00 0.00"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rows []Row
			for _, n := range []string{"x", "y", "z"} {
				rows = append(rows, Row{Department: "d", Tenant: n, SKU: a100, Hour: hour(1, 0), GPUMicroseconds: 1, Cost: costs("gpu_hours", tc.each)})
			}
			in := Input{Period: nov, Currency: usd, Rows: rows, Idle: IdleByUse}
			rep, err := Allocate(in)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, in, rep)
			var got []string
			for _, tn := range rep.Departments[0].Tenants {
				got = append(got, tn.Cost.StringFixed(2))
			}
			if rep.Fleet.Cost.StringFixed(2) != tc.fleet || strings.Join(got, " ") != tc.tenant {
				t.Errorf("fleet %s, tenants %v; want %s, %s", rep.Fleet.Cost, got, tc.fleet, tc.tenant)
			}
		})
	}
}

// A hand-computed by-use split: GPU time 1 : 3/7 : 1/2 = 14 : 6 : 7, so 1.00
// of idle cost is 51.85, 22.22, 25.93 cents; floors 51, 22, 25 leave 2
// cents, to carol (.93) and alice (.85).
func TestAllocateByUseHandComputed(t *testing.T) {
	rows := []Row{
		{Department: "physics", Tenant: "alice", SKU: h100, Hour: hour(1, 0), GPUMicroseconds: gpuHour, Cost: costs("gpu_hours", "2")},
		{Department: "physics", Tenant: "bob", SKU: mig3, Hour: hour(1, 0), GPUMicroseconds: 1_542_857_143, Cost: costs("gpu_hours", "1")},
		{Department: "physics", Tenant: "carol", SKU: a100, Hour: hour(1, 0), GPUMicroseconds: gpuHour / 2, Cost: costs("gpu_hours", "0.5")},
		{SKU: h100, Hour: hour(1, 0), GPUMicroseconds: 2_057_142_857, Cost: costs("gpu_hours", "1")},
	}
	in := Input{Period: nov, Currency: usd, Rows: rows, Idle: IdleByUse}
	rep, err := Allocate(in)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, in, rep)
	got := tenantCosts(rep)
	want := map[string]string{"physics/alice": "2.52 (idle 0.52)", "physics/bob": "1.22 (idle 0.22)", "physics/carol": "0.76 (idle 0.26)"}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %s, want %s", k, got[k], w)
		}
	}
}

func TestAllocateUtilization(t *testing.T) {
	rep, err := Allocate(fleetInput(IdleOwnRow))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Totals{}
	for _, d := range rep.Departments {
		byName[d.Name] = d.Totals
		for _, tn := range d.Tenants {
			byName[tn.Name] = tn.Totals
		}
	}
	cases := []struct {
		name, util, unmeasured string
	}{
		{"alice", "0.875", "0"},      // 2.7e9 + 3.6e9 of 7.2e9
		{"dave", "0.3333", "0.1"},    // 0.36e9 of 1.08e9 measured; 0.36e9 unmeasured is not idle
		{"physics", "0.8350", "0"},   // 7.3e9 of 8,742,857,143
		{"carol", "0.8333", "0"},     // 1.8e9 of 2.16e9
		{"biology", "0.3333", "0.1"}, // dave alone
		{"chemistry", "0.8333", "0"}, // carol alone
		{"bob", "0.6481", "0"},       // 1e9 of 1,542,857,143
	}
	for _, tc := range cases {
		tt := byName[tc.name]
		if !tt.Utilization.Valid || !tt.Utilization.Decimal.Equal(dec(tc.util)) || !tt.SMUnmeasuredGPUHours.Equal(dec(tc.unmeasured)) {
			t.Errorf("%s: utilization %v, unmeasured %s; want %s, %s", tc.name, tt.Utilization, tt.SMUnmeasuredGPUHours, tc.util, tc.unmeasured)
		}
	}
	// The fleet's denominator is all capacity with SM activity measured,
	// idle included: 9.46e9 of 18e9 - 0.36e9.
	if f := rep.Fleet; !f.Utilization.Decimal.Equal(dec("0.5363")) || !f.SMUnmeasuredGPUHours.Equal(dec("0.1")) {
		t.Errorf("fleet utilization %v, unmeasured %s; want 0.5363, 0.1", f.Utilization, f.SMUnmeasuredGPUHours)
	}

	// All SM time unmeasured: utilization is unknown, not zero.
	in := Input{Period: nov, Currency: usd, Idle: IdleOwnRow, Rows: []Row{
		{Department: "d", Tenant: "t", SKU: mig3, Hour: hour(1, 0), GPUMicroseconds: 100, Unmeasured: meter.UnmeasuredTime{meter.GroupSMActive: 100}},
	}}
	rep, err = Allocate(in)
	if err != nil {
		t.Fatal(err)
	}
	if u := rep.Departments[0].Tenants[0].Utilization; u.Valid {
		t.Errorf("utilization %s with no SM measurement, want null", u.Decimal)
	}
}

func TestAllocateEnergy(t *testing.T) {
	rep, err := Allocate(fleetInput(IdleByUse))
	if err != nil {
		t.Fatal(err)
	}
	physics := rep.Departments[2]
	var src []string
	for _, s := range physics.Energy.BySource {
		src = append(src, string(s.Source)+"="+s.KWh.String())
	}
	if got := strings.Join(src, " "); got != "measured=0.7 split_by_slices=0.3" || !physics.Energy.KWh.Equal(dec("1")) {
		t.Errorf("physics energy %s kWh by source %s, want 1 = measured 0.7 + split_by_slices 0.3", physics.Energy.KWh, got)
	}
	dave := rep.Departments[0].Tenants[0]
	if !dave.Energy.KWh.IsZero() || !dave.Energy.UnmeasuredGPUHours.Equal(dec("0.4")) || len(dave.Energy.BySource) != 0 {
		t.Errorf("dave energy %+v, want 0 kWh measured and 0.4 GPU-hours unmeasured", dave.Energy)
	}
	if dave.Energy.KgCO2e.Valid {
		t.Error("kgCO2e without a carbon source, want null")
	}
	want := []string{
		"0.400 kWh of energy was split across MIG instances by compute-slice share: NVML reports energy per GPU only",
		"0.400 GPU-hours had no energy measurement: their energy is missing from the kWh figures, not counted as zero",
		"0.100 GPU-hours had no SM-activity measurement and are left out of utilization",
		"idle capacity cost 3.94 USD, shared to tenants by GPU time held",
	}
	if got := strings.Join(rep.Notes, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("notes:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// checkInvariants asserts what every report must satisfy: whole minor
// units, exact sums at every level in every mode, days adding up to their
// department, shares to 100, and each part within one minor unit of its
// exact share.
func checkInvariants(t testing.TB, in Input, rep Report) {
	t.Helper()
	minor := in.Currency.MinorUnits
	unit := decimal.New(1, -minor)
	exact := decimal.Zero
	for _, r := range in.Rows {
		exact = exact.Add(rowCost(r))
	}
	fleet := in.Currency.Round(exact)
	whole := func(what string, d decimal.Decimal) {
		if !d.Truncate(minor).Equal(d) || d.Sign() < 0 {
			t.Errorf("%s = %s: not a non-negative whole number of minor units", what, d)
		}
	}
	totals := func(what string, tt Totals) {
		whole(what+" cost", tt.Cost)
		whole(what+" idle cost", tt.IdleCost)
		s := tt.IdleCost
		for _, c := range tt.Costs {
			whole(what+" "+string(c.Meter), c.Cost)
			s = s.Add(c.Cost)
		}
		if !s.Equal(tt.Cost) {
			t.Errorf("%s: meters + idle = %s, cost %s", what, s, tt.Cost)
		}
	}
	if !rep.Fleet.Cost.Equal(fleet) {
		t.Errorf("fleet cost %s, want %s (%s rounded once)", rep.Fleet.Cost, fleet, exact)
	}
	totals("fleet", rep.Fleet)

	sumCost, sumIdle, sumShare := decimal.Zero, decimal.Zero, decimal.Zero
	var held uint64
	exactByTenant := map[[2]string]decimal.Decimal{}
	for _, r := range in.Rows {
		k := [2]string{r.Department, r.Tenant}
		exactByTenant[k] = exactByTenant[k].Add(rowCost(r))
	}
	for _, d := range rep.Departments {
		totals(d.Name, d.Totals)
		dc, di, ds := decimal.Zero, decimal.Zero, decimal.Zero
		for _, tn := range d.Tenants {
			what := d.Name + "/" + tn.Name
			totals(what, tn.Totals)
			dc, di, ds = dc.Add(tn.Cost), di.Add(tn.IdleCost), ds.Add(tn.SharePercent)
			held += tn.GPUMicroseconds
			if in.Idle == IdleOwnRow && !tn.IdleCost.IsZero() {
				t.Errorf("%s: idle share %s in own-row mode", what, tn.IdleCost)
			}
			direct := tn.Cost.Sub(tn.IdleCost)
			if !exact.IsZero() {
				share := exactByTenant[[2]string{d.Name, tn.Name}].Mul(fleet).DivRound(exact, 30)
				// Each meter part is within a unit of its share, so the
				// direct cost is within a unit per meter.
				if direct.Sub(share).Abs().GreaterThanOrEqual(unit.Mul(decimal.NewFromInt(int64(len(rep.Meters))))) {
					t.Errorf("%s: direct cost %s too far from its exact share %s", what, direct, share)
				}
			}
		}
		if !dc.Equal(d.Cost) || !di.Equal(d.IdleCost) || !ds.Equal(d.SharePercent) {
			t.Errorf("%s: tenants add up to %s (idle %s, share %s), department %s (%s, %s)", d.Name, dc, di, ds, d.Cost, d.IdleCost, d.SharePercent)
		}
		sumCost, sumIdle, sumShare = sumCost.Add(d.Cost), sumIdle.Add(d.IdleCost), sumShare.Add(d.SharePercent)
	}
	if rep.Idle != nil {
		totals("idle", *rep.Idle)
		sumCost, sumShare = sumCost.Add(rep.Idle.Cost), sumShare.Add(rep.Idle.SharePercent)
		sumIdle = sumIdle.Add(rep.Idle.Cost)
		held += rep.Idle.GPUMicroseconds
		if in.Idle != IdleOwnRow {
			t.Errorf("idle row in mode %s", in.Idle)
		}
	}
	if !sumCost.Equal(fleet) {
		t.Errorf("rows add up to %s, fleet %s", sumCost, fleet)
	}
	if !sumIdle.Equal(rep.Fleet.IdleCost) {
		t.Errorf("idle shares add up to %s, fleet idle cost %s", sumIdle, rep.Fleet.IdleCost)
	}
	wantShare := decimal.NewFromInt(100)
	if fleet.IsZero() {
		wantShare = decimal.Zero
	}
	if !sumShare.Equal(wantShare) || !rep.Fleet.SharePercent.Equal(wantShare) {
		t.Errorf("shares add up to %s (fleet %s), want %s", sumShare, rep.Fleet.SharePercent, wantShare)
	}
	if rep.Idle != nil || in.Idle == IdleOwnRow {
		if held != rep.Fleet.GPUMicroseconds {
			t.Errorf("tenants and idle held %d µs, fleet %d", held, rep.Fleet.GPUMicroseconds)
		}
	} else if held > rep.Fleet.GPUMicroseconds {
		t.Errorf("tenants held %d µs, more than the fleet's %d", held, rep.Fleet.GPUMicroseconds)
	}

	byDept := map[string]decimal.Decimal{}
	for i, dc := range rep.Days {
		whole("day "+dc.Day.String(), dc.Cost)
		if i > 0 && !(rep.Days[i-1].Day.Before(dc.Day) || rep.Days[i-1].Day.Equal(dc.Day) && rep.Days[i-1].Department < dc.Department) {
			t.Errorf("days not sorted at %d", i)
		}
		byDept[dc.Department] = byDept[dc.Department].Add(dc.Cost)
	}
	for _, d := range rep.Departments {
		if !byDept[d.Name].Equal(d.Cost) {
			t.Errorf("%s: days add up to %s, department %s", d.Name, byDept[d.Name], d.Cost)
		}
	}
	if rep.Idle != nil && !byDept[""].Equal(rep.Idle.Cost) {
		t.Errorf("idle days add up to %s, idle row %s", byDept[""], rep.Idle.Cost)
	}
}
