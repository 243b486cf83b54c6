package usage

import (
	"context"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/pricing"
)

// Charges are a customer's usage from from up to to (or now, if earlier)
// as credits burn it:
// each of its months (in its zone) from the one holding from, priced as
// its invoice prices it (the priced so far of Cost: rollups, then raw
// samples not yet rolled up), spread into hourly charges
// (credits.ChargesOf), and the hour they run to. Each month's usage is
// read once; nothing is forecast.
func (s *Service) Charges(ctx context.Context, tenant string, from, to time.Time) ([]credits.Charge, time.Time, error) {
	admin := auth.Scope{Kind: auth.KindAdmin}
	c, err := s.customer(admin, tenant)
	if err != nil {
		return nil, time.Time{}, err
	}
	loc, err := c.Location()
	if err != nil {
		return nil, time.Time{}, err
	}
	asOf := s.now().UTC().Truncate(time.Hour)
	if to.Before(asOf) {
		asOf = to.UTC().Truncate(time.Hour)
	}
	first, err := billing.MonthlyPeriod(from.In(loc).Format("2006-01"), loc)
	if err != nil || !first.Start.Before(asOf) {
		return nil, asOf, err // nothing has begun yet
	}
	book, contract, err := s.pricing.Pricing(c)
	if err != nil {
		return nil, time.Time{}, fault.Internal(err)
	}
	var out []credits.Charge
	for p := first; p.Start.Before(asOf); {
		end := p.End
		if asOf.Before(end) {
			end = asOf
		}
		rows, err := s.HourlyUsage(ctx, admin, tenant, p.Start, end)
		if err != nil {
			return nil, time.Time{}, err
		}
		priced, err := pricing.Price(pricing.Input{Tenant: tenant, Start: p.Start.In(loc), End: end.In(loc), Usage: rows, Book: book, Contract: contract})
		if err != nil {
			return nil, time.Time{}, fault.Internal(err)
		}
		out = append(out, credits.ChargesOf(priced, rows, c.TaxRate)...)
		if p, err = billing.MonthlyPeriod(p.End.In(loc).Format("2006-01"), loc); err != nil {
			return nil, time.Time{}, err
		}
	}
	return out, asOf, nil
}
