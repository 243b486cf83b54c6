package usage

import (
	"context"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
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
	asOf := s.now().UTC().Truncate(time.Hour)
	if to.Before(asOf) {
		asOf = to.UTC().Truncate(time.Hour)
	}
	ft, err := s.fleetTenant(c, from, asOf)
	if err != nil || ft == nil {
		return nil, asOf, err // nothing has begun yet
	}
	// Each month read on its own (the tenant-month blocks answer it), in
	// month order, as the fleet's pricing takes them.
	var usage []pricing.Usage
	for p := ft.first; p.Start.Before(asOf); {
		rows, err := s.HourlyUsage(ctx, admin, tenant, p.Start, minTime(p.End, asOf))
		if err != nil {
			return nil, time.Time{}, err
		}
		usage = append(usage, rows...)
		if p, err = billing.MonthlyPeriod(p.End.In(ft.loc).Format("2006-01"), ft.loc); err != nil {
			return nil, time.Time{}, err
		}
	}
	out, err := ft.charges(nil, usage, asOf)
	return out, asOf, err
}
