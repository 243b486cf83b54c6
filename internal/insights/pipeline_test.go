package insights_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/collectors/sim/rig"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/partition"
	"github.com/gpumeter/gpumeter/pricing"
)

// collect runs the production collector over a simulated fleet, as the
// other pipeline tests do, and returns every sample.
func collect(t *testing.T, cfg sim.Config, d time.Duration) []collectors.Sample {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	_, out, err := rig.Simulate(context.Background(), cfg, rig.DefaultOptions(), d, logger)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// holdings is what the store query gives: samples of attributed tenants
// summed per (gpu, instance, tenant, start), memory by max.
func holdings(samples []collectors.Sample) []insights.Holding {
	type key struct{ gpu, mig, tenant string }
	type row struct {
		h  *insights.Holding
		at map[time.Time]int
	}
	rows := map[key]*row{}
	var keys []key
	for _, s := range samples {
		if s.Tenant == "" || s.Tenant == collectors.UnattributedTenant {
			continue
		}
		k := key{s.GPUUUID, s.MIGUUID, s.Tenant}
		r := rows[k]
		if r == nil {
			r = &row{h: &insights.Holding{Tenant: s.Tenant, Department: s.Department, Host: s.Host, GPUUUID: s.GPUUUID, InstanceUUID: s.MIGUUID, SKU: s.SKU}, at: map[time.Time]int{}}
			rows[k] = r
			keys = append(keys, k)
		}
		i, ok := r.at[s.Start]
		if !ok {
			i = len(r.h.Intervals)
			r.at[s.Start] = i
			r.h.Intervals = append(r.h.Intervals, insights.Interval{Start: s.Start, DurationMicros: s.End.Sub(s.Start).Microseconds()})
		}
		iv := &r.h.Intervals[i]
		iv.GPUMicros += int64(s.GPUMicroseconds)
		iv.SMActiveMicros += int64(s.SMActiveMicroseconds)
		iv.MemPeakBytes = max(iv.MemPeakBytes, int64(s.MemPeakBytes))
		iv.SMUnmeasured = iv.SMUnmeasured || s.Unmeasured.Has(meter.UnmeasuredSMActive)
	}
	out := make([]insights.Holding, 0, len(keys))
	for _, k := range keys {
		h := *rows[k].h
		sort.Slice(h.Intervals, func(i, j int) bool { return h.Intervals[i].Start.Before(h.Intervals[j].Start) })
		for i := range h.Intervals {
			if h.Intervals[i].SMUnmeasured {
				h.Intervals[i].SMActiveMicros = 0
			}
		}
		out = append(out, h)
	}
	return out
}

// flatBook prices every SKU seen at 2 per GPU-hour.
func flatBook(t *testing.T, samples []collectors.Sample) *pricing.Book {
	skus := map[string]bool{}
	for _, s := range samples {
		skus[s.SKU] = true
	}
	var b strings.Builder
	b.WriteString("version: flat\ncurrency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}\nskus:\n")
	names := make([]string, 0, len(skus))
	for s := range skus {
		names = append(names, s)
	}
	for _, s := range []string{"H100-SXM5-80GB/1g.10gb", "H100-SXM5-80GB/1g.20gb", "H100-SXM5-80GB/2g.20gb"} {
		if !skus[s] {
			names = append(names, s)
		}
	}
	sort.Strings(names)
	for _, s := range names {
		fmt.Fprintf(&b, "  %q:\n    meters:\n      gpu_hours: {unit_price: \"2\"}\n", s)
	}
	book, err := pricing.ParseBook([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	book, err = pricing.WithMIGTable(book)
	if err != nil {
		t.Fatal(err)
	}
	return book
}

// hourlyGPUHours is usage_hourly's gpu_hours per tenant; dailySpend the
// same priced by day (2 per GPU-hour, every SKU).
func series(samples []collectors.Sample, from, to time.Time) (hourly, daily []insights.Series) {
	hours := map[string]map[time.Time]int64{}
	for _, s := range samples {
		if s.Tenant == "" || s.Tenant == collectors.UnattributedTenant {
			continue
		}
		if hours[s.Tenant] == nil {
			hours[s.Tenant] = map[time.Time]int64{}
		}
		hours[s.Tenant][s.Start.Truncate(time.Hour)] += int64(s.GPUMicroseconds)
	}
	tenants := slices.Sorted(maps.Keys(hours))
	for _, tenant := range tenants {
		h := insights.Series{Tenant: tenant, Meter: "gpu_hours", Step: insights.Hourly, From: from, To: to}
		d := insights.Series{Tenant: tenant, Meter: "spend", Step: insights.Daily, From: from, To: to}
		days := map[time.Time]decimal.Decimal{}
		for at, us := range hours[tenant] {
			v := insights.GPUHours(us)
			h.Points = append(h.Points, insights.Point{At: at, Value: v})
			day := at.Truncate(24 * time.Hour)
			days[day] = days[day].Add(v.Mul(decimal.NewFromInt(2)))
		}
		for at, v := range days {
			d.Points = append(d.Points, insights.Point{At: at, Value: v})
		}
		hourly, daily = append(hourly, h), append(daily, d)
	}
	return hourly, daily
}

// plants are the three planted tenants; the spike is at spikeAt.
func plants(spikeAt time.Time) *sim.Plants {
	return &sim.Plants{Hoarder: "hoarder", HoardGPUs: 1, OversizedMIG: "bigmig", Spike: "spiky", SpikeAt: spikeAt, SpikeGPUs: 6}
}

// TestInsightsFindHoarderAndOversizedMIG runs two planted hosts (an H100
// and an A100, 16 GPUs each) for six hours at the collector's 10 s
// interval through the production collector: the hoarder's GPU is
// held-but-idle and priced, the oversized 7g tenant is right-sized to
// 1g.10gb and laid out, and no other tenant has idle time or a
// recommendation (the hoarder's near-empty whole GPU is right-sized too).
func TestInsightsFindHoarderAndOversizedMIG(t *testing.T) {
	start := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	cfg := sim.DefaultConfig()
	cfg.Start, cfg.Hosts, cfg.GPUsPerHost, cfg.Root = start, 2, 16, t.TempDir()
	cfg.Plants = plants(start.Add(2 * time.Hour))
	end := start.Add(6 * time.Hour)
	samples := collect(t, cfg, end.Sub(start))
	hs := holdings(samples)
	book := flatBook(t, samples)
	prices := map[string]insights.TenantPricing{}
	for _, h := range hs {
		prices[h.Tenant] = insights.TenantPricing{Book: book}
	}

	eff, err := insights.Efficiency(insights.EfficiencyInput{From: start, To: end, Params: insights.DefaultIdleParams(), Holdings: hs, Pricing: prices})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range eff.Tenants {
		seen[r.Tenant] = true
		share, _ := r.IdleShare()
		t.Logf("%-9s held %5.1f GPU-h, idle %4.1f (%.2f), unmeasured %4.1f, idle cost %v", r.Tenant, float64(r.HeldGPUMicros)/3.6e9, float64(r.IdleGPUMicros)/3.6e9, share, float64(r.UnmeasuredGPUMicros)/3.6e9, r.IdleCost)
		switch r.Tenant {
		case "hoarder":
			if r.IdleGPUMicros != r.HeldGPUMicros || r.HeldGPUMicros != int64(6*time.Hour/time.Microsecond) || len(r.IdleSpans) != 1 {
				t.Errorf("hoarder: held %d µs, idle %d µs in %d spans; want 6 GPU-hours all idle in one span", r.HeldGPUMicros, r.IdleGPUMicros, len(r.IdleSpans))
			}
			if r.IdleCost == nil || !r.IdleCost.Amount.Equal(decimal.NewFromInt(12)) {
				t.Errorf("hoarder: idle cost %v, want 6 GPU-hours × 2 = 12 USD", r.IdleCost)
			}
		default:
			if r.IdleGPUMicros != 0 {
				t.Errorf("%s: %d µs held-but-idle, want none", r.Tenant, r.IdleGPUMicros)
			}
		}
	}
	for _, want := range []string{"hoarder", "bigmig", "spiky", "acme", "globex", "initech", "umbrella"} {
		if !seen[want] {
			t.Errorf("no efficiency row for %s", want)
		}
	}

	rs, err := insights.RightSize(insights.RightSizeInput{From: start, To: end, Params: insights.DefaultRightSizeParams(), Holdings: hs, Pricing: prices, Fleet: newestFleet(samples)})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rs.Tenants {
		switch {
		case r.Tenant == "bigmig":
			found = true
			t.Logf("bigmig: %s → %s (mem p99 %.1f GB, SM p99 %.3f GPUs), saves %.1f GPU-h, %v", r.Current.SKU, r.Recommended.SKU, float64(r.MemBytes)/1e9, r.SMGPUs, float64(r.SavedGPUMicros)/3.6e9, r.Saving)
			if r.Action != insights.Downsize || r.Recommended.SKU != "H100-SXM5-80GB/1g.10gb" || r.Saving == nil || !r.Saving.Amount.IsPositive() {
				t.Errorf("bigmig: %+v", r)
			}
		case r.Tenant == "hoarder":
		case r.Action != insights.Keep:
			t.Errorf("%s on %s: %s to %s, want keep", r.Tenant, r.Current.SKU, r.Action, r.Recommended.SKU)
		}
	}
	if !found {
		t.Fatal("no verdict for bigmig")
	}
	placed := false
	for _, g := range rs.Plan.GPUs {
		for _, in := range g.Instances {
			placed = placed || (in.Tenant == "bigmig" && in.Profile == "1g.10gb")
		}
	}
	if !placed {
		t.Errorf("the layout has no 1g.10gb for bigmig; unmet %+v", rs.Plan.Unmet)
	}
	t.Logf("layout of the right-sized demand: %d of %d GPUs used, %d instances unmet", rs.GPUsUsed, len(rs.Plan.GPUs), rs.Plan.Summary.UnmetInstanceCount)
}

// newestFleet is the fleet as partition.FleetFromSamples reads it from
// each GPU's newest interval.
func newestFleet(samples []collectors.Sample) *partition.Fleet {
	newest := map[string]time.Time{}
	for _, s := range samples {
		if s.Start.After(newest[s.GPUUUID]) {
			newest[s.GPUUUID] = s.Start
		}
	}
	var rows []partition.DeviceSample
	for _, s := range samples {
		if s.Start.Equal(newest[s.GPUUUID]) {
			rows = append(rows, partition.DeviceSample{Host: s.Host, GPUUUID: s.GPUUUID, GPUModel: s.GPUModel, MIGUUID: s.MIGUUID, MIGProfile: s.MIGProfile, Tenant: s.Tenant})
		}
	}
	f, _ := partition.FleetFromSamples(rows)
	return &f
}

// TestInsightsFindTheSpike runs the same planted fleet for three weeks and
// a day, with the spike on the fourth Monday at 14:00, and checks that
// last day against the seasonal baseline: the spike is the only anomaly,
// in hourly usage and in daily spend. The simulator steps 10 minutes here
// to keep the run short (its random work is drawn per step, so the
// fleet is idler than at 10 s; the baseline does not mind).
func TestInsightsFindTheSpike(t *testing.T) {
	start := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) // a Monday
	spikeAt := start.Add(21*24*time.Hour + 14*time.Hour)
	cfg := sim.DefaultConfig()
	cfg.Start, cfg.Hosts, cfg.GPUsPerHost, cfg.Step, cfg.Root = start, 2, 16, 10*time.Minute, t.TempDir()
	cfg.Plants = plants(spikeAt)
	end := start.Add(22 * 24 * time.Hour)
	samples := collect(t, cfg, end.Sub(start))
	hourly, daily := series(samples, start, end)
	an, err := insights.Detect(insights.AnomalyInput{Series: append(hourly, daily...), EvaluateFrom: start.Add(21 * 24 * time.Hour), Params: insights.DefaultAnomalyParams()})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range an {
		t.Logf("anomaly %s: %s %s %s %s, observed %s, expected %s ± %s", a.ID, a.Tenant, a.Meter, a.Start.Format(time.DateTime), a.Direction, a.Observed.StringFixed(2), a.Expected.StringFixed(2), a.Spread.StringFixed(2))
		got = append(got, fmt.Sprintf("%s/%s/%s/%s", a.Tenant, a.Meter, a.Start.Format(time.DateTime), a.Direction))
	}
	want := []string{"spiky/gpu_hours/2026-11-23 14:00:00/spike", "spiky/spend/2026-11-23 00:00:00/spike"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("anomalies %v, want %v", got, want)
	}
	if len(an) == 2 && an[0].ID != insights.AnomalyID("spiky", "gpu_hours", "", insights.Hourly, spikeAt) {
		t.Errorf("anomaly id %s is not the deterministic one", an[0].ID)
	}
}
