package serving

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/pricing"
)

// liveWindow is how far back a GPU's latest sample may end and still
// count as running now (collectors sample every 10 s).
const liveWindow = 2 * time.Minute

// QuotaStore is what the quota snapshot reads beyond Store.
type QuotaStore interface {
	LiveConcurrency(ctx context.Context, since, until time.Time) (map[string]map[string]decimal.Decimal, error)
}

// Quotas answers admission and quota state from an evaluator that a
// refresher keeps current; nothing on the request path reads ClickHouse.
type Quotas struct {
	svc    *Service
	live   QuotaStore
	eval   *quota.Evaluator
	cfg    quota.Config
	logger *slog.Logger
}

var _ server.QuotaService = (*Quotas)(nil)

// NewQuotas builds the evaluator for cfg.
func NewQuotas(svc *Service, live QuotaStore, cfg quota.Config, logger *slog.Logger) (*Quotas, error) {
	e, err := quota.NewEvaluator(cfg, svc.now)
	if err != nil {
		return nil, err
	}
	return &Quotas{svc: svc, live: live, eval: e, cfg: cfg, logger: logger.With("component", "quota")}, nil
}

// CrossingAnnouncer puts quota crossings in the webhook outbox
// (webhook.Publisher).
type CrossingAnnouncer interface {
	QuotaCrossed(ctx context.Context, cs []quota.Crossing) error
}

