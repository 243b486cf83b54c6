package insights

import (
	"errors"
	"fmt"
	"maps"
	"slices"
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
	names := slices.Sorted(maps.Keys(tps))
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
	return rows, slices.Sorted(maps.Keys(skip))
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
// midnights in from's location. A day priced alone restarts tiers and
// has no reservation fee when it has no rows, so the days never add up to
// a month's cost: ForecastCost prices months.
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
	for _, i := range slices.Sorted(maps.Keys(days)) {
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
	for _, i := range slices.Sorted(maps.Keys(days)) {
		s.Points = append(s.Points, Point{At: s.at(i), Value: days[i]})
	}
	return s, nil
}

// ForecastMethod says how a cost forecast projected the usage still to
// come.
type ForecastMethod string

const (
	// MethodActual: the period is over; nothing is projected.
	MethodActual ForecastMethod = "actual"
	// MethodTrend: each SKU and meter's hourly usage by trend and weekly
	// season (Fit), fitted to the tenant's history.
	MethodTrend ForecastMethod = "trend"
	// MethodRunRate: with under two weeks of history no season can be
	// fitted, so each SKU and meter carries on at its hourly average of
	// the period so far.
	MethodRunRate ForecastMethod = "run_rate"
)

// maxCostDays bounds a cost forecast's period: it prices a point per day.
const maxCostDays = 366

// CostForecastInput is everything ForecastCost needs.
type CostForecastInput struct {
	Tenant  string
	Pricing TenantPricing
	// PeriodStart and PeriodEnd bound the billing period, whole UTC hours
	// (a calendar month in the tenant's zone); PeriodStart's location is
	// that zone, where calendar months (fees, commitments) and the path's
	// days are counted, as the invoice counts them.
	PeriodStart, PeriodEnd time.Time
	// AsOf is the end of the actual usage, a whole hour in
	// (PeriodStart, PeriodEnd]: PeriodEnd once the period is over.
	AsOf time.Time
	// Usage is the tenant's hourly rows from Weeks weeks before
	// PeriodStart to AsOf (rows outside are ignored), as the invoice reads
	// them: every SKU and meter.
	Usage []pricing.Usage
	// Weeks of history a trend fits (2..52), DefaultForecastWeeks usually.
	Weeks int
}

// Validate reports every problem of the input.
func (in CostForecastInput) Validate() error {
	var errs []error
	if err := in.Pricing.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("pricing: %w", err))
	}
	if in.Weeks < 2 || in.Weeks > 52 {
		errs = append(errs, fmt.Errorf("weeks %d is not within 2..52", in.Weeks))
	}
	hour := func(t time.Time) bool { return !t.IsZero() && t.Equal(t.Truncate(time.Hour)) }
	switch {
	case !hour(in.PeriodStart) || !hour(in.PeriodEnd):
		errs = append(errs, errors.New("period: start and end must be whole hours"))
	case !in.PeriodStart.Before(in.PeriodEnd):
		errs = append(errs, errors.New("period: start must be before end"))
	case in.PeriodEnd.Sub(in.PeriodStart) > maxCostDays*Daily:
		errs = append(errs, fmt.Errorf("period: longer than %d days", maxCostDays))
	case !hour(in.AsOf) || !in.AsOf.After(in.PeriodStart) || in.AsOf.After(in.PeriodEnd):
		errs = append(errs, fmt.Errorf("as of %s: want a whole hour in (%s, %s]", in.AsOf.UTC().Format(time.RFC3339),
			in.PeriodStart.UTC().Format(time.RFC3339), in.PeriodEnd.UTC().Format(time.RFC3339)))
	}
	return errors.Join(errs...)
}

// UsageForecast is one SKU and meter's quantity over the period, in the
// book's unit: Actual before AsOf, Projected after; Low and High are
// Total ∓ 2 × Spread × √(hours projected), Low never below Actual.
type UsageForecast struct {
	SKU       string          `json:"sku"`
	Meter     pricing.Meter   `json:"meter"`
	Actual    decimal.Decimal `json:"actual"`
	Projected decimal.Decimal `json:"projected"`
	Total     decimal.Decimal `json:"total"`
	Low       decimal.Decimal `json:"low"`
	High      decimal.Decimal `json:"high"`
}

