package billing

import (
	"fmt"
	"sort"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// MonthToDate is a customer's month so far and where it is heading.
type MonthToDate struct {
	Period Period
	AsOf   time.Time // usage up to here; the period's end once it is over
	// SoFar prices [Start, AsOf): usage so far, reservations and the
	// commitment prorated to AsOf. Forecast prices the whole month with
	// each SKU and meter's hourly average so far carried to the end.
	SoFar, Forecast pricing.Result
}

// PriceMonthToDate prices usage (the tenant's hourly rows of p up to
// asOf) so far, and forecasts the month by carrying on at the average
// hourly rate of each SKU and meter. A month that is over is priced as
// its invoice prices it: SoFar and Forecast are the same.
func PriceMonthToDate(tenant string, p Period, loc *time.Location, usage []pricing.Usage, book *pricing.Book,
	contract *pricing.Contract, asOf time.Time) (MonthToDate, error) {
	asOf = asOf.UTC().Truncate(time.Hour)
	if asOf.After(p.End) {
		asOf = p.End
	}
	if !asOf.After(p.Start) {
		return MonthToDate{}, fmt.Errorf("month %s starts %s: nothing to price before it", p.Label, p.Start.UTC().Format(time.RFC3339))
	}
	so := make([]pricing.Usage, 0, len(usage))
	for _, u := range usage {
		if !u.Hour.Before(p.Start) && u.Hour.Before(asOf) {
			so = append(so, u)
		}
	}
	res := MonthToDate{Period: p, AsOf: asOf}
	var err error
	if res.SoFar, err = pricing.Price(pricing.Input{Tenant: tenant, Start: p.Start.In(loc), End: asOf.In(loc), Usage: so,
		Book: book, Contract: contract}); err != nil {
		return MonthToDate{}, err
	}
	full := so
	if asOf.Before(p.End) {
		elapsed := decimal.NewFromInt(int64(asOf.Sub(p.Start) / time.Hour))
		remaining := decimal.NewFromInt(int64(p.End.Sub(asOf) / time.Hour))
		type key struct {
			sku   string
			meter pricing.Meter
		}
		sums := map[key]decimal.Decimal{}
		for _, u := range so {
			k := key{u.SKU, u.Meter}
			sums[k] = sums[k].Add(u.Quantity)
		}
		keys := make([]key, 0, len(sums))
		for k := range sums {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].sku != keys[j].sku {
				return keys[i].sku < keys[j].sku
			}
			return keys[i].meter < keys[j].meter
		})
		full = append([]pricing.Usage(nil), so...)
		for _, k := range keys {
			rest := sums[k].Mul(remaining).DivRound(elapsed, pricing.StoragePlaces)
			if rest.IsZero() {
				continue
			}
			rows, err := pricing.PeriodQuantity{SKU: k.sku, Meter: k.meter, Quantity: rest}.Spread(asOf, p.End)
			if err != nil {
				return MonthToDate{}, fmt.Errorf("forecast %s %s: %w", k.sku, k.meter, err)
			}
			full = append(full, rows...)
		}
	}
	if res.Forecast, err = pricing.Price(pricing.Input{Tenant: tenant, Start: p.Start.In(loc), End: p.End.In(loc), Usage: full,
		Book: book, Contract: contract}); err != nil {
		return MonthToDate{}, err
	}
	return res, nil
}

// CostByMeter sums a result's rounded line amounts per meter; lines that
// price no meter (a commitment true-up) go under "".
func CostByMeter(r pricing.Result) map[pricing.Meter]decimal.Decimal {
	out := map[pricing.Meter]decimal.Decimal{}
	for _, l := range r.Lines {
		out[l.Meter] = out[l.Meter].Add(l.AmountRounded)
	}
	return out
}