// Run refreshes the snapshot every cfg.Refresh until ctx ends; crossings
// go to announce (outbound webhooks). A failed refresh keeps the old
// snapshot, which turns stale after cfg.StaleAfter.
func (q *Quotas) Run(ctx context.Context, announce CrossingAnnouncer) {
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
// the snapshot is in force either way.
func (q *Quotas) Refresh(ctx context.Context, announce CrossingAnnouncer) error {
	s, err := q.snapshot(ctx)
	if err != nil {
		return err
	}
	crossings := q.eval.Update(s)
	for _, c := range crossings {
		q.logger.Info("quota threshold crossed", "subject", c.Subject, "metric", c.Metric, "level", c.Level, "value", c.Value, "threshold", c.Limit)
	}
	if announce != nil && len(crossings) > 0 {
		if err := announce.QuotaCrossed(ctx, crossings); err != nil {
			q.logger.Error("announce quota crossings; they are lost", "crossings", len(crossings), "err", err)
		}
	}
	return nil
}

func (q *Quotas) needsSpend(tenant, dept string) bool {
	for _, r := range q.cfg.Rules {
		if r.Spend != nil && (r.Tenant == tenant || (r.Department != "" && r.Department == dept)) {
			return true
		}
	}
	return false
}

// snapshot reads live concurrency, this month's GPU-hours per tenant and
// model (in each customer's zone; UTC for tenants without a customer
// entry), and spend for tenants under a spend quota.
func (q *Quotas) snapshot(ctx context.Context) (quota.Snapshot, error) {
	now := q.svc.now()
	live, err := q.live.LiveConcurrency(ctx, now.Add(-liveWindow), now.Add(time.Minute))
	if err != nil {
		return quota.Snapshot{}, err
	}
	state, err := q.svc.rollupState(ctx)
	if err != nil {
		return quota.Snapshot{}, err
	}
	snap := quota.Snapshot{At: now, Tenants: map[string]quota.TenantState{}}
	get := func(tenant string) quota.TenantState {
		t, ok := snap.Tenants[tenant]
		if !ok {
			t = quota.TenantState{Tenant: tenant, Concurrent: map[string]decimal.Decimal{}, GPUHours: map[string]decimal.Decimal{}}
		}
		return t
	}
	zones := map[string]*time.Location{"UTC": time.UTC}
	zoneOf := map[string]string{}
	for _, c := range q.svc.customers.Customers {
		loc, err := c.Location()
		if err != nil {
			return quota.Snapshot{}, err
		}
		zones[loc.String()], zoneOf[c.Tenant] = loc, loc.String()
		t := get(c.Tenant)
		t.Department = c.Department
		snap.Tenants[c.Tenant] = t
	}
	for name, loc := range zones {
		p, err := billing.MonthContaining(now, loc)
		if err != nil {
			return quota.Snapshot{}, err
		}
		to := now.UTC().Truncate(time.Hour).Add(time.Hour) // this hour so far, from raw samples
		rows, err := q.svc.read(ctx, store.UsageQuery{From: p.Start, To: to,
			GroupBy: []store.Dimension{store.DimTenant, store.DimDepartment, store.DimSKU}}, state, false)
		if err != nil {
			return quota.Snapshot{}, err
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
	for _, c := range q.svc.customers.Customers {
		t := snap.Tenants[c.Tenant]
		if !q.needsSpend(c.Tenant, t.Department) {
			continue
		}
		if err := q.spend(ctx, c, now, &t); err != nil {
			return quota.Snapshot{}, fmt.Errorf("quota spend of %s: %w", c.Tenant, err)
		}
		snap.Tenants[c.Tenant] = t
	}
	return snap, nil
}

// spend prices the customer's month so far and the price of one more
// GPU-equivalent hour of each SKU of its book, at the tier reached.
func (q *Quotas) spend(ctx context.Context, c billing.Customer, now time.Time, t *quota.TenantState) error {
	loc, err := c.Location()
	if err != nil {
		return err
	}
	p, err := billing.MonthContaining(now, loc)
	if err != nil {
		return err
	}
	hour := now.UTC().Truncate(time.Hour)
	usage, err := q.svc.hourlyUsage(ctx, auth.Scope{Kind: auth.KindAdmin}, c.Tenant, p.Start, hour.Add(time.Hour))
	if err != nil {
		return err
	}
	// The configured book and the stored usage are the server's: pricing
	// refusing them is no fault of the caller's, whose own tenant may not
	// even be this one (fault.Internal).
	book, contract, err := q.svc.pricing.Pricing(c)
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
	base, err := price(usage)
	if err != nil {
		return err
	}
	t.Spend, t.Currency, t.SpendRate = base, book.Currency().Code, map[string]decimal.Decimal{}
	for _, sku := range book.SKUs() {
		if !book.Prices(sku, pricing.GPUHours) {
			continue
		}
		more, err := price(append(append([]pricing.Usage(nil), usage...), pricing.Usage{Hour: hour, SKU: sku, Meter: pricing.GPUHours, Quantity: decimal.NewFromInt(1)}))
		if err != nil {
			return err
		}
		t.SpendRate[sku] = more.Sub(base)
	}
	return nil
}

// Admit decides a request within the caller's scope; a dry run holds
// nothing.
func (q *Quotas) Admit(ctx context.Context, scope auth.Scope, r quota.Request) (quota.Decision, error) {
	return q.AdmitAll(ctx, scope, []quota.Request{r})
}

// AdmitAll decides requests of one tenant as one admission (a Pod's GPU
// resources) within the caller's scope: all are held or none is.
func (q *Quotas) AdmitAll(ctx context.Context, scope auth.Scope, rs []quota.Request) (quota.Decision, error) {
	for _, r := range rs {
		if !q.allows(scope, r.Tenant) {
			return quota.Decision{}, fault.NotFoundf("tenant %q: not found", r.Tenant)
		}
	}
	return q.eval.AdmitAll(rs)
}

func (q *Quotas) allows(scope auth.Scope, tenant string) bool {
	if scope.Kind == auth.KindAdmin {
		return true
	}
	dept := ""
	for _, c := range q.svc.customers.Customers {
		if c.Tenant == tenant {
			dept = c.Department
		}
	}
	return scope.Allows(tenant, dept)
}

// State lists the rules the scope may see: a tenant key its tenant's, a
// department key its department's and its tenants'.
func (q *Quotas) State(ctx context.Context, scope auth.Scope) ([]quota.RuleState, time.Time, error) {
	all, at := q.eval.State()
	var out []quota.RuleState
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

// Describe and Collect export the quota state to Prometheus.
func (q *Quotas) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(q, ch) }

var (
	quotaUsedDesc = prometheus.NewDesc("gpumeter_quota_used", "Measured use of a quota: GPU-equivalents, GPU-hours this month or spend this month.",
		[]string{"subject", "metric"}, nil)
	quotaAdmittedDesc = prometheus.NewDesc("gpumeter_quota_admitted", "Admitted work not yet running, held against a quota.",
		[]string{"subject", "metric"}, nil)
	quotaHardDesc = prometheus.NewDesc("gpumeter_quota_hard_limit", "A quota's hard limit.", []string{"subject", "metric"}, nil)
	quotaAgeDesc  = prometheus.NewDesc("gpumeter_quota_snapshot_age_seconds", "Age of the quota evaluator's data.", nil, nil)
)

// Collect reads the evaluator's state (its lock, no I/O).
func (q *Quotas) Collect(ch chan<- prometheus.Metric) {
	states, at := q.eval.State()
	for _, s := range states {
		f := func(d decimal.Decimal) float64 { v, _ := d.Float64(); return v } // Prometheus samples are floats; no amount is computed from them
		ch <- prometheus.MustNewConstMetric(quotaUsedDesc, prometheus.GaugeValue, f(s.Used), s.Subject, string(s.Metric))
		ch <- prometheus.MustNewConstMetric(quotaAdmittedDesc, prometheus.GaugeValue, f(s.Admitted), s.Subject, string(s.Metric))
		ch <- prometheus.MustNewConstMetric(quotaHardDesc, prometheus.GaugeValue, f(s.Hard), s.Subject, string(s.Metric))
	}
	if !at.IsZero() {
		ch <- prometheus.MustNewConstMetric(quotaAgeDesc, prometheus.GaugeValue, q.svc.now().Sub(at).Seconds())
	}
}