// CostForecast is a period's cost so far and at its end, both priced by
// the engine, book and contract of the invoice, before tax.
type CostForecast struct {
	Tenant      string         `json:"tenant"`
	PeriodStart time.Time      `json:"period_start"`
	PeriodEnd   time.Time      `json:"period_end"`
	AsOf        time.Time      `json:"as_of"`
	Method      ForecastMethod `json:"method"`
	// HistoryFrom and Weeks are the history a trend fitted (MethodTrend
	// only): the last Weeks weeks before AsOf, from HistoryFrom on.
	HistoryFrom time.Time `json:"history_from,omitzero"`
	Weeks       int       `json:"weeks,omitempty"`
	// SoFar prices [PeriodStart, AsOf): reservations and a commitment
	// prorated to AsOf. Forecast prices the whole period's usage, actual
	// then projected, as its invoice will; once the period is over it is
	// the invoice's priced lines (its subtotal, corrections of earlier
	// periods aside).
	SoFar    pricing.Result `json:"-"`
	Forecast pricing.Result `json:"-"`
	// Low and High price every SKU and meter at the low (high) edge of its
	// band at once; Low ≤ Forecast.Total ≤ High.
	Low  decimal.Decimal `json:"low"`
	High decimal.Decimal `json:"high"`
	// Path is the running cost per day of the period in PeriodStart's
	// location: each point prices [PeriodStart, end of the day) like
	// SoFar, with the projected usage of the day's hours after AsOf (and
	// its band, widening as the projection goes on). The last point is
	// Forecast.Total, Low and High; a point ending at AsOf is SoFar.Total.
	Path []PathPoint `json:"path"`
	// Usage is the quantity forecast of each SKU and meter, in order.
	Usage []UsageForecast `json:"usage"`
}

// usageKey is one SKU and meter.
type usageKey struct {
	sku   string
	meter pricing.Meter
}

// projection is one SKU and meter's usage after AsOf: a value per hour
// and the spread of its noise per hour.
type projection struct {
	key    usageKey
	hours  []decimal.Decimal // from AsOf, one per hour to PeriodEnd
	spread decimal.Decimal
}

