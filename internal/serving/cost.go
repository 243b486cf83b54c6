package serving

import (
	"context"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/pricing"
)

var (
	_ server.CostService   = (*Service)(nil)
	_ server.TenantService = (*Service)(nil)
)

// customer is the configured customer tenant, if the scope may see it.
func (s *Service) customer(scope auth.Scope, tenant string) (billing.Customer, error) {
	for _, c := range s.customers.Customers {
		if c.Tenant == tenant && scope.Allows(c.Tenant, c.Department) {
			return c, nil
		}
	}
	return billing.Customer{}, fault.NotFoundf("tenant %q: not found", tenant)
}

// Cost prices the tenant's month so far, as its invoice will price it,
// and forecasts the month: its usage by trend and weekly season, priced
// whole with the same engine, book and contract (insights.ForecastCost).
// Rollups for closed hours, raw samples after.
func (s *Service) Cost(ctx context.Context, q server.CostRequest) (server.CostResult, error) {
	c, err := s.customer(q.Scope, q.Tenant)
	if err != nil {
		return server.CostResult{}, err
	}
	loc, err := c.Location()
	if err != nil {
		return server.CostResult{}, err
	}
	now := s.now()
	month := q.Month
	if month == "" {
		month = now.In(loc).Format("2006-01")
	}
	p, err := billing.MonthlyPeriod(month, loc)
	if err != nil {
		return server.CostResult{}, err
	}
	asOf := now.UTC().Truncate(time.Hour)
	if asOf.After(p.End) {
		asOf = p.End
	}
	if !asOf.After(p.Start) {
		return server.CostResult{}, fault.NotFoundf("month %s of %s has not begun: not found", month, c.Tenant)
	}
	// The scope allowed the customer above, by its configured department;
	// the usage is the tenant's whole, as its invoice bills it, whatever
	// department its samples carry. The trend fits the weeks before the
	// month too.
	from := p.Start.AddDate(0, 0, -7*insights.DefaultForecastWeeks).UTC().Truncate(time.Hour)
	usage, err := s.hourlyUsage(ctx, auth.Scope{Kind: auth.KindAdmin}, c.Tenant, from, asOf)
	if err != nil {
		return server.CostResult{}, err
	}
	// The configured book and the stored usage are the server's: pricing
	// refusing them is no fault of the caller's (fault.Internal).
	book, contract, err := s.pricing.Pricing(c)
	if err != nil {
		return server.CostResult{}, fault.Internal(err)
	}
	fc, err := insights.ForecastCost(insights.CostForecastInput{Tenant: c.Tenant, Pricing: insights.TenantPricing{Book: book, Contract: contract},
		PeriodStart: p.Start.In(loc), PeriodEnd: p.End.In(loc), AsOf: asOf, Usage: usage, Weeks: insights.DefaultForecastWeeks})
	if err != nil {
		return server.CostResult{}, fault.Internal(err)
	}
	cur := book.Currency()
	return server.CostResult{Tenant: c.Tenant, Month: month, TimeZone: loc.String(), Currency: cur.Code, BookVersion: book.Version(), MinorUnits: cur.MinorUnits,
		Start: p.Start, End: p.End, Cost: fc}, nil
}

// hourlyUsage is the tenant's usage per hour and SKU in [from, to), in
// price-book units: rollups for closed hours, raw samples after them.
func (s *Service) hourlyUsage(ctx context.Context, scope auth.Scope, tenant string, from, to time.Time) ([]pricing.Usage, error) {
	state, err := s.rollupState(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.read(ctx, store.UsageQuery{From: from, To: to, GroupBy: []store.Dimension{store.DimSKU},
		Bucket: store.BucketHour, Tenant: tenant, Scope: scope}, state, false)
	if err != nil {
		return nil, err
	}
	var out []pricing.Usage
	for _, r := range rows {
		out = append(out, pricing.UsageOf(r.Bucket, r.SKU, r.Values)...)
	}
	return out, nil
}

// Tenants lists the configured customers the scope may see.
func (s *Service) Tenants(ctx context.Context, scope auth.Scope) ([]server.TenantInfo, error) {
	var out []server.TenantInfo
	for _, c := range s.customers.Customers {
		if !scope.Allows(c.Tenant, c.Department) {
			continue
		}
		book, contract, err := s.pricing.Pricing(c)
		if err != nil {
			return nil, fault.Internal(err) // the configured book: the server's fault
		}
		zone := c.TimeZone
		if zone == "" {
			zone = "UTC"
		}
		t := server.TenantInfo{Tenant: c.Tenant, Department: c.Department, Name: c.Name, Currency: c.Currency, TimeZone: zone,
			BookVersion: book.Version()}
		if contract != nil {
			t.Contract = contractInfo(contract)
		}
		out = append(out, t)
	}
	return out, nil
}

func contractInfo(k *pricing.Contract) *server.ContractInfo {
	when := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	ci := &server.ContractInfo{Start: when(k.Start), End: when(k.End)}
	if k.MinimumMonthly != nil {
		ci.MinimumMonthly = k.MinimumMonthly.String()
	}
	for _, r := range k.Reservations {
		ri := server.ReservationInfo{SKU: r.SKU, Instances: r.Instances, Start: when(r.Start), End: when(r.End)}
		if !r.GPUs.IsZero() {
			ri.GPUs = r.GPUs.String()
		}
		if r.Rate != nil {
			ri.Rate = r.Rate.String()
		}
		if r.MonthlyFee != nil {
			ri.MonthlyFee = r.MonthlyFee.String()
		}
		ci.Reservations = append(ci.Reservations, ri)
	}
	return ci
}
