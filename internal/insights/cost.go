package insights

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// TenantPricing is how one tenant is priced: its price book and, when it
// has one, its contract (reservations are take-or-pay, so GPU-hours they
// cover cost nothing extra and save nothing when given up).
type TenantPricing struct {
	Book     *pricing.Book
	Contract *pricing.Contract
}

// Validate checks a book is given and the contract is valid.
func (tp TenantPricing) Validate() error {
	var errs []error
	if tp.Book == nil {
		errs = append(errs, errors.New("book is required"))
	}
	if tp.Contract != nil {
		if err := tp.Contract.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("contract: %w", err))
		}
	}
	return errors.Join(errs...)
}

func validatePricing(tps map[string]TenantPricing) error {
	names := make([]string, 0, len(tps))
	for n := range tps {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, n := range names {
		if err := tps[n].Validate(); err != nil {
			errs = append(errs, fmt.Errorf("pricing[%s]: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// Money is an amount in a currency, rounded once to its minor unit with
// the book's rounding mode.
type Money struct {
	Currency string          `json:"currency"`
	Amount   decimal.Decimal `json:"amount"`
}

const microsPerHour = 3_600_000_000

// GPUHours converts GPU-microseconds to GPU-hours, exact to 18 places (half
// up), as the store converts them for pricing.
func GPUHours(micros int64) decimal.Decimal {
	return decimal.NewFromInt(micros).DivRound(decimal.NewFromInt(microsPerHour), 18)
}

// hourKey is one (hour, SKU) cell of gpu_hours.
type hourKey struct {
	hour int64 // Unix seconds of the UTC hour
	sku  string
}

// gpuHours accumulates GPU-microseconds per hour and SKU.
type gpuHours map[hourKey]int64

func (g gpuHours) add(t time.Time, sku string, micros int64) {
	if micros == 0 {
		return
	}
	g[hourKey{t.Truncate(time.Hour).Unix(), sku}] += micros
}

// usage turns the cells the book prices into pricing rows, in a stable
// order, and lists the SKUs it left out.
func (g gpuHours) usage(b *pricing.Book) (rows []pricing.Usage, unpriced []string) {
	keys := make([]hourKey, 0, len(g))
	for k, v := range g {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].hour != keys[j].hour {
			return keys[i].hour < keys[j].hour
		}
		return keys[i].sku < keys[j].sku
	})
	skip := map[string]bool{}
	for _, k := range keys {
		if !b.Prices(k.sku, pricing.GPUHours) {
			skip[k.sku] = true
			continue
		}
		rows = append(rows, pricing.Usage{Hour: time.Unix(k.hour, 0).UTC(), SKU: k.sku, Meter: pricing.GPUHours, Quantity: GPUHours(g[k])})
	}
	for s := range skip {
		unpriced = append(unpriced, s)
	}
	sort.Strings(unpriced)
	return rows, unpriced
}

// exactTotal prices rows and returns the sum of the lines' exact amounts
// (before rounding to the minor unit).
func exactTotal(tenant string, tp TenantPricing, from, to time.Time, rows []pricing.Usage) (decimal.Decimal, error) {
	res, err := pricing.Price(pricing.Input{Tenant: tenant, Start: from, End: to, Usage: rows, Contract: tp.Contract, Book: tp.Book})
	if err != nil {
		return decimal.Decimal{}, err
	}
	sum := decimal.Zero
	for _, l := range res.Lines {
		sum = sum.Add(l.Amount)
	}
	return sum, nil
}

// saving is what the tenant would not have paid for gpu_hours had it used
// counterfactual instead of actual over [from, to): the difference of the
// two priced periods, so tiers, reservations and minimum commitments all
// count as on the invoice. Rounded once to the currency's minor unit.
// unpriced lists the SKUs of either side the book does not price.
func saving(tenant string, tp TenantPricing, from, to time.Time, actual, counterfactual gpuHours) (Money, []string, error) {
	a, ua := actual.usage(tp.Book)
	c, uc := counterfactual.usage(tp.Book)
	ta, err := exactTotal(tenant, tp, from, to, a)
	if err != nil {
		return Money{}, nil, fmt.Errorf("price %s: %w", tenant, err)
	}
	tc, err := exactTotal(tenant, tp, from, to, c)
	if err != nil {
		return Money{}, nil, fmt.Errorf("price %s: %w", tenant, err)
	}
	cur := tp.Book.Currency()
	unpriced := append(ua, uc...)
	sort.Strings(unpriced)
	return Money{Currency: cur.Code, Amount: cur.Round(ta.Sub(tc))}, dedup(unpriced), nil
}

func dedup(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// addMoney sums amounts per currency, in currency order.
func addMoney(sums []Money, m Money) []Money {
	for i := range sums {
		if sums[i].Currency == m.Currency {
			sums[i].Amount = sums[i].Amount.Add(m.Amount)
			return sums
		}
	}
	sums = append(sums, m)
	sort.Slice(sums, func(i, j int) bool { return sums[i].Currency < sums[j].Currency })
	return sums
}

// DailySpend is a tenant's priced spend per calendar day of [from, to) in
// from's location (the tenant's billing time zone): each day's hourly
// usage rows priced on their own by the engine invoices use, rounded once
// to the currency. Days without rows are absent (zero), as a Series reads
// them; rows outside [from, to) are ignored. from and to must be
// midnights in from's location.
func DailySpend(tenant string, tp TenantPricing, from, to time.Time, usage []pricing.Usage) (Series, error) {
	s := Series{Tenant: tenant, Meter: "spend", Step: Daily, From: from, To: to}
	if err := s.Validate(); err != nil {
		return Series{}, fmt.Errorf("daily spend of %s: %w", tenant, err)
	}
	if err := tp.Validate(); err != nil {
		return Series{}, fmt.Errorf("daily spend of %s: %w", tenant, err)
	}
	days := map[int][]pricing.Usage{}
	for _, u := range usage {
		if u.Hour.Before(from) || !u.Hour.Before(to) {
			continue
		}
		i, _ := s.index(s.dayStart(u.Hour))
		days[i] = append(days[i], u)
	}
	idx := make([]int, 0, len(days))
	for i := range days {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		res, err := pricing.Price(pricing.Input{Tenant: tenant, Start: s.at(i), End: s.at(i + 1), Usage: days[i], Contract: tp.Contract, Book: tp.Book})
		if err != nil {
			return Series{}, fmt.Errorf("daily spend of %s on %s: %w", tenant, s.at(i).Format(time.DateOnly), err)
		}
		s.Points = append(s.Points, Point{At: s.at(i), Value: res.Total})
	}
	return s, nil
}

// dayStart is the midnight, in the series' location, of the day holding t.
func (s Series) dayStart(t time.Time) time.Time {
	y, m, d := t.In(s.From.Location()).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, s.From.Location())
}

// DailyUsage is a tenant's meter summed per calendar day of [from, to) in
// from's location, from its hourly usage rows (every SKU), as a Series for
// ForecastPeriod or Detect. Days without rows are absent (zero); rows
// outside [from, to) or of other meters are ignored. from and to must be
// midnights in from's location.
func DailyUsage(tenant string, meter pricing.Meter, from, to time.Time, usage []pricing.Usage) (Series, error) {
	s := Series{Tenant: tenant, Meter: string(meter), Step: Daily, From: from, To: to}
	if err := s.Validate(); err != nil {
		return Series{}, fmt.Errorf("daily %s of %s: %w", meter, tenant, err)
	}
	days := map[int]decimal.Decimal{}
	for _, u := range usage {
		if u.Meter != meter || u.Hour.Before(from) || !u.Hour.Before(to) {
			continue
		}
		i, _ := s.index(s.dayStart(u.Hour))
		days[i] = days[i].Add(u.Quantity)
	}
	idx := make([]int, 0, len(days))
	for i := range days {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		s.Points = append(s.Points, Point{At: s.at(i), Value: days[i]})
	}
	return s, nil
}