// ForecastCost forecasts the period's usage per SKU and meter (by trend
// and weekly season, hour by hour, once two weeks of history exist; at
// the period's hourly average so far before), adds it to the actual usage
// and prices the whole by the engine, book and contract the invoice uses,
// so reservations stay take-or-pay, tiers count over the period and a
// minimum commitment is trued up. The path and band are priced the same
// way; nothing is priced a day on its own.
func ForecastCost(in CostForecastInput) (CostForecast, error) {
	if err := in.Validate(); err != nil {
		return CostForecast{}, fmt.Errorf("cost forecast of %s: %w", in.Tenant, err)
	}
	loc := in.PeriodStart.Location()
	start, end, asOf := in.PeriodStart, in.PeriodEnd, in.AsOf.In(loc)
	out := CostForecast{Tenant: in.Tenant, PeriodStart: start, PeriodEnd: end, AsOf: asOf, Method: MethodActual}
	price := func(to time.Time, rows []pricing.Usage) (pricing.Result, error) {
		res, err := pricing.Price(pricing.Input{Tenant: in.Tenant, Start: start, End: to.In(loc), Usage: rows,
			Book: in.Pricing.Book, Contract: in.Pricing.Contract})
		if err != nil {
			return pricing.Result{}, fmt.Errorf("cost forecast of %s: price [%s, %s): %w", in.Tenant,
				start.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), err)
		}
		return res, nil
	}
	// The actual rows, in hour order so a prefix is a period's rows.
	var actual []pricing.Usage
	for _, u := range in.Usage {
		if !u.Hour.Before(start) && u.Hour.Before(asOf) {
			actual = append(actual, u)
		}
	}
	sort.SliceStable(actual, func(i, j int) bool { return actual[i].Hour.Before(actual[j].Hour) })
	var err error
	if out.SoFar, err = price(asOf, actual); err != nil {
		return CostForecast{}, err
	}
	projs, err := in.project(&out)
	if err != nil {
		return CostForecast{}, err
	}
	// Projected rows hour by hour; offs[h] is how many come before hour h.
	n := int(end.Sub(asOf) / time.Hour)
	var mid []pricing.Usage
	offs := make([]int, n+1)
	for h := 0; h < n; h++ {
		offs[h] = len(mid)
		for _, p := range projs {
			if v := p.hours[h]; v.Sign() > 0 {
				mid = append(mid, pricing.Usage{Hour: asOf.Add(time.Duration(h) * time.Hour).UTC(), SKU: p.key.sku, Meter: p.key.meter, Quantity: v})
			}
		}
	}
	offs[n] = len(mid)
	// shifted is the projection through hour k with each hour moved by
	// sign × its key's band over k hours spread evenly, floored at zero.
	shifted := func(k int, sign int64) []pricing.Usage {
		rows := append([]pricing.Usage(nil), actual...)
		shift := make([]decimal.Decimal, len(projs))
		for i, p := range projs {
			shift[i] = band(p.spread, k).DivRound(decimal.NewFromInt(int64(k)), amountPlaces).Mul(decimal.NewFromInt(sign))
		}
		for h := 0; h < k; h++ {
			for i, p := range projs {
				if v := decimal.Max(decimal.Zero, p.hours[h].Add(shift[i])); v.Sign() > 0 {
					rows = append(rows, pricing.Usage{Hour: asOf.Add(time.Duration(h) * time.Hour).UTC(), SKU: p.key.sku, Meter: p.key.meter, Quantity: v})
				}
			}
		}
		return rows
	}
	noisy := false
	for _, p := range projs {
		noisy = noisy || p.spread.Sign() > 0
	}
	for day := start; day.Before(end); day = day.AddDate(0, 0, 1) {
		to := day.AddDate(0, 0, 1)
		if to.After(end) {
			to = end
		}
		pt := PathPoint{At: day, Projected: to.After(asOf)}
		switch {
		case to.Equal(asOf):
			pt.Total = out.SoFar.Total
		case !to.After(asOf):
			k := sort.Search(len(actual), func(i int) bool { return !actual[i].Hour.Before(to) })
			res, err := price(to, actual[:k])
			if err != nil {
				return CostForecast{}, err
			}
			pt.Total = res.Total
		default:
			k := int(to.Sub(asOf) / time.Hour)
			res, err := price(to, append(append([]pricing.Usage(nil), actual...), mid[:offs[k]]...))
			if err != nil {
				return CostForecast{}, err
			}
			pt.Total, pt.Low, pt.High = res.Total, res.Total, res.Total
			if noisy {
				lo, err := price(to, shifted(k, -1))
				if err != nil {
					return CostForecast{}, err
				}
				hi, err := price(to, shifted(k, 1))
				if err != nil {
					return CostForecast{}, err
				}
				// Prices are not monotone in usage (volume tiers), so the
				// edges are ordered around the total.
				pt.Low = decimal.Min(lo.Total, hi.Total, res.Total)
				pt.High = decimal.Max(lo.Total, hi.Total, res.Total)
			}
			if to.Equal(end) {
				out.Forecast = res
			}
		}
		if !pt.Projected {
			pt.Low, pt.High = pt.Total, pt.Total
		}
		out.Path = append(out.Path, pt)
	}
	if !asOf.Before(end) {
		out.Forecast = out.SoFar
	}
	last := out.Path[len(out.Path)-1]
	out.Low, out.High = last.Low, last.High
	out.Usage = usageForecasts(actual, projs, n)
	return out, nil
}

