package credits

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// Forecast is a priced forecast of a customer's current month, before tax
// (the /v1/cost forecast, insights.ForecastCost): the cost so far at AsOf
// and the running cost through the end of each day of the month.
type Forecast struct {
	AsOf  time.Time
	SoFar decimal.Decimal
	Days  []ForecastDay
}

// ForecastDay is the month's running cost through End, the end of the day
// starting at Start.
type ForecastDay struct {
	Start, End time.Time
	Total      decimal.Decimal
}

// AccountRequest asks for a customer's account. Forecast, called only
// when the customer has money left to deplete, gives the priced forecast
// the depletion date is read from; nil: no depletion date.
type AccountRequest struct {
	Tenant       string
	ExpiringDays int
	Forecast     func(ctx context.Context) (Forecast, error)
}

// MeterQuantity is what is left of a meter's included grants.
type MeterQuantity struct {
	Meter     pricing.Meter
	Remaining decimal.Decimal
}

// Day is what was left at the end of one day (or at the burn-down's time,
// for today) in the customer's zone: money across the money grants and
// each meter's included quantity.
type Day struct {
	Start, End time.Time
	Money      decimal.Decimal
	Included   []MeterQuantity
}

// Account is a customer's credit as of now: the burn-down, what is left
// in money and included quantities, the days of the month so far, the
// grants expiring soon, and when the money runs out if spend goes on as
// forecast.
type Account struct {
	Customer Customer
	Result
	HasMoney bool // a money grant has begun, used up or not
	Money    decimal.Decimal
	Included []MeterQuantity
	Daily    []Day
	Expiring []Balance
	// Depletion is the start of the day (in the customer's zone) the
	// money left reaches zero: today when it already has, the first
	// forecast day it runs out otherwise; nil when the forecast through
	// ForecastThrough never empties it, or there is no money to deplete.
	Depletion       *time.Time
	DaysLeft        *int
	ForecastThrough time.Time
}

// Account burns a customer's grants down against its usage up to now,
// once, and derives its account from that burn-down (the days from its
// draws) and, for the depletion date, from a second burn-down that adds
// the forecast's spend after now.
func (s *Service) Account(ctx context.Context, req AccountRequest) (Account, error) {
	c, err := s.Customer(req.Tenant)
	if err != nil {
		return Account{}, err
	}
	grants, err := s.Grants(ctx, c.Tenant)
	if err != nil {
		return Account{}, err
	}
	now := s.now()
	acc := Account{Customer: c, Result: Result{AsOf: now.UTC().Truncate(time.Hour), Uncovered: decimal.Zero}, Money: decimal.Zero}
	var charges []Charge
	if len(grants) > 0 {
		from := grants[0].EffectiveAt
		for _, g := range grants {
			from = minTime(from, g.EffectiveAt)
		}
		var asOf time.Time
		if charges, asOf, err = s.charges.Charges(ctx, c.Tenant, from, now); err != nil {
			return Account{}, err
		}
		if acc.Result, err = Burn(grants, charges, asOf); err != nil {
			return Account{}, err
		}
	}
	// What is left now: the burn-down's draws run to its AsOf (the last
	// full hour), and a grant given since counts at once.
	loc := c.location()
	acc.Money, acc.Included = RemainingAt(acc.Result, now)
	for _, g := range grants {
		acc.HasMoney = acc.HasMoney || (g.Money() && !g.EffectiveAt.After(now))
	}
	acc.Daily = DailyBalances(acc.Result, loc, now)
	acc.Expiring = Expiring(acc.Result, now, req.ExpiringDays)

	today := startOfDay(now, loc)
	switch {
	case !acc.HasMoney:
	case acc.Money.Sign() == 0:
		acc.Depletion = &today
	case req.Forecast != nil:
		fc, err := req.Forecast(ctx)
		if err != nil {
			return Account{}, err
		}
		if len(fc.Days) > 0 {
			acc.ForecastThrough = fc.Days[len(fc.Days)-1].End
		}
		day, err := depletion(grants, charges, fc, now, c.TaxRate)
		if err != nil {
			return Account{}, err
		}
		if day != nil {
			d := startOfDay(*day, loc)
			acc.Depletion = &d
		}
	}
	if acc.Depletion != nil {
		n := daysBetween(today, *acc.Depletion)
		acc.DaysLeft = &n
	}
	return acc, nil
}

// RemainingAt is what the burn-down res leaves at t (at most its AsOf,
// or any time before its next draw): money across the money grants and
// each meter's included quantity, as a burn-down to t would give them. A
// grant counts from its EffectiveAt until it expires or is voided; what
// it has then is its Granted (with what rolled into it) less its draws
// before t. The burn-down is sequential in time, so its draws before t
// are those of a burn-down to t.
func RemainingAt(res Result, t time.Time) (money decimal.Decimal, included []MeterQuantity) {
	used := map[string]decimal.Decimal{}
	for _, d := range res.Draws {
		if d.At.Before(t) {
			used[d.GrantID] = used[d.GrantID].Add(drawn(d))
		}
	}
	return remaining(res, t, used)
}

