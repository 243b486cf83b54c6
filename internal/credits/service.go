package credits

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// Ledger keeps the grant rows (the store).
type Ledger interface {
	SaveGrant(ctx context.Context, g Grant) error
	Grants(ctx context.Context, tenant string) ([]Grant, error)
	Grant(ctx context.Context, id string) (Grant, error)
	VoidGrant(ctx context.Context, id string, at time.Time, reason string) (Grant, error)
}

// Charger prices a customer's usage into hourly charges, from the month
// holding from up to to (or now, if earlier), and says the hour they run
// to (the usage domain).
type Charger interface {
	Charges(ctx context.Context, tenant string, from, to time.Time) ([]Charge, time.Time, error)
}

// Customer is what grants are checked against and burnt for: a billing
// customer's tenant, currency, zone, tax and credit plan.
type Customer struct {
	Tenant   string
	Currency string
	Location *time.Location // nil: UTC
	TaxRate  decimal.Decimal
	Plan     Plan
}

func (c Customer) location() *time.Location {
	if c.Location == nil {
		return time.UTC
	}
	return c.Location
}

// Service is the credit domain: the grant ledger with its recurring
// allowances, and balances burnt down against priced usage.
type Service struct {
	ledger    Ledger
	charges   Charger
	customers []Customer
	now       func() time.Time
}

// NewService builds the service over the ledger, the charges and the
// billing customers.
func NewService(ledger Ledger, charges Charger, customers []Customer, now func() time.Time) *Service {
	return &Service{ledger: ledger, charges: charges, customers: customers, now: now}
}

// Customer finds a billing customer; a fault.NotFound when there is none.
func (s *Service) Customer(tenant string) (Customer, error) {
	for _, c := range s.customers {
		if c.Tenant == tenant {
			return c, nil
		}
	}
	return Customer{}, fault.NotFoundf("tenant %q: not a billing customer", tenant)
}

// Customers are the billing customers, in the config's order.
func (s *Service) Customers() []Customer { return s.customers }

// Grant validates req against the customers, fills the id and times (a
// zero EffectiveAt is now, an empty Currency of a money grant the
// customer's), and appends it to the ledger. Bad input is a validation
// error and nothing is stored.
func (s *Service) Grant(ctx context.Context, req Grant) (Grant, error) {
	now := s.now().UTC().Truncate(time.Second)
	g := req
	if c, err := s.Customer(g.Tenant); err == nil && g.Currency == "" && g.Money() {
		g.Currency = c.Currency
	}
	g.EffectiveAt = cmp.Or(g.EffectiveAt, now)
	g.CreatedAt = now
	g.ID, g.VoidedAt, g.VoidReason = "", nil, ""
	if err := g.Validate(s.customers); err != nil {
		return Grant{}, err
	}
	id, err := NewID()
	if err != nil {
		return Grant{}, err
	}
	g.ID = id
	if err := s.ledger.SaveGrant(ctx, g); err != nil {
		return Grant{}, err
	}
	return g, nil
}