// project sets out's method and history and returns the projection of
// every SKU and meter the book prices, in key order; none once the period
// is over.
func (in CostForecastInput) project(out *CostForecast) ([]projection, error) {
	start, end, asOf := in.PeriodStart, in.PeriodEnd, in.AsOf
	if !asOf.Before(end) {
		return nil, nil
	}
	n := int(end.Sub(asOf) / time.Hour)
	// History starts at the tenant's first usage (weeks before it are
	// unknown, and as zeros would fit a steep trend into a new tenant),
	// but no later than the period: its hours before the first usage are
	// hours without use.
	from := start.Add(-time.Duration(in.Weeks) * 7 * Daily).UTC()
	first := time.Time{}
	sums := map[usageKey]map[int]decimal.Decimal{}
	for _, u := range in.Usage {
		if u.Hour.Before(from) || !u.Hour.Before(asOf) || u.Quantity.Sign() <= 0 || !in.Pricing.Book.Prices(u.SKU, u.Meter) {
			continue
		}
		if first.IsZero() || u.Hour.Before(first) {
			first = u.Hour
		}
	}
	switch {
	case first.IsZero():
		from = start.UTC() // no history: nothing to fit
	case first.After(from):
		from = first.UTC().Truncate(time.Hour)
	}
	if from.After(start) {
		from = start.UTC()
	}
	hist := int(asOf.Sub(from) / time.Hour)
	weeks := min(in.Weeks, hist/168)
	elapsed := decimal.NewFromInt(int64(asOf.Sub(start) / time.Hour))
	for _, u := range in.Usage {
		if u.Hour.Before(from) || !u.Hour.Before(asOf) || !in.Pricing.Book.Prices(u.SKU, u.Meter) {
			continue
		}
		if weeks < 2 && u.Hour.Before(start) {
			continue // a run rate reads the period only
		}
		k := usageKey{u.SKU, u.Meter}
		if sums[k] == nil {
			sums[k] = map[int]decimal.Decimal{}
		}
		i := int(u.Hour.Sub(from) / time.Hour)
		sums[k][i] = sums[k][i].Add(u.Quantity)
	}
	keys := slices.Collect(maps.Keys(sums))
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].sku != keys[j].sku {
			return keys[i].sku < keys[j].sku
		}
		return keys[i].meter < keys[j].meter
	})
	out.Method = MethodRunRate
	if weeks >= 2 {
		out.Method, out.HistoryFrom, out.Weeks = MethodTrend, asOf.Add(-time.Duration(weeks)*7*Daily).In(start.Location()), weeks
	}
	projs := make([]projection, 0, len(keys))
	for _, k := range keys {
		p := projection{key: k, hours: make([]decimal.Decimal, n), spread: decimal.Zero}
		if out.Method == MethodRunRate {
			sum := decimal.Zero
			for _, v := range sums[k] {
				sum = sum.Add(v)
			}
			rate := sum.DivRound(elapsed, amountPlaces)
			for h := range p.hours {
				p.hours[h] = rate
			}
			projs = append(projs, p)
			continue
		}
		s := Series{Tenant: in.Tenant, Meter: string(k.meter), SKU: k.sku, Step: Hourly, From: from, To: asOf.UTC()}
		for i, v := range sums[k] {
			s.Points = append(s.Points, Point{At: s.at(i), Value: v})
		}
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("cost forecast of %s: %s %s: %w", in.Tenant, k.sku, k.meter, err)
		}
		f, err := fit(s, weeks)
		if err != nil {
			return nil, fmt.Errorf("cost forecast of %s: %s %s: %w", in.Tenant, k.sku, k.meter, err)
		}
		for h := range p.hours {
			p.hours[h] = f.at(hist + h - f.first).Round(amountPlaces)
		}
		p.spread = decimal.Max(f.Spread, dayNoise(s.values()[f.first:], f))
		projs = append(projs, p)
	}
	return projs, nil
}

// usageForecasts sums the actual rows and the projections per SKU and
// meter, with the band of n projected hours.
func usageForecasts(actual []pricing.Usage, projs []projection, n int) []UsageForecast {
	byKey := map[usageKey]*UsageForecast{}
	get := func(k usageKey) *UsageForecast {
		if f, ok := byKey[k]; ok {
			return f
		}
		f := &UsageForecast{SKU: k.sku, Meter: k.meter, Actual: decimal.Zero, Projected: decimal.Zero}
		byKey[k] = f
		return f
	}
	for _, u := range actual {
		f := get(usageKey{u.SKU, u.Meter})
		f.Actual = f.Actual.Add(u.Quantity)
	}
	bands := map[usageKey]decimal.Decimal{}
	for _, p := range projs {
		f := get(p.key)
		for _, v := range p.hours {
			f.Projected = f.Projected.Add(v)
		}
		bands[p.key] = band(p.spread, n)
	}
	out := make([]UsageForecast, 0, len(byKey))
	for k, f := range byKey {
		f.Total = f.Actual.Add(f.Projected)
		b := bands[k]
		if b.IsZero() {
			b = decimal.Zero
		}
		f.Low, f.High = decimal.Max(f.Actual, f.Total.Sub(b)), f.Total.Add(b)
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].SKU != out[j].SKU {
			return out[i].SKU < out[j].SKU
		}
		return out[i].Meter < out[j].Meter
	})
	return out
}

// dayNoise is the hourly spread that makes the band of a day's 24 hours
// as wide as the fit's residuals summed over each day of the history
// vary (1.4826 × their MAD, over √24). Usage that is high or low for a
// whole day (a job that runs all day) has residuals that do not cancel
// within the day, so the hourly Spread alone would draw a band far too
// narrow; for independent hours both agree.
func dayNoise(y []decimal.Decimal, f Fit) decimal.Decimal {
	var sums []decimal.Decimal
	for d := 0; d+24 <= len(y); d += 24 {
		sum := decimal.Zero
		for t := d; t < d+24; t++ {
			sum = sum.Add(y[t].Sub(f.at(t)))
		}
		sums = append(sums, sum)
	}
	if len(sums) < 2 {
		return decimal.Zero
	}
	return mad(sums, median(sums)).Mul(madToSigma).DivRound(sqrtSteps(24), divPlaces)
}
