package insights

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/chargeback"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/partition"
	"github.com/gpumeter/gpumeter/pricing"
)

// The service: it loads the inputs through a Reader (the store), prices
// tenants as invoicing does, runs the pure analyses above and stores
// anomalies. The CLI (`gpumeter insights`) and the API (/v1/insights/...)
// both call it, so both answer the same. It speaks no SQL.

// Reader loads the inputs (store.InsightsReader meets it). Every read
// deduplicates; tenant "" reads every tenant. A Filter's scope is applied
// by the store, in SQL.
type Reader interface {
	Holdings(ctx context.Context, from, to time.Time, f Filter) ([]Holding, error)
	// HourlyGPUTime is each tenant's GPU time per UTC hour, by tenant,
	// then hour.
	HourlyGPUTime(ctx context.Context, from, to time.Time, f Filter) ([]HourTotal, error)
	// HourlyUsage is the hourly rollups per tenant and SKU (usage_hourly
	// FINAL, what invoices price; idle capacity is tenant "").
	billing.HourlyUsageReader
	// ModelGPUTime is each GPU model's GPU time in use per UTC hour, by
	// model, then hour. It is the fleet's: the store refuses a scope
	// narrower than admin rather than answer it.
	ModelGPUTime(ctx context.Context, from, to time.Time, scope auth.Scope) ([]HourTotal, error)
	// FirstHour is the oldest hour the rollup holds (zero: none): hours
	// before it are unknown, not hours without use.
	FirstHour(ctx context.Context) (time.Time, error)
	GPUsByModel(ctx context.Context, since, until time.Time) (map[string]int, error)
	// FleetSamples are the samples of every GPU's newest interval within
	// window of the newest sample: what the planner's fleet is built from
	// (partition.FleetFromSamples).
	FleetSamples(ctx context.Context, window time.Duration) ([]partition.DeviceSample, error)
	// StoredAnomalyIDs lists the ids of stored anomalies starting in
	// [from, to].
	StoredAnomalyIDs(ctx context.Context, from, to time.Time) (map[string]bool, error)
	InsertAnomalies(ctx context.Context, as []Anomaly, detectedAt time.Time) error
	Anomalies(ctx context.Context, from, to time.Time, f Filter) ([]StoredAnomaly, error)
}

// Announcer puts newly found anomalies in the webhook outbox
// (webhook.Publisher).
type Announcer interface {
	AnomaliesFound(ctx context.Context, as []Anomaly) error
}

// Filter is whose rows a read returns: those Scope may see, by the rule
// every API read follows (a tenant key its tenant's rows, a department key
// the rows labelled with its department; zero or admin: all), and of those
// Tenant's only when set.
type Filter struct {
	Tenant string
	Scope  auth.Scope
}

// StoredAnomaly is an anomaly with when it was first found.
type StoredAnomaly struct {
	Anomaly
	DetectedAt time.Time `json:"detected_at"`
}

// Priced is how one tenant is priced, and its billing time zone (daily
// spend is per calendar day there).
type Priced struct {
	TenantPricing
	Location *time.Location
}

// Prices are every tenant's pricing: billing customers by tenant, and a
// default for the others (nil: they get no money figures).
type Prices struct {
	ByTenant map[string]Priced
	Default  *Priced
}

// For is the tenant's pricing; ok is false when it has none.
func (p Prices) For(tenant string) (Priced, bool) {
	if pr, ok := p.ByTenant[tenant]; ok {
		return pr, true
	}
	if p.Default != nil {
		return *p.Default, true
	}
	return Priced{}, false
}

// fleetWindow is how far behind the newest sample a GPU's own newest
// sample may be and still count as part of the fleet (as mig plan reads it).
const fleetWindow = 10 * time.Minute

// Service runs the insights.
type Service struct {
	reader   Reader
	announce Announcer
	prices   Prices
	now      func() time.Time
	logger   *slog.Logger
}

// New makes a service.
func New(r Reader, announce Announcer, prices Prices, now func() time.Time, logger *slog.Logger) *Service {
	return &Service{reader: r, announce: announce, prices: prices, now: now, logger: logger.With("component", "insights")}
}

// Bounds of a request: holdings come from raw samples, a quarter at most.
const (
	MaxPeriod = 93 * 24 * time.Hour
	// MaxEvaluate bounds the evaluated range of anomaly detection; its
	// history (Weeks) comes on top.
	MaxEvaluate = 93 * 24 * time.Hour
)

