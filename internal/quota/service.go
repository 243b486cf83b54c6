package quota

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/pricing"
)

// liveWindow is how far back a GPU's latest sample may end and still
// count as running now (collectors sample every 10 s).
const liveWindow = 2 * time.Minute

// LiveStore reads what runs now (internal/store meets it).
type LiveStore interface {
	// LatestHoldings is, per GPU and MIG instance, the latest sample of a
	// tenant ending in [since, until].
	LatestHoldings(ctx context.Context, since, until time.Time) ([]Holding, error)
}

// Holding is one tenant's latest sample on one GPU or MIG instance.
type Holding struct {
	Tenant          string
	GPUModel        string
	GPUMicroseconds uint64 // held in the sample
	Seconds         uint64 // the sample's length
}

// liveConcurrency is what each tenant holds now, in GPU-equivalents by
// GPU model: each holding's GPU-microseconds over its length (a
// time-sliced share or a MIG instance holds less than one GPU).
func liveConcurrency(hs []Holding) map[string]map[string]decimal.Decimal {
	out := map[string]map[string]decimal.Decimal{}
	for _, h := range hs {
		if h.Seconds == 0 {
			continue
		}
		if out[h.Tenant] == nil {
			out[h.Tenant] = map[string]decimal.Decimal{}
		}
		share := decimal.NewFromUint64(h.GPUMicroseconds).DivRound(decimal.NewFromUint64(h.Seconds*1_000_000), 18)
		out[h.Tenant][h.GPUModel] = out[h.Tenant][h.GPUModel].Add(share)
	}
	return out
}

// UsageReader is month-to-date usage and the customers' pricing, read as
// the cost API reads them (usage.Service meets it).
type UsageReader interface {
	RollupState(ctx context.Context) (rollup.State, error)
	// Rows runs q as of state: rollups for closed hours, raw samples after.
	Rows(ctx context.Context, q usage.Query, state rollup.State) ([]usage.Row, error)
	// HourlyUsage is a tenant's usage per hour and SKU in price-book units.
	HourlyUsage(ctx context.Context, scope auth.Scope, tenant string, from, to time.Time) ([]pricing.Usage, error)
	Pricing(c billing.Customer) (*pricing.Book, *pricing.Contract, error)
}

// Service answers admission and quota state from an evaluator that a
// refresher keeps current; nothing on the request path reads ClickHouse.
type Service struct {
	usage     UsageReader
	live      LiveStore
	customers billing.Customers
	eval      *Evaluator
	cfg       Config
	now       func() time.Time
	logger    *slog.Logger
	gate      *creditGate  // nil: no credit_only admission (GateCredits)
	log       AdmissionLog // nil: admissions are kept in memory only
}

// NewService builds the evaluator for cfg over the configured customers;
// now is the clock of the month and of the snapshot's age.
func NewService(u UsageReader, live LiveStore, customers billing.Customers, cfg Config, now func() time.Time, logger *slog.Logger) (*Service, error) {
	e, err := NewEvaluator(cfg, now)
	if err != nil {
		return nil, err
	}
	return &Service{usage: u, live: live, customers: customers, eval: e, cfg: cfg, now: now, logger: logger.With("component", "quota")}, nil
}

// CrossingAnnouncer puts quota crossings in the webhook outbox
// (webhook.Publisher).
type CrossingAnnouncer interface {
	QuotaCrossed(ctx context.Context, cs []Crossing) error
}