// remaining is what the grants of res have at t, used[id] of each drawn
// before t.
func remaining(res Result, t time.Time, used map[string]decimal.Decimal) (money decimal.Decimal, included []MeterQuantity) {
	money = decimal.Zero
	byMeter := map[pricing.Meter]decimal.Decimal{}
	var meters []pricing.Meter
	for _, b := range res.Balances {
		g := b.Grant
		if g.Kind == Included {
			if _, ok := byMeter[g.Meter]; !ok {
				byMeter[g.Meter] = decimal.Zero
				meters = append(meters, g.Meter)
			}
		}
		ended := (!g.ExpiresAt.IsZero() && !g.ExpiresAt.After(t)) || (g.VoidedAt != nil && !g.VoidedAt.After(t))
		if g.EffectiveAt.After(t) || ended {
			continue
		}
		left := b.Granted.Sub(used[g.ID])
		if g.Kind == Included {
			byMeter[g.Meter] = byMeter[g.Meter].Add(left)
		} else {
			money = money.Add(left)
		}
	}
	slices.Sort(meters)
	for _, m := range meters {
		included = append(included, MeterQuantity{Meter: m, Remaining: byMeter[m]})
	}
	return money, included
}

// drawn is what a draw took from its grant, in the grant's unit: an
// included grant's draws carry a quantity, a money grant's none.
func drawn(d Draw) decimal.Decimal {
	if d.Quantity.Sign() > 0 {
		return d.Quantity
	}
	return d.Amount
}

// DailyBalances are the days of the month holding now (in loc) up to
// today, each with what res leaves at its end: midnight, or now for
// today (res's draws run to its AsOf, the last full hour). One burn-down
// answers every day.
func DailyBalances(res Result, loc *time.Location, now time.Time) []Day {
	var out []Day
	first := startOfDay(now, loc)
	first = time.Date(first.Year(), first.Month(), 1, 0, 0, 0, 0, loc)
	// Burn makes its draws in time order: one pass over them serves
	// every day.
	used := map[string]decimal.Decimal{}
	next := 0
	for day := first; !day.After(now); day = day.AddDate(0, 0, 1) {
		end := day.AddDate(0, 0, 1)
		if now.Before(end) {
			end = now
		}
		for ; next < len(res.Draws) && res.Draws[next].At.Before(end); next++ {
			d := res.Draws[next]
			used[d.GrantID] = used[d.GrantID].Add(drawn(d))
		}
		money, included := remaining(res, end, used)
		out = append(out, Day{Start: day.UTC(), End: end.UTC(), Money: money, Included: included})
	}
	return out
}

// Expiring are the balances with something left whose grant expires after
// now and within days of it, soonest first.
func Expiring(res Result, now time.Time, days int) []Balance {
	until := now.AddDate(0, 0, days)
	var out []Balance
	for _, b := range res.Balances {
		g := b.Grant
		if b.Remaining.Sign() > 0 && g.VoidedAt == nil && !g.ExpiresAt.IsZero() && g.ExpiresAt.After(now) && !g.ExpiresAt.After(until) {
			out = append(out, b)
		}
	}
	slices.SortStableFunc(out, func(a, b Balance) int {
		return cmp.Or(a.Grant.ExpiresAt.Compare(b.Grant.ExpiresAt), cmp.Compare(a.Grant.ID, b.Grant.ID))
	})
	return out
}

// depletion is the start of the first forecast day at whose end the
// money left is zero, when the forecast's spend after its AsOf is burnt
// down after the actual charges: each day's spend (its running cost less
// the day before's, the first less the cost so far) is a charge of money
// at the day's start (or now, so that a grant given since the forecast's
// AsOf pays it), with the customer's tax, which prepaid credit pays too. The forecast's spend has no meter: included quantities
// left are not set against it, so the date errs early when they remain.
// Nil when the money outlasts the forecast.
func depletion(grants []Grant, charges []Charge, fc Forecast, now time.Time, taxRate decimal.Decimal) (*time.Time, error) {
	projected := slices.Clone(charges)
	prev := fc.SoFar
	var days []ForecastDay
	for _, d := range fc.Days {
		if !d.End.After(fc.AsOf) {
			continue
		}
		days = append(days, d)
		spend := d.Total.Sub(prev)
		prev = d.Total
		if spend.Sign() <= 0 {
			continue // a day that lowers the running cost (a tier) gives nothing back
		}
		at := d.Start
		if at.Before(now) {
			at = now
		}
		projected = append(projected, Charge{At: at, Amount: spend, Quantity: decimal.Zero, TaxRate: taxRate})
	}
	if len(days) == 0 {
		return nil, nil
	}
	res, err := Burn(grants, projected, days[len(days)-1].End)
	if err != nil {
		return nil, err
	}
	for _, d := range days {
		if money, _ := RemainingAt(res, d.End); money.Sign() <= 0 {
			start := d.Start
			return &start, nil
		}
	}
	return nil, nil
}

// startOfDay is the midnight in loc starting the day holding t.
func startOfDay(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), 0, 0, 0, 0, loc)
}

// daysBetween counts calendar days from a to b (midnights in one zone;
// a DST day is still one day).
func daysBetween(a, b time.Time) int {
	ua := time.Date(a.Year(), a.Month(), a.Day(), 0, 0, 0, 0, time.UTC)
	ub := time.Date(b.Year(), b.Month(), b.Day(), 0, 0, 0, 0, time.UTC)
	return int(ub.Sub(ua).Hours() / 24)
}