// Grants lists the ledger of one customer (tenant "": all), recurring
// allowances up to this month included (stored or not yet), by tenant and
// age.
func (s *Service) Grants(ctx context.Context, tenant string) ([]Grant, error) {
	if tenant != "" {
		if _, err := s.Customer(tenant); err != nil {
			return nil, err
		}
	}
	stored, err := s.ledger.Grants(ctx, tenant)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, g := range stored {
		have[g.ID] = true
	}
	due, err := s.recurring(tenant, s.now())
	if err != nil {
		return nil, err
	}
	for _, g := range due {
		if !have[g.ID] {
			stored = append(stored, g)
		}
	}
	slices.SortStableFunc(stored, func(a, b Grant) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return stored, nil
}

// recurring are the allowances' grants up to now, of one customer or all.
func (s *Service) recurring(tenant string, now time.Time) ([]Grant, error) {
	var out []Grant
	for _, c := range s.customers {
		if tenant != "" && c.Tenant != tenant {
			continue
		}
		for _, r := range c.Plan.Recurring {
			gs, err := r.GrantsThrough(c.Tenant, c.Currency, c.location(), now)
			if err != nil {
				return nil, err
			}
			out = append(out, gs...)
		}
	}
	return out, nil
}

// Recur writes the recurring allowances' grants that are due and not yet
// in the ledger, and says how many it wrote. Their ids are stable, so
// running it again, or on two replicas, writes nothing twice.
func (s *Service) Recur(ctx context.Context) (int, error) {
	_, due, err := s.unwrittenAllowances(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, g := range due {
		if err := s.ledger.SaveGrant(ctx, g); err != nil {
			return n, fmt.Errorf("recurring grant %s of %s: %w", g.ID, g.Tenant, err)
		}
		n++
	}
	return n, nil
}

// unwrittenAllowances reads the ledger once: how many grants it stores,
// and the recurring allowances' grants due and not among them (what Recur
// writes).
func (s *Service) unwrittenAllowances(ctx context.Context) (stored int, unwritten []Grant, err error) {
	grants, err := s.ledger.Grants(ctx, "")
	if err != nil {
		return 0, nil, err
	}
	have := map[string]bool{}
	for _, g := range grants {
		have[g.ID] = true
	}
	due, err := s.recurring("", s.now())
	if err != nil {
		return 0, nil, err
	}
	for _, g := range due {
		if !have[g.ID] {
			unwritten = append(unwritten, g)
		}
	}
	return len(grants), unwritten, nil
}

// Void voids a grant from now on, keeping its record; a recurring grant
// not yet written is written first. Voiding twice keeps the first void.
func (s *Service) Void(ctx context.Context, req VoidRequest) (Grant, error) {
	if err := req.Validate(); err != nil {
		return Grant{}, err
	}
	if _, err := s.ledger.Grant(ctx, req.ID); fault.IsNotFound(err) {
		due, rerr := s.recurring("", s.now())
		if rerr != nil {
			return Grant{}, rerr
		}
		i := slices.IndexFunc(due, func(g Grant) bool { return g.ID == req.ID })
		if i < 0 {
			return Grant{}, err
		}
		if err := s.ledger.SaveGrant(ctx, due[i]); err != nil {
			return Grant{}, err
		}
	} else if err != nil {
		return Grant{}, err
	}
	return s.ledger.VoidGrant(ctx, req.ID, s.now(), req.Reason)
}

// Balance burns a customer's grants down against its priced usage up to
// now: this month's is rollups plus raw samples not yet rolled up, the
// figure of /v1/cost.
func (s *Service) Balance(ctx context.Context, tenant string) (Result, error) {
	return s.BalanceAt(ctx, tenant, s.now())
}

// BalanceAt burns a customer's grants down against its usage up to at
// (or now, if earlier): each month from its first grant's, priced as its
// invoice prices it.
func (s *Service) BalanceAt(ctx context.Context, tenant string, at time.Time) (Result, error) {
	rs, err := s.BalancesAt(ctx, tenant, at)
	if err != nil {
		return Result{}, err
	}
	return rs[0], nil
}

// BalancesAt is BalanceAt at each of several times (an invoice's period
// start and end) from one read of the grants and one pricing of the usage
// up to the latest of them: the burn-down is causal, so a burn to an
// earlier time over the same charges is the balance then.
func (s *Service) BalancesAt(ctx context.Context, tenant string, times ...time.Time) ([]Result, error) {
	grants, err := s.Grants(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]Result, len(times))
	if len(grants) == 0 {
		for i, t := range times {
			out[i] = Result{AsOf: t.UTC().Truncate(time.Hour), Uncovered: decimal.Zero}
		}
		return out, nil
	}
	// Usage before the first grant no grant could cover.
	from, latest := grants[0].EffectiveAt, time.Time{}
	for _, g := range grants {
		from = minTime(from, g.EffectiveAt)
	}
	for _, t := range times {
		if t.After(latest) {
			latest = t
		}
	}
	charges, asOf, err := s.charges.Charges(ctx, tenant, from, latest)
	if err != nil {
		return nil, err
	}
	for i, t := range times {
		if out[i], err = Burn(grants, charges, minTime(asOf, t.UTC().Truncate(time.Hour))); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