// Run refreshes the snapshot every cfg.Refresh until ctx ends; crossings
// go to announce (outbound webhooks). A failed refresh keeps the old
// snapshot, which turns stale after cfg.StaleAfter.
func (q *Service) Run(ctx context.Context, announce CrossingAnnouncer) {
	t := time.NewTicker(q.cfg.Refresh)
	defer t.Stop()
	for {
		if err := q.Refresh(ctx, announce); err != nil && ctx.Err() == nil {
			q.logger.Warn("quota refresh failed; admissions use the last snapshot until it is stale", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh takes a new snapshot now and announces its crossings (none
// with a nil announce). A crossing that cannot be announced is logged:
// the snapshot is in force either way. With GateCredits, the credit_only
// customers' balances are read after it; a customer whose balance cannot
// be read keeps its last one (stale in time) and the error is returned.
func (q *Service) Refresh(ctx context.Context, announce CrossingAnnouncer) error {
	s, err := q.snapshot(ctx)
	if err != nil {
		return err
	}
	crossings := q.eval.Update(s)
	creditErr := q.gate.refresh(ctx, s)
	for _, c := range crossings {
		q.logger.Info("quota threshold crossed", "subject", c.Subject, "metric", c.Metric, "level", c.Level, "value", c.Value, "threshold", c.Limit)
	}
	if announce != nil && len(crossings) > 0 {
		if err := announce.QuotaCrossed(ctx, crossings); err != nil {
			q.logger.Error("announce quota crossings; they are lost", "crossings", len(crossings), "err", err)
		}
	}
	return creditErr
}

// needsSpend: spend is priced for tenants under a spend rule, and for
// credit_only customers, whose admission needs its rates.
func (q *Service) needsSpend(tenant, dept string) bool {
	if q.gate.gates(tenant) {
		return true
	}
	for _, r := range q.cfg.Rules {
		if r.Spend != nil && (r.Tenant == tenant || (r.Department != "" && r.Department == dept)) {
			return true
		}
	}
	return false
}

// snapshot reads live concurrency, this month's GPU-hours per tenant and
// model (in each customer's zone; UTC for tenants without a customer
// entry), and spend for tenants under a spend
func (q *Service) snapshot(ctx context.Context) (Snapshot, error) {
	now := q.now()
	holdings, err := q.live.LatestHoldings(ctx, now.Add(-liveWindow), now.Add(time.Minute))
	if err != nil {
		return Snapshot{}, err
	}
	live := liveConcurrency(holdings)
	state, err := q.usage.RollupState(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{At: now, Tenants: map[string]TenantState{}}
	get := func(tenant string) TenantState {
		t, ok := snap.Tenants[tenant]
		if !ok {
			t = TenantState{Tenant: tenant, Concurrent: map[string]decimal.Decimal{}, GPUHours: map[string]decimal.Decimal{}}
		}
		return t
	}
	zones := map[string]*time.Location{"UTC": time.UTC}
	zoneOf := map[string]string{}
	for _, c := range q.customers.Customers {
		loc, err := c.Location()
		if err != nil {
			return Snapshot{}, err
		}
		zones[loc.String()], zoneOf[c.Tenant] = loc, loc.String()
		t := get(c.Tenant)
		t.Department = c.Department
		snap.Tenants[c.Tenant] = t
	}
	for name, loc := range zones {
		p, err := billing.MonthContaining(now, loc)
		if err != nil {
			return Snapshot{}, err
		}
		to := now.UTC().Truncate(time.Hour).Add(time.Hour) // this hour so far, from raw samples
		rows, err := q.usage.Rows(ctx, usage.Query{From: p.Start, To: to,
			GroupBy: []usage.Dimension{usage.DimTenant, usage.DimDepartment, usage.DimSKU}}, state)
		if err != nil {
			return Snapshot{}, err
		}
		for _, r := range rows {
			zone := zoneOf[r.Tenant]
			if zone == "" {
				zone = "UTC"
			}
			if zone != name || r.Tenant == "" {
				continue
			}
			t := get(r.Tenant)
			if t.Department == "" {
				t.Department = r.Department
			}
			model, _ := gpucatalog.ParseSKU(r.SKU)
			t.GPUHours[model] = t.GPUHours[model].Add(r.GPUHours())
			t.Month = p.Label
			snap.Tenants[r.Tenant] = t
		}
		for tenant := range snap.Tenants {
			if zoneOf[tenant] == name || (zoneOf[tenant] == "" && name == "UTC") {
				t := snap.Tenants[tenant]
				t.Month = p.Label
				snap.Tenants[tenant] = t
			}
		}
	}
	for tenant, byModel := range live {
		t := get(tenant)
		for model, v := range byModel {
			t.Concurrent[model] = v
		}
		snap.Tenants[tenant] = t
	}
	for _, c := range q.customers.Customers {
		t := snap.Tenants[c.Tenant]
		if !q.needsSpend(c.Tenant, t.Department) {
			continue
		}
		if err := q.spend(ctx, c, now, &t); err != nil {
			return Snapshot{}, fmt.Errorf("quota spend of %s: %w", c.Tenant, err)
		}
		snap.Tenants[c.Tenant] = t
	}
	return snap, nil
}

// spend prices the customer's month so far and the price of one more
// GPU-equivalent hour of each SKU of its book, at the tier reached.
func (q *Service) spend(ctx context.Context, c billing.Customer, now time.Time, t *TenantState) error {
	loc, err := c.Location()
	if err != nil {
		return err
	}
	p, err := billing.MonthContaining(now, loc)
	if err != nil {
		return err
	}
	hour := now.UTC().Truncate(time.Hour)
	used, err := q.usage.HourlyUsage(ctx, auth.Scope{Kind: auth.KindAdmin}, c.Tenant, p.Start, hour.Add(time.Hour))
	if err != nil {
		return err
	}
	// The configured book and the stored usage are the server's: pricing
	// refusing them is no fault of the caller's, whose own tenant may not
	// even be this one (fault.Internal).
	book, contract, err := q.usage.Pricing(c)
	if err != nil {
		return fault.Internal(err)
	}
	end := hour.Add(time.Hour)
	if end.After(p.End) {
		end = p.End
	}
	price := func(u []pricing.Usage) (decimal.Decimal, error) {
		r, err := pricing.Price(pricing.Input{Tenant: c.Tenant, Start: p.Start.In(loc), End: end.In(loc), Usage: u, Book: book, Contract: contract})
		return r.Total, fault.Internal(err)
	}
	base, err := price(used)
	if err != nil {
		return err
	}
	t.Spend, t.Currency, t.SpendRate = base, book.Currency().Code, map[string]decimal.Decimal{}
	for _, sku := range book.SKUs() {
		if !book.Prices(sku, pricing.GPUHours) {
			continue
		}
		more, err := price(append(append([]pricing.Usage(nil), used...), pricing.Usage{Hour: hour, SKU: sku, Meter: pricing.GPUHours, Quantity: decimal.NewFromInt(1)}))
		if err != nil {
			return err
		}
		t.SpendRate[sku] = more.Sub(base)
	}
	return nil
}

// Admit decides a request within the caller's scope; a dry run holds
// nothing.
func (q *Service) Admit(ctx context.Context, scope auth.Scope, r Request) (Decision, error) {
	return q.AdmitAll(ctx, scope, []Request{r})
}

// AdmitAll decides requests of one tenant as one admission (a Pod's GPU
// resources) within the caller's scope: all are held or none is.
func (q *Service) AdmitAll(ctx context.Context, scope auth.Scope, rs []Request) (Decision, error) {
	for _, r := range rs {
		if !q.allows(scope, r.Tenant) {
			return Decision{}, fault.NotFoundf("tenant %q: not found", r.Tenant)
		}
	}
	if len(rs) > 0 && q.gate.gates(rs[0].Tenant) {
		if err := validateAll(rs); err != nil {
			return Decision{}, err
		}
		return q.admitCredit(rs)
	}
	return q.eval.AdmitAll(rs)
}

func (q *Service) allows(scope auth.Scope, tenant string) bool {
	if scope.Kind == auth.KindAdmin {
		return true
	}
	dept := ""
	for _, c := range q.customers.Customers {
		if c.Tenant == tenant {
			dept = c.Department
		}
	}
	return scope.Allows(tenant, dept)
}

// State lists the rules the scope may see: a tenant key its tenant's, a
// department key its department's and its tenants'.
func (q *Service) State(ctx context.Context, scope auth.Scope) ([]RuleState, time.Time, error) {
	all, at := q.eval.State()
	var out []RuleState
	for _, s := range all {
		switch {
		case scope.Kind == auth.KindAdmin,
			s.Tenant != "" && q.allows(scope, s.Tenant),
			s.Dept != "" && scope.Kind == auth.KindDepartment && s.Dept == scope.Name:
			out = append(out, s)
		}
	}
	return out, at, nil
}
