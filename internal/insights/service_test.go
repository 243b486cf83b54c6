package insights

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/partition"
	"github.com/gpumeter/gpumeter/pricing"
)

// fakeReader serves fixed inputs and records what was asked.
type fakeReader struct {
	holdings []Holding
	hourly   []Series
	usage    []billing.HourlyMeters
	demand   []Series
	gpus     map[string]int
	saved    [][]Anomaly
	asked    []string
	first    time.Time // zero: 2000-01-01
}

func (f *fakeReader) FirstHour(context.Context) (time.Time, error) {
	if f.first.IsZero() {
		return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), nil
	}
	return f.first, nil
}

// Holdings keeps to the filter as the store does (auth.Scope.Allows is
// its rule in Go).
func (f *fakeReader) Holdings(_ context.Context, from, to time.Time, fl Filter) ([]Holding, error) {
	f.asked = append(f.asked, "holdings "+from.Format(time.RFC3339)+" "+to.Format(time.RFC3339)+" "+fl.Tenant+" "+fl.Scope.String())
	var out []Holding
	for _, h := range f.holdings {
		if (fl.Tenant == "" || h.Tenant == fl.Tenant) && (fl.Scope.Kind == "" || fl.Scope.Allows(h.Tenant, h.Department)) {
			out = append(out, h)
		}
	}
	return out, nil
}

func (f *fakeReader) HourlyGPUTime(_ context.Context, from, to time.Time, _ Filter) ([]HourTotal, error) {
	f.asked = append(f.asked, "hourly "+from.Format(time.RFC3339)+" "+to.Format(time.RFC3339))
	return totalsOf(f.hourly, false), nil
}

// totalsOf is series as the store holds them: GPU-microseconds per key
// and hour (the fixtures' GPU-hours are whole microseconds).
func totalsOf(series []Series, byModel bool) []HourTotal {
	var out []HourTotal
	for _, s := range series {
		for _, p := range s.Points {
			out = append(out, HourTotal{Key: seriesKey(s, byModel), Hour: p.At, GPUMicroseconds: uint64(p.Value.Mul(decimal.NewFromInt(3_600_000_000)).IntPart())})
		}
	}
	return out
}

func (f *fakeReader) HourlyUsage(_ context.Context, from, to time.Time, tenant string) ([]billing.HourlyMeters, error) {
	return f.usage, nil
}

func (f *fakeReader) ModelGPUTime(_ context.Context, from, to time.Time, _ auth.Scope) ([]HourTotal, error) {
	f.asked = append(f.asked, "demand "+from.Format(time.RFC3339)+" "+to.Format(time.RFC3339))
	return totalsOf(f.demand, true), nil
}

func (f *fakeReader) GPUsByModel(_ context.Context, since, until time.Time) (map[string]int, error) {
	return f.gpus, nil
}

func (f *fakeReader) FleetSamples(context.Context, time.Duration) ([]partition.DeviceSample, error) {
	f.asked = append(f.asked, "fleet")
	return nil, nil
}

func (f *fakeReader) StoredAnomalyIDs(context.Context, time.Time, time.Time) (map[string]bool, error) {
	ids := map[string]bool{}
	for _, as := range f.saved {
		for _, a := range as {
			ids[a.ID] = true
		}
	}
	return ids, nil
}

func (f *fakeReader) InsertAnomalies(_ context.Context, as []Anomaly, _ time.Time) error {
	f.saved = append(f.saved, as)
	return nil
}

// announced records what the service announced.
type announced [][]Anomaly

func (a *announced) AnomaliesFound(_ context.Context, as []Anomaly) error {
	*a = append(*a, as)
	return nil
}

func (f *fakeReader) Anomalies(context.Context, time.Time, time.Time, Filter) ([]StoredAnomaly, error) {
	return nil, nil
}