// Bad input is a fault.Validation error: the CLI exits 2, the API
// answers 400. What the analyses of stored data fail with is the
// service's own fault (fault.Internal), whatever category pricing gave it.

// Request is a period [From, To) of whole UTC hours, optionally of one
// tenant, in the caller's Scope (the API sets it from the key; zero, as
// the CLI leaves it, reads all). The store applies the scope in SQL as it
// does for /v1/usage, so a department request sees the rows labelled with
// its department, its "fleet" totals are theirs, and it gets no fleet
// layout.
type Request struct {
	From, To time.Time
	Tenant   string
	Scope    auth.Scope
}

// filter is the request's tenant and scope.
func (r Request) filter() Filter { return Filter{Tenant: r.Tenant, Scope: r.Scope} }

// fleetWide reports a request of the whole fleet: no tenant, no scope
// narrower than admin.
func (r Request) fleetWide() bool {
	return r.Tenant == "" && (r.Scope.Kind == "" || r.Scope.Kind == auth.KindAdmin)
}

// validScope checks the scope, and a tenant asked for within a tenant
// scope (another tenant's rows are not in it).
func (r Request) validScope() error {
	if r.Scope.Kind == "" {
		return nil
	}
	if err := r.Scope.Validate(); err != nil {
		return err
	}
	if t := r.Scope.Tenant(); t != "" && r.Tenant != "" && r.Tenant != t {
		return fmt.Errorf("tenant %q: outside scope %s", r.Tenant, r.Scope)
	}
	return nil
}

// Validate reports every problem.
func (r Request) Validate() error {
	var errs []error
	if r.From.IsZero() || r.To.IsZero() {
		return fault.Validation(errors.New("from and to are required"))
	}
	if !r.To.After(r.From) {
		errs = append(errs, errors.New("to must be after from"))
	} else if r.To.Sub(r.From) > MaxPeriod {
		errs = append(errs, fmt.Errorf("the period is %s, at most %s", r.To.Sub(r.From), MaxPeriod))
	}
	for _, t := range []time.Time{r.From, r.To} {
		if !t.Equal(t.Truncate(time.Hour)) {
			errs = append(errs, fmt.Errorf("%s is not a whole UTC hour", t.UTC().Format(time.RFC3339Nano)))
		}
	}
	if err := r.validScope(); err != nil {
		errs = append(errs, err)
	}
	return fault.Validation(errors.Join(errs...))
}

// pricing is the pricing map of the tenants of hs.
func (s *Service) pricing(hs []Holding) map[string]TenantPricing {
	out := map[string]TenantPricing{}
	for _, h := range hs {
		if pr, ok := s.prices.For(h.Tenant); ok {
			out[h.Tenant] = pr.TenantPricing
		}
	}
	return out
}

// Efficiency is the Efficiency analysis over the period's holdings, with the
// default idle parameters unless params is given.
func (s *Service) Efficiency(ctx context.Context, r Request, params *IdleParams) (EfficiencyReport, error) {
	if err := r.Validate(); err != nil {
		return EfficiencyReport{}, err
	}
	p := DefaultIdleParams()
	if params != nil {
		p = *params
	}
	if err := p.Validate(); err != nil {
		return EfficiencyReport{}, fault.Validation(err)
	}
	// The holdings are the scope's already: its totals are the report's.
	hs, err := s.reader.Holdings(ctx, r.From.UTC(), r.To.UTC(), r.filter())
	if err != nil {
		return EfficiencyReport{}, err
	}
	rep, err := Efficiency(EfficiencyInput{From: r.From.UTC(), To: r.To.UTC(), Params: p, Holdings: hs, Pricing: s.pricing(hs)})
	return rep, fault.Internal(err)
}

// RightSize is the RightSize analysis over the period's holdings and the
// fleet's current layout.
func (s *Service) RightSize(ctx context.Context, r Request) (RightSizeReport, error) {
	if err := r.Validate(); err != nil {
		return RightSizeReport{}, err
	}
	hs, err := s.reader.Holdings(ctx, r.From.UTC(), r.To.UTC(), r.filter())
	if err != nil {
		return RightSizeReport{}, err
	}
	in := RightSizeInput{From: r.From.UTC(), To: r.To.UTC(), Params: DefaultRightSizeParams(), Holdings: hs, Pricing: s.pricing(hs)}
	if r.fleetWide() {
		// The layout is the fleet's: only a fleet-wide request plans it.
		if in.Fleet, err = s.fleet(ctx); err != nil {
			return RightSizeReport{}, err
		}
	}
	rep, err := RightSize(in)
	return rep, fault.Internal(err)
}

