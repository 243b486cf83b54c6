package usage

import (
	"context"
	"errors"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/pricing"
)

// CostRequest is a tenant's month so far and its forecast: the tenant
// (for a tenant key, its own; empty means that one) and a month (YYYY-MM;
// empty: the current one in the tenant's zone).
type CostRequest struct {
	Scope  auth.Scope
	Tenant string
	Month  string
}

// Validate reports every problem: a month that is none, no tenant where
// the key has none of its own, another tenant than a tenant key's own
// (not found: outside the scope is absent).
func (r CostRequest) Validate() error {
	var errs []error
	if r.Month != "" {
		if _, err := billing.MonthlyPeriod(r.Month, time.UTC); err != nil {
			errs = append(errs, fault.Validationf("month: %w", err))
		}
	}
	own := r.Scope.Tenant()
	switch {
	case own != "" && r.Tenant != "" && r.Tenant != own:
		errs = append(errs, fault.NotFoundf("tenant %q: not found", r.Tenant))
	case own == "" && r.Tenant == "":
		errs = append(errs, fault.Validationf("tenant: required for a %s key", r.Scope.Kind))
	}
	return errors.Join(errs...)
}

// CostResult is a tenant's month so far and at its end, before tax, as
// insights.ForecastCost priced them with the invoice's engine, book and
// contract.
type CostResult struct {
	Tenant, Month, Currency, BookVersion string
	TimeZone                             string
	MinorUnits                           int32
	Start, End                           time.Time
	Cost                                 insights.CostForecast
}

// TenantInfo is a customer as the API shows it.
type TenantInfo struct {
	Tenant      string        `json:"tenant"`
	Department  string        `json:"department,omitempty"`
	Name        string        `json:"name"`
	Currency    string        `json:"currency"`
	TimeZone    string        `json:"time_zone"`
	BookVersion string        `json:"book_version"`
	Contract    *ContractInfo `json:"contract,omitempty"`
}

// ContractInfo is a contract's terms.
type ContractInfo struct {
	Start          string            `json:"start,omitempty"`
	End            string            `json:"end,omitempty"`
	MinimumMonthly string            `json:"minimum_monthly,omitempty"`
	Reservations   []ReservationInfo `json:"reservations,omitempty"`
}

// ReservationInfo is one reservation of a contract.
type ReservationInfo struct {
	SKU        string `json:"sku"`
	GPUs       string `json:"gpus,omitempty"`
	Instances  int64  `json:"instances,omitempty"`
	Rate       string `json:"rate,omitempty"`
	MonthlyFee string `json:"monthly_fee,omitempty"`
	Start      string `json:"start,omitempty"`
	End        string `json:"end,omitempty"`
}

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
func (s *Service) Cost(ctx context.Context, q CostRequest) (CostResult, error) {
	if err := q.Validate(); err != nil {
		return CostResult{}, err
	}
	tenant := q.Tenant
	if own := q.Scope.Tenant(); own != "" {
		tenant = own
	}
	c, err := s.customer(q.Scope, tenant)
	if err != nil {
		return CostResult{}, err
	}
	loc, err := c.Location()
	if err != nil {
		return CostResult{}, err
	}
	now := s.now()
	month := q.Month
	if month == "" {
		month = now.In(loc).Format("2006-01")
	}
	p, err := billing.MonthlyPeriod(month, loc)
	if err != nil {
		return CostResult{}, err
	}
	asOf := now.UTC().Truncate(time.Hour)
	if asOf.After(p.End) {
		asOf = p.End
	}
	if !asOf.After(p.Start) {
		return CostResult{}, fault.NotFoundf("month %s of %s has not begun: not found", month, c.Tenant)
	}
	// The scope allowed the customer above, by its configured department;
	// the usage is the tenant's whole, as its invoice bills it, whatever
	// department its samples carry. The trend fits the weeks before the
	// month too.
	from := p.Start.AddDate(0, 0, -7*insights.DefaultForecastWeeks).UTC().Truncate(time.Hour)
	usage, err := s.HourlyUsage(ctx, auth.Scope{Kind: auth.KindAdmin}, c.Tenant, from, asOf)
	if err != nil {
		return CostResult{}, err
	}
	// The configured book and the stored usage are the server's: pricing
	// refusing them is no fault of the caller's (fault.Internal).
	book, contract, err := s.pricing.Pricing(c)
	if err != nil {
		return CostResult{}, fault.Internal(err)
	}
	fc, err := insights.ForecastCost(insights.CostForecastInput{Tenant: c.Tenant, Pricing: insights.TenantPricing{Book: book, Contract: contract},
		PeriodStart: p.Start.In(loc), PeriodEnd: p.End.In(loc), AsOf: asOf, Usage: usage, Weeks: insights.DefaultForecastWeeks})
	if err != nil {
		return CostResult{}, fault.Internal(err)
	}
	cur := book.Currency()
	return CostResult{Tenant: c.Tenant, Month: month, TimeZone: loc.String(), Currency: cur.Code, BookVersion: book.Version(), MinorUnits: cur.MinorUnits,
		Start: p.Start, End: p.End, Cost: fc}, nil
}

// HourlyUsage is the tenant's usage per hour and SKU in [from, to), in
// price-book units: rollups for closed hours, raw samples after them.
func (s *Service) HourlyUsage(ctx context.Context, scope auth.Scope, tenant string, from, to time.Time) ([]pricing.Usage, error) {
	state, err := s.RollupState(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.read(ctx, Query{From: from, To: to, GroupBy: []Dimension{DimSKU},
		Bucket: BucketHour, Tenant: tenant, Scope: scope}, state, false)
	if err != nil {
		return nil, err
	}
	var out []pricing.Usage
	for _, r := range rows {
		out = append(out, pricing.UsageOf(r.Bucket, r.SKU, r.Values)...)
	}
	return out, nil
}

// Pricing is the customer's book and contract, parsed once and again only
// when a file changes (the quota snapshot prices spend with it).
func (s *Service) Pricing(c billing.Customer) (*pricing.Book, *pricing.Contract, error) {
	return s.pricing.Pricing(c)
}

// Tenants lists the configured customers the scope may see.
func (s *Service) Tenants(ctx context.Context, scope auth.Scope) ([]TenantInfo, error) {
	var out []TenantInfo
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
		t := TenantInfo{Tenant: c.Tenant, Department: c.Department, Name: c.Name, Currency: c.Currency, TimeZone: zone,
			BookVersion: book.Version()}
		if contract != nil {
			t.Contract = contractInfo(contract)
		}
		out = append(out, t)
	}
	return out, nil
}

func contractInfo(k *pricing.Contract) *ContractInfo {
	when := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	ci := &ContractInfo{Start: when(k.Start), End: when(k.End)}
	if k.MinimumMonthly != nil {
		ci.MinimumMonthly = k.MinimumMonthly.String()
	}
	for _, r := range k.Reservations {
		ri := ReservationInfo{SKU: r.SKU, Instances: r.Instances, Start: when(r.Start), End: when(r.End)}
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