func flat(t *testing.T) *pricing.Book {
	t.Helper()
	b, err := pricing.ParseBook([]byte("version: flat\ncurrency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}\nskus:\n  H100-SXM5-80GB:\n    meters:\n      gpu_hours: {unit_price: \"2\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// idleHolding is an hour of a whole GPU at 0 % SM activity.
func idleHolding(tenant, dept, gpu string, from time.Time) Holding {
	h := Holding{Tenant: tenant, Department: dept, GPUUUID: gpu, SKU: "H100-SXM5-80GB"}
	for i := range 360 {
		h.Intervals = append(h.Intervals, Interval{Start: from.Add(time.Duration(i) * 10 * time.Second), DurationMicros: 10_000_000, GPUMicros: 10_000_000})
	}
	return h
}

func TestEfficiencyPricesTenantsAndKeepsADepartmentToItself(t *testing.T) {
	from := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	r := &fakeReader{holdings: []Holding{idleHolding("acme", "research", "G1", from), idleHolding("globex", "sales", "G2", from)}}
	book := flat(t)
	svc := New(r, &announced{}, Prices{ByTenant: map[string]Priced{"acme": {TenantPricing: TenantPricing{Book: book}}}}, time.Now, slog.New(slog.DiscardHandler))
	rep, err := svc.Efficiency(context.Background(), Request{From: from, To: from.Add(time.Hour)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tenants) != 2 || rep.Tenants[0].IdleCost == nil || !rep.Tenants[0].IdleCost.Amount.Equal(decimal.NewFromInt(2)) || rep.Tenants[1].IdleCost != nil {
		t.Fatalf("acme is a customer (idle hour costs 2), globex has no pricing (no cost): %+v", rep.Tenants)
	}
	if rep.Fleet.HeldGPUMicros != 2*3_600_000_000 {
		t.Errorf("fleet held %d", rep.Fleet.HeldGPUMicros)
	}
	dep, err := svc.Efficiency(context.Background(), Request{From: from, To: from.Add(time.Hour), Scope: auth.Scope{Kind: auth.KindDepartment, Name: "research"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(dep.Tenants) != 1 || dep.Tenants[0].Tenant != "acme" || len(dep.Departments) != 1 || dep.Fleet.HeldGPUMicros != 3_600_000_000 {
		t.Errorf("department research sees %+v, departments %+v, fleet %+v", dep.Tenants, dep.Departments, dep.Fleet)
	}
	// With a default book, globex is priced too.
	svc = New(r, &announced{}, Prices{Default: &Priced{TenantPricing: TenantPricing{Book: book}}}, time.Now, slog.New(slog.DiscardHandler))
	if rep, err = svc.Efficiency(context.Background(), Request{From: from, To: from.Add(time.Hour)}, nil); err != nil || rep.Tenants[1].IdleCost == nil {
		t.Errorf("default book: %v %+v", err, rep.Tenants)
	}
	// The layout is planned for fleet-wide requests only.
	r.asked = nil
	if _, err := svc.RightSize(context.Background(), Request{From: from, To: from.Add(time.Hour), Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(r.asked, ","), "fleet") {
		t.Errorf("a tenant's right-sizing read the fleet: %v", r.asked)
	}
}

func TestRequestsAreValidated(t *testing.T) {
	from := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	svc := New(&fakeReader{}, &announced{}, Prices{}, time.Now, slog.New(slog.DiscardHandler))
	for _, r := range []Request{{}, {From: from, To: from}, {From: from.Add(time.Minute), To: from.Add(time.Hour)}, {From: from, To: from.Add(94 * 24 * time.Hour)}} {
		if _, err := svc.Efficiency(context.Background(), r, nil); !fault.IsValidation(err) {
			t.Errorf("%+v: err %v, want a validation error", r, err)
		}
	}
	bad := IdleParams{SMThreshold: 2}
	if _, err := svc.Efficiency(context.Background(), Request{From: from, To: from.Add(time.Hour)}, &bad); !fault.IsValidation(err) {
		t.Errorf("bad params: %v", err)
	}
	for _, c := range []CapacityRequest{{}, {To: from, Until: from.Add(time.Hour), Weeks: 1, Target: decimal.NewFromInt(1)},
		{To: from, Until: from.Add(time.Hour), Weeks: 4, Target: decimal.NewFromInt(2)}, {To: from, Until: from, Weeks: 4, Target: decimal.NewFromInt(1)}} {
		if _, err := svc.Capacity(context.Background(), c); !fault.IsValidation(err) {
			t.Errorf("%+v: err %v, want a validation error", c, err)
		}
	}
}

// TestDetectLoadsHistoryAndChecksDaysInTheTenantsZone: the hourly series
// start Weeks before the range; spend is checked per calendar day of the
// tenant's zone that starts in the range; found anomalies are saved.
func TestDetectLoadsHistoryAndChecksDaysInTheTenantsZone(t *testing.T) {
	from := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	hist := from.AddDate(0, 0, -28)
	r := &fakeReader{}
	// Spiky uses 3 GPU-hours at 10:00 on every Monday before, 30 on the
	// evaluated Monday.
	for w := 0; w <= 4; w++ {
		q := int64(3)
		if w == 4 {
			q = 30
		}
		r.usage = append(r.usage, billing.HourlyMeters{Hour: hist.AddDate(0, 0, 7*w).Add(10 * time.Hour), Tenant: "spiky", SKU: "H100-SXM5-80GB",
			Totals: meter.Totals{Values: meter.Values{GPUMicroseconds: uint64(q) * 3_600_000_000}}})
	}
	ann := &announced{}
	svc := New(r, ann, Prices{Default: &Priced{TenantPricing: TenantPricing{Book: flat(t)}, Location: time.UTC}}, time.Now, slog.New(slog.DiscardHandler))
	found, fresh, err := svc.Detect(context.Background(), Request{From: from, To: from.Add(24 * time.Hour)}, true)
	if err != nil {
		t.Fatal(err)
	}
	if r.asked[0] != "hourly "+hist.Format(time.RFC3339)+" "+from.Add(24*time.Hour).Format(time.RFC3339) {
		t.Errorf("hourly history asked: %v", r.asked)
	}
	if len(found) != 1 || found[0].Meter != "spend" || !found[0].Start.Equal(from) || !found[0].Observed.Equal(decimal.NewFromInt(60)) || !found[0].Expected.Equal(decimal.NewFromInt(6)) {
		t.Fatalf("found %+v, want the spend of the evaluated Monday, 60 against 6", found)
	}
	if len(fresh) != 1 || len(r.saved) != 1 || len(*ann) != 1 || (*ann)[0][0].ID != fresh[0].ID {
		t.Errorf("saved %v, fresh %v, announced %v", r.saved, fresh, *ann)
	}
	// Found again: stored already, so neither stored nor announced twice.
	if _, fresh, err := svc.Detect(context.Background(), Request{From: from, To: from.Add(24 * time.Hour)}, true); err != nil || len(fresh) != 0 || len(r.saved) != 1 || len(*ann) != 1 {
		t.Errorf("a second run: fresh %v, saved %v, announced %v, %v", fresh, r.saved, *ann, err)
	}
	// A fleet first recorded two days ago has no history yet: the weeks
	// before are unknown, not zero, and nothing is flagged.
	r.saved, r.first = nil, from.AddDate(0, 0, -2)
	found, _, err = svc.Detect(context.Background(), Request{From: from, To: from.Add(24 * time.Hour)}, true)
	if err != nil || len(found) != 0 || len(r.saved) != 0 {
		t.Errorf("a new fleet: %v %+v, saved %v", err, found, r.saved)
	}
	if want := "hourly " + from.AddDate(0, 0, -2).Format(time.RFC3339) + " "; !strings.HasPrefix(r.asked[len(r.asked)-1], want) {
		t.Errorf("a new fleet's hourly series asked %v, want from its first hour", r.asked)
	}
	r.first = time.Time{}
	// A range shorter than a day of the tenant's has no day to check.
	r.saved = nil
	found, _, err = svc.Detect(context.Background(), Request{From: from.Add(time.Hour), To: from.Add(23 * time.Hour)}, true)
	if err != nil || len(found) != 0 || len(r.saved) != 0 {
		t.Errorf("part of a day: %v %+v, saved %v", err, found, r.saved)
	}
}

func TestCapacityUsesTheModelsThatReport(t *testing.T) {
	to := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	from := to.AddDate(0, 0, -14)
	d := Series{Meter: "gpu_equivalents", SKU: "H100-SXM5-80GB", Step: Hourly, From: from, To: to}
	for i := range 14 * 24 {
		d.Points = append(d.Points, Point{At: from.Add(time.Duration(i) * time.Hour), Value: decimal.NewFromInt(int64(2 + i/24))})
	}
	r := &fakeReader{demand: []Series{d}, gpus: map[string]int{"H100-SXM5-80GB": 16, "A100-SXM4-40GB": 8}}
	svc := New(r, &announced{}, Prices{}, time.Now, slog.New(slog.DiscardHandler))
	fc, err := svc.Capacity(context.Background(), CapacityRequest{To: to, Until: to.AddDate(0, 0, 30), Weeks: 2, Target: decimal.NewFromInt(1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(fc) != 2 || fc[0].Model != "A100-SXM4-40GB" || fc[1].Model != "H100-SXM5-80GB" {
		t.Fatalf("forecasts %+v", fc)
	}
	if fc[0].Exceeds || !fc[0].PeakForecast.IsZero() {
		t.Errorf("the A100 has no demand: %+v", fc[0])
	}
	// 2 + 1 a day (a daily step: trend plus season, fitted exactly) is 16
	// on to's day and 17, above the 16 GPUs, the day after.
	if !fc[1].Exceeds || !fc[1].At.Equal(to.AddDate(0, 0, 1)) || !fc[1].Demand.Equal(decimal.NewFromInt(17)) {
		t.Errorf("H100 full at %s with %s (exceeds %v), want %s with 17", fc[1].At, fc[1].Demand, fc[1].Exceeds, to.AddDate(0, 0, 1))
	}
	if r.asked[0] != "demand "+from.Format(time.RFC3339)+" "+to.Format(time.RFC3339) {
		t.Errorf("demand asked: %v", r.asked)
	}
	// Asked for eight weeks of a fleet recorded for two and a half, it
	// fits the two whole weeks it has; with less it refuses.
	r.asked, r.first = nil, to.Add(-17*24*time.Hour)
	if _, err := svc.Capacity(context.Background(), CapacityRequest{To: to, Until: to.AddDate(0, 0, 30), Weeks: 8, Target: decimal.NewFromInt(1)}); err != nil {
		t.Fatal(err)
	}
	if r.asked[0] != "demand "+from.Format(time.RFC3339)+" "+to.Format(time.RFC3339) {
		t.Errorf("a young fleet's demand asked: %v, want the last two weeks", r.asked)
	}
	r.first = to.Add(-10 * 24 * time.Hour)
	if _, err := svc.Capacity(context.Background(), CapacityRequest{To: to, Until: to.AddDate(0, 0, 30), Weeks: 8, Target: decimal.NewFromInt(1)}); !fault.IsValidation(err) {
		t.Errorf("ten days of history: %v, want a validation error", err)
	}
}

// TestDetectClosedChecksTheClosedHoursOnly: the scheduled detection ends
// at the rollup's closed hour, looks back the configured window, saves,
// and does nothing before any hour closed.
func TestDetectClosedChecksTheClosedHoursOnly(t *testing.T) {
	r := &fakeReader{}
	svc := New(r, &announced{}, Prices{}, time.Now, slog.New(slog.DiscardHandler))
	closed := time.Date(2026, 11, 23, 14, 30, 0, 0, time.UTC)
	if _, _, err := svc.DetectClosed(context.Background(), closed, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	to := time.Date(2026, 11, 23, 14, 0, 0, 0, time.UTC)
	want := "hourly " + to.Add(-48*time.Hour).AddDate(0, 0, -28).Format(time.RFC3339) + " " + to.Format(time.RFC3339)
	if len(r.asked) != 1 || r.asked[0] != want {
		t.Errorf("asked %v, want %q", r.asked, want)
	}
	r.asked = nil
	if _, _, err := svc.DetectClosed(context.Background(), time.Time{}, 48*time.Hour); err != nil || len(r.asked) != 0 {
		t.Errorf("no closed hour: %v, asked %v", err, r.asked)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	for _, c := range []Config{{Lookback: 0}, {Lookback: 90 * time.Minute}, {Lookback: 100 * 24 * time.Hour}} {
		if c.Validate() == nil {
			t.Errorf("lookback %s accepted", c.Lookback)
		}
	}
}

func TestCustomerAndBookPrices(t *testing.T) {
	const book = `version: t-2026
currency: {code: EUR, rounding: {minor_units: 2, mode: half_away_from_zero}}
skus:
  H100-SXM5-80GB:
    meters:
      gpu_hours: {unit_price: "2.50"}
`
	files := map[string]string{"book.yaml": book}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, errors.New(p + ": no such file")
	}
	p, err := CustomerPrices([]billing.Customer{{Tenant: "acme", Book: "book.yaml", TimeZone: "Europe/Berlin"}}, read)
	if err != nil {
		t.Fatal(err)
	}
	if pr, ok := p.For("acme"); !ok || pr.Book == nil || pr.Location.String() != "Europe/Berlin" {
		t.Errorf("acme: %+v, %v", pr, ok)
	}
	if _, ok := p.For("other"); ok {
		t.Error("a tenant that is no customer is priced without a default")
	}
	for _, cs := range [][]billing.Customer{
		{{Tenant: "acme", Book: "missing.yaml"}},
		{{Tenant: "acme", Book: "book.yaml", TimeZone: "Mars/Olympus"}},
	} {
		if _, err := CustomerPrices(cs, read); !fault.IsValidation(err) || !strings.Contains(err.Error(), "billing customer acme") {
			t.Errorf("%+v: %v, want a validation error naming the customer", cs, err)
		}
	}
	if d, err := BookPrices("book.yaml", read); err != nil || d.Book == nil || d.Location != time.UTC {
		t.Errorf("BookPrices: %+v, %v", d, err)
	}
	if _, err := BookPrices("missing.yaml", read); !fault.IsValidation(err) {
		t.Errorf("a missing book: %v", err)
	}
}

func TestChargebackEfficiencyRegroupsByDepartment(t *testing.T) {
	from := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	r := &fakeReader{holdings: []Holding{idleHolding("acme", "research", "G1", from), idleHolding("globex", "sales", "G2", from)}}
	svc := New(r, &announced{}, Prices{}, time.Now, slog.New(slog.DiscardHandler))
	rows, err := svc.ChargebackEfficiency(context.Background(), from, from.Add(time.Hour), map[string]string{"acme": "sciences", "globex": "sciences"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0].Department != "sciences" || rows[0].Tenant != "" || rows[0].IdleGPUMicros != 2*3_600_000_000 {
		t.Fatalf("rows %+v, want sciences with both tenants' idle hour, then each tenant", rows)
	}
	if _, err := svc.ChargebackEfficiency(context.Background(), from, from, nil); !fault.IsValidation(err) {
		t.Errorf("an empty period: %v", err)
	}
}