// fleet is the fleet's current MIG layout for the planner. Devices the
// planner cannot place (models without MIG tables) are left out of it, as
// mig plan leaves them.
func (s *Service) fleet(ctx context.Context) (*partition.Fleet, error) {
	rows, err := s.reader.FleetSamples(ctx, fleetWindow)
	if err != nil {
		return nil, err
	}
	f, _ := partition.FleetFromSamples(rows)
	return &f, nil
}

// hourlyUsage is each tenant's hourly usage of [from, to) as the pricing
// engine takes it (tenant "" for all; idle capacity left out).
func (s *Service) hourlyUsage(ctx context.Context, from, to time.Time, tenant string) (map[string][]pricing.Usage, error) {
	tu, err := billing.LoadTenantUsage(ctx, s.reader, from, to, tenant)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]pricing.Usage, len(tu))
	for t, u := range tu {
		if t != "" {
			out[t] = u.Usage
		}
	}
	return out, nil
}

// Detect checks the hours and days of [From, To) of every tenant (or the
// one) against their seasonal baselines, loading the history the baseline
// needs before From: hourly gpu_hours, and daily spend in the tenant's
// zone for priced tenants (days that start in [From, To) are checked).
// With save, anomalies are stored and the new ones enqueued as webhooks;
// fresh are those new ones.
func (s *Service) Detect(ctx context.Context, r Request, save bool) (found, fresh []Anomaly, err error) {
	if err := r.Validate(); err != nil {
		return nil, nil, err
	}
	if r.Scope.Kind == auth.KindDepartment {
		// Anomalies are found in a tenant's whole usage and stored without
		// a department, so no department scope can hold them.
		return nil, nil, fault.Validationf("scope %s: anomalies are detected per tenant, for tenant or admin scopes", r.Scope)
	}
	tenant := r.Tenant
	if t := r.Scope.Tenant(); t != "" {
		tenant = t
	}
	p := DefaultAnomalyParams()
	from, to := r.From.UTC(), r.To.UTC()
	hist := from.AddDate(0, 0, -7*p.Baseline.Weeks)
	// Before the fleet's first recorded hour nothing is known: counting
	// those weeks as zero would flag every tenant of a new deployment.
	first, err := s.reader.FirstHour(ctx)
	if err != nil {
		return nil, nil, err
	}
	if first.IsZero() || !first.Before(to) {
		return nil, nil, nil
	}
	if first.After(hist) {
		hist = first
	}
	if !hist.Before(to) {
		return nil, nil, nil
	}
	rows, err := s.reader.HourlyGPUTime(ctx, hist, to, r.filter())
	if err != nil {
		return nil, nil, err
	}
	hourly := HourlySeries(rows, hist, to, false)
	if found, err = Detect(AnomalyInput{Series: hourly, EvaluateFrom: from, Params: p}); err != nil {
		return nil, nil, err
	}
	// A day of any zone lies within a day and a bit around the range.
	usage, err := s.hourlyUsage(ctx, hist.Add(-26*time.Hour), to.Add(26*time.Hour), tenant)
	if err != nil {
		return nil, nil, err
	}
	tenants := slices.Sorted(maps.Keys(usage))
	for _, t := range tenants {
		pr, ok := s.prices.For(t)
		if !ok {
			continue
		}
		loc := pr.Location
		if loc == nil {
			loc = time.UTC
		}
		evalFrom := ceilDay(from, loc)
		dayFrom, dayTo := ceilDay(hist, loc), floorDay(to, loc)
		if !dayTo.After(evalFrom) || !dayTo.After(dayFrom) {
			continue // no whole day of the tenant's in the range
		}
		spend, err := DailySpend(t, pr.TenantPricing, dayFrom, dayTo, usage[t])
		if err != nil {
			return nil, nil, fault.Internal(err)
		}
		an, err := Detect(AnomalyInput{Series: []Series{spend}, EvaluateFrom: evalFrom, Params: p})
		if err != nil {
			return nil, nil, err
		}
		found = append(found, an...)
	}
	if !save || len(found) == 0 {
		return found, nil, nil
	}
	fresh, err = s.saveAnomalies(ctx, found)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range fresh {
		s.logger.Info("anomaly", "tenant", a.Tenant, "meter", a.Meter, "start", a.Start, "direction", a.Direction, "anomaly_id", a.ID)
	}
	return found, fresh, nil
}

// saveAnomalies stores the anomalies not stored before and announces
// each of them, returning those. The outbox is written before the rows: a
// run cut short between the two announces them again on the next run,
// with the same event ids, so the outbox keeps one each; a run after both
// finds every id stored and announces nothing.
func (s *Service) saveAnomalies(ctx context.Context, found []Anomaly) ([]Anomaly, error) {
	lo, hi := found[0].Start, found[0].Start
	for _, a := range found {
		lo, hi = minTime(lo, a.Start), maxTime(hi, a.Start)
	}
	stored, err := s.reader.StoredAnomalyIDs(ctx, lo, hi)
	if err != nil {
		return nil, err
	}
	var fresh []Anomaly
	for _, a := range found {
		if !stored[a.ID] {
			stored[a.ID] = true // once per run too
			fresh = append(fresh, a)
		}
	}
	if len(fresh) == 0 {
		return nil, nil
	}
	if err := s.announce.AnomaliesFound(ctx, fresh); err != nil {
		return nil, err
	}
	if err := s.reader.InsertAnomalies(ctx, fresh, s.now()); err != nil {
		return nil, err
	}
	return fresh, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func floorDay(t time.Time, loc *time.Location) time.Time {
	y, m, d := t.In(loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, loc)
}

func ceilDay(t time.Time, loc *time.Location) time.Time {
	f := floorDay(t, loc)
	if f.Equal(t) {
		return f
	}
	return f.AddDate(0, 0, 1)
}

// Stored lists the stored anomalies starting in the period.
func (s *Service) Stored(ctx context.Context, r Request) ([]StoredAnomaly, error) {
	if r.From.IsZero() || r.To.IsZero() || !r.To.After(r.From) {
		return nil, fault.Validation(errors.New("from and to are required, to after from"))
	}
	if r.To.Sub(r.From) > 400*24*time.Hour {
		return nil, fault.Validationf("the range is %s, at most 400 days", r.To.Sub(r.From))
	}
	if err := r.validScope(); err != nil {
		return nil, fault.Validation(err)
	}
	return s.reader.Anomalies(ctx, r.From.UTC(), r.To.UTC(), r.filter())
}

// Defaults of a capacity request: `gpumeter insights capacity` and
// /v1/insights/capacity both take them.
const (
	DefaultCapacityHorizon = 90 * 24 * time.Hour // Until after To
	DefaultCapacityWeeks   = 8
	DefaultCapacityTarget  = "0.9"
)

// CapacityRequest projects each model's demand from the Weeks before To
// until Until against Target of the GPUs that reported in To's last hour.
// Scope is the caller's: capacity is the fleet's, so the store answers an
// admin (or zero) scope only.
type CapacityRequest struct {
	To, Until time.Time
	Weeks     int
	Target    decimal.Decimal
	Scope     auth.Scope
}

// Validate reports every problem.
func (r CapacityRequest) Validate() error {
	var errs []error
	if r.To.IsZero() || !r.To.Equal(r.To.Truncate(time.Hour)) {
		errs = append(errs, errors.New("to: required, a whole UTC hour"))
	}
	if r.Until.IsZero() || !r.Until.Equal(r.Until.Truncate(time.Hour)) || !r.Until.After(r.To) {
		errs = append(errs, errors.New("until: required, a whole UTC hour after to"))
	} else if r.Until.Sub(r.To) > 3*366*24*time.Hour {
		errs = append(errs, errors.New("until: at most three years ahead"))
	}
	if r.Weeks < 2 || r.Weeks > 52 {
		errs = append(errs, fmt.Errorf("weeks %d: want 2 to 52", r.Weeks))
	}
	if r.Target.Sign() <= 0 || r.Target.GreaterThan(decimal.NewFromInt(1)) {
		errs = append(errs, fmt.Errorf("target %s: want within (0, 1]", r.Target))
	}
	return fault.Validation(errors.Join(errs...))
}

// Capacity is FleetCapacity for every model with GPUs: demand
// from usage_hourly (a model without rows has zero demand), capacity the
// GPUs that reported in the last hour before To.
func (s *Service) Capacity(ctx context.Context, r CapacityRequest) ([]CapacityForecast, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	to := r.To.UTC()
	from := to.AddDate(0, 0, -7*r.Weeks)
	// Weeks before the fleet's first recorded hour are unknown: as zeros
	// they would fit a steep trend into any young fleet.
	first, err := s.reader.FirstHour(ctx)
	if err != nil {
		return nil, err
	}
	if first.After(from) {
		from = first
	}
	weeks := int(to.Sub(from) / (7 * 24 * time.Hour))
	if weeks < 2 {
		return nil, fault.Validationf("capacity needs two weeks of history before %s; the fleet's first recorded hour is %s",
			to.Format(time.RFC3339), first.Format(time.RFC3339))
	}
	from = to.AddDate(0, 0, -7*min(weeks, r.Weeks))
	rows, err := s.reader.ModelGPUTime(ctx, from, to, r.Scope)
	if err != nil {
		return nil, err
	}
	demand := HourlySeries(rows, from, to, true)
	gpus, err := s.reader.GPUsByModel(ctx, to.Add(-time.Hour), to)
	if err != nil {
		return nil, err
	}
	byModel := map[string]Series{}
	for _, d := range demand {
		byModel[d.SKU] = d
	}
	models := slices.Sorted(maps.Keys(gpus))
	var in []CapacityInput
	for _, m := range models {
		d, ok := byModel[m]
		if !ok {
			d = Series{Meter: "gpu_equivalents", SKU: m, Step: Hourly, From: from, To: to}
		}
		in = append(in, CapacityInput{Model: m, CapacityGPUs: decimal.NewFromInt(int64(gpus[m])), Target: r.Target,
			Demand: d, Weeks: min(weeks, r.Weeks), Until: r.Until.UTC()})
	}
	for m := range byModel {
		if _, ok := gpus[m]; !ok {
			s.logger.Debug("demand without GPUs reporting in the last hour; left out of capacity", "model", m)
		}
	}
	return FleetCapacity(in)
}

// ChargebackRows are the efficiency report's departments, each followed
// by its tenants, as the chargeback report's efficiency section shows them.
func ChargebackRows(rep EfficiencyReport) []chargeback.EfficiencyRow {
	row := func(dept, tenant string, t Totals) chargeback.EfficiencyRow {
		return chargeback.EfficiencyRow{Department: dept, Tenant: tenant, HeldGPUMicros: t.HeldGPUMicros, MeasuredGPUMicros: t.MeasuredGPUMicros,
			UnmeasuredGPUMicros: t.UnmeasuredGPUMicros, SMActiveMicros: t.SMActiveMicros, IdleGPUMicros: t.IdleGPUMicros}
	}
	byDept := map[string][]TenantEfficiency{}
	for _, t := range rep.Tenants {
		byDept[t.Department] = append(byDept[t.Department], t)
	}
	out := []chargeback.EfficiencyRow{}
	for _, d := range rep.Departments {
		out = append(out, row(d.Department, "", d.Totals))
		ts := byDept[d.Department]
		sort.Slice(ts, func(i, j int) bool { return ts[i].Tenant < ts[j].Tenant })
		for _, t := range ts {
			out = append(out, row(d.Department, t.Tenant, t.Totals))
		}
	}
	return out
}

// Config is the insights section of the config: when `gpumeter serve`
// looks for anomalies.
type Config struct {
	// Schedule is the cron spec of the detection in serve (UTC); empty
	// turns it off. Each run checks the Lookback before the hour the
	// hourly rollup has closed through, stores what it finds and enqueues
	// each anomaly not seen before as an insight.anomaly webhook: runs are
	// idempotent, so overlapping windows send nothing twice.
	Schedule string `yaml:"schedule"`
	// Lookback is the evaluated window, whole hours (its baseline's
	// history comes on top): long enough to cover a day of every tenant's
	// zone and a missed run or two.
	Lookback time.Duration `yaml:"lookback"`
}

// DefaultConfig runs hourly, at 20 past, over the last 48 closed hours.
func DefaultConfig() Config { return Config{Schedule: "20 * * * *", Lookback: 48 * time.Hour} }

// Validate names the field of every problem.
func (c Config) Validate() error {
	if c.Lookback < time.Hour || c.Lookback%time.Hour != 0 || c.Lookback > MaxEvaluate {
		return fmt.Errorf("insights.lookback %s: want whole hours, 1h to %s", c.Lookback, MaxEvaluate)
	}
	return nil
}

// DetectClosed is the scheduled detection: the lookback before
// closedThrough (the rollup's: hours after it are not summed yet and would
// read as drops), saved and enqueued.
func (s *Service) DetectClosed(ctx context.Context, closedThrough time.Time, lookback time.Duration) (found, fresh []Anomaly, err error) {
	to := closedThrough.UTC().Truncate(time.Hour)
	if to.IsZero() || to.Unix() <= 0 {
		s.logger.Debug("no closed hours yet; nothing to check")
		return nil, nil, nil
	}
	return s.Detect(ctx, Request{From: to.Add(-lookback), To: to}, true)
}

// HourTotal is one key's GPU time in one UTC hour, as the hourly rollup
// holds it: a tenant's, or a GPU model's.
type HourTotal struct {
	Key             string
	Hour            time.Time
	GPUMicroseconds uint64
}

// HourlySeries turns hourly totals, sorted by key then hour, into one
// hourly series per key over [from, to): a tenant's gpu_hours, or (byModel)
// a GPU model's demand in GPU-equivalents (its GPU-hours over the hour;
// Tenant empty, SKU the model). Hours without a total are absent (zero, as
// Series reads them).
func HourlySeries(rows []HourTotal, from, to time.Time, byModel bool) []Series {
	var out []Series
	for _, r := range rows {
		if len(out) == 0 || seriesKey(out[len(out)-1], byModel) != r.Key {
			sr := Series{Tenant: r.Key, Meter: "gpu_hours", Step: Hourly, From: from.UTC(), To: to.UTC()}
			if byModel {
				sr = Series{SKU: r.Key, Meter: "gpu_equivalents", Step: Hourly, From: from.UTC(), To: to.UTC()}
			}
			out = append(out, sr)
		}
		last := &out[len(out)-1]
		last.Points = append(last.Points, Point{At: r.Hour, Value: GPUHours(int64(r.GPUMicroseconds))})
	}
	return out
}

func seriesKey(s Series, byModel bool) string {
	if byModel {
		return s.SKU
	}
	return s.Tenant
}

// CustomerPrices prices billing customers by their book and contract (read
// through readFile), in their time zone. Problems name the customer and
// are validation errors: the config is wrong.
func CustomerPrices(customers []billing.Customer, readFile func(string) ([]byte, error)) (Prices, error) {
	p := Prices{ByTenant: map[string]Priced{}}
	for _, c := range customers {
		b, k, err := billing.LoadPricing(c, readFile)
		if err != nil {
			return p, fault.Validationf("billing customer %s: %w", c.Tenant, err)
		}
		loc := time.UTC
		if c.TimeZone != "" {
			if loc, err = time.LoadLocation(c.TimeZone); err != nil {
				return p, fault.Validationf("billing customer %s: time zone: %w", c.Tenant, err)
			}
		}
		p.ByTenant[c.Tenant] = Priced{TenantPricing: TenantPricing{Book: b, Contract: k}, Location: loc}
	}
	return p, nil
}

// BookPrices prices by the book at path, in UTC: the default of tenants
// that are no billing customers.
func BookPrices(path string, readFile func(string) ([]byte, error)) (*Priced, error) {
	b, _, err := billing.LoadPricing(billing.Customer{Book: path}, readFile)
	if err != nil {
		return nil, fault.Validation(err)
	}
	return &Priced{TenantPricing: TenantPricing{Book: b}, Location: time.UTC}, nil
}

// ChargebackEfficiency is the chargeback report's efficiency section for
// [from, to): every tenant's efficiency, regrouped by departments (tenant
// → department; nil keeps each tenant's own), as ChargebackRows.
func (s *Service) ChargebackEfficiency(ctx context.Context, from, to time.Time, departments map[string]string) ([]chargeback.EfficiencyRow, error) {
	er, err := s.Efficiency(ctx, Request{From: from, To: to}, nil)
	if err != nil {
		return nil, fmt.Errorf("efficiency section: %w", err)
	}
	return ChargebackRows(Regroup(er, departments)), nil
}
