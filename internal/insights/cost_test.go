package insights

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// costBook is acme's kind of book: graduated H100 tiers with burst above
// reservations, a MIG profile and energy.
const costBook = `version: cost-1
currency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}
skus:
  H100-SXM5-80GB:
    weight: 1
    meters:
      gpu_hours:
        mode: graduated
        tiers:
          - {up_to: 100, unit_price: "2.49"}
          - {unit_price: "2.29"}
        burst: {multiplier: "1.5"}
      energy_kwh: {unit_price: "0.12"}
  H100-SXM5-80GB/3g.40gb: {weight: 3/7, meters: {gpu_hours: {unit_price: "2.59"}}}
`

// costContract reserves two H100s at a rate (take-or-pay) and a MIG
// instance for a monthly fee, with a minimum commitment.
const costContract = `tenant: acme
currency: USD
start: 2026-01-01T00:00:00Z
end: 2027-01-01T00:00:00Z
minimum_commitment: {monthly_amount: "%MIN%"}
reservations:
  - {sku: H100-SXM5-80GB, gpus: 2, rate: "1.80"}
  - {sku: H100-SXM5-80GB/3g.40gb, instances: 1, monthly_fee: "900.00"}
`

func costPricing(t testing.TB, minimum string) TenantPricing {
	t.Helper()
	b, err := pricing.ParseBook([]byte(costBook))
	if err != nil {
		t.Fatal(err)
	}
	k, err := pricing.ParseContract([]byte(strings.ReplaceAll(costContract, "%MIN%", minimum)))
	if err != nil {
		t.Fatal(err)
	}
	return TenantPricing{Book: b, Contract: k}
}

// weekUsage is acme's hourly usage at UTC hour h: H100s by a weekly
// pattern (bursting above the reservation on weekday afternoons), the MIG
// instance every other hour, and energy with the H100s.
func weekUsage(h time.Time, scale decimal.Decimal) []pricing.Usage {
	slot := int(h.Unix()/3600) % 168
	gpus := decimal.NewFromInt(1)
	if day, hr := slot/24, slot%24; day < 5 && hr >= 12 && hr < 20 {
		gpus = decimal.NewFromInt(3)
	}
	gpus = gpus.Mul(scale)
	rows := []pricing.Usage{
		{Hour: h, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: gpus},
		{Hour: h, SKU: "H100-SXM5-80GB", Meter: pricing.Meter("energy_kwh"), Quantity: gpus.Mul(dec("0.7"))},
	}
	if slot%2 == 0 {
		rows = append(rows, pricing.Usage{Hour: h, SKU: "H100-SXM5-80GB/3g.40gb", Meter: pricing.GPUHours, Quantity: dec("0.428571429")})
	}
	return rows
}

func usageBetween(from, to time.Time, f func(time.Time) []pricing.Usage) []pricing.Usage {
	var out []pricing.Usage
	for h := from.UTC(); h.Before(to); h = h.Add(time.Hour) {
		out = append(out, f(h)...)
	}
	return out
}

func rowsBefore(rows []pricing.Usage, to time.Time) []pricing.Usage {
	var out []pricing.Usage
	for _, u := range rows {
		if u.Hour.Before(to) {
			out = append(out, u)
		}
	}
	return out
}

func priceMonth(t *testing.T, tp TenantPricing, start, end time.Time, rows []pricing.Usage) pricing.Result {
	t.Helper()
	res, err := pricing.Price(pricing.Input{Tenant: "acme", Start: start, End: end, Usage: rows, Book: tp.Book, Contract: tp.Contract})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkPath pins the path's shape: a point per day, priced like the
// month so far at the day's end, its last point the forecast and band.
func checkPath(t *testing.T, fc CostForecast) {
	t.Helper()
	last := fc.Path[len(fc.Path)-1]
	if !last.Total.Equal(fc.Forecast.Total) || !last.Low.Equal(fc.Low) || !last.High.Equal(fc.High) {
		t.Errorf("path ends at %s [%s, %s], the forecast is %s [%s, %s]", last.Total, last.Low, last.High, fc.Forecast.Total, fc.Low, fc.High)
	}
	for i, p := range fc.Path {
		if p.Low.GreaterThan(p.Total) || p.High.LessThan(p.Total) {
			t.Errorf("path[%d]: %s outside [%s, %s]", i, p.Total, p.Low, p.High)
		}
		if p.Projected != p.At.AddDate(0, 0, 1).After(fc.AsOf) {
			t.Errorf("path[%d] %s: projected %v with as of %s", i, p.At, p.Projected, fc.AsOf)
		}
	}
}

// TestForecastCostOfAClosedMonthIsItsInvoice: once the month is over the
// forecast, the month so far and the path's end are all the month priced
// as its invoice prices it, with the take-or-pay reservations of the days
// without usage, tiers over the month and the commitment's true-up; each
// day of the path is the month so far at its end. DailySpend, pricing
// each day with usage on its own, summed to far less (the defect).
func TestForecastCostOfAClosedMonthIsItsInvoice(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, ny) // a month with a clock change
	end := start.AddDate(0, 1, 0)
	for _, c := range []struct {
		name, minimum string
		trueUp        bool
	}{
		{"reservations and tiers, commitment met", "1000", false},
		{"commitment trued up", "9000", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tp := costPricing(t, c.minimum)
			// Usage on three days only, and some before the month.
			rows := usageBetween(start.AddDate(0, 0, 9), start.AddDate(0, 0, 12), func(h time.Time) []pricing.Usage { return weekUsage(h, decimal.NewFromInt(2)) })
			before := usageBetween(start.AddDate(0, 0, -3), start, func(h time.Time) []pricing.Usage { return weekUsage(h, decimal.NewFromInt(1)) })
			fc, err := ForecastCost(CostForecastInput{Tenant: "acme", Pricing: tp, PeriodStart: start, PeriodEnd: end, AsOf: end,
				Usage: append(before, rows...), Weeks: DefaultForecastWeeks})
			if err != nil {
				t.Fatal(err)
			}
			want := priceMonth(t, tp, start, end, rows)
			if fc.Method != MethodActual || !fc.Forecast.Total.Equal(want.Total) || !fc.SoFar.Total.Equal(want.Total) ||
				!fc.Low.Equal(want.Total) || !fc.High.Equal(want.Total) {
				t.Errorf("%s: forecast %s, so far %s, band [%s, %s]; the month priced is %s", fc.Method, fc.Forecast.Total, fc.SoFar.Total, fc.Low, fc.High, want.Total)
			}
			hasTrueUp := false
			for _, l := range fc.Forecast.Lines {
				hasTrueUp = hasTrueUp || l.Kind == pricing.KindTrueUp
			}
			if hasTrueUp != c.trueUp {
				t.Errorf("true-up line %v, want %v", hasTrueUp, c.trueUp)
			}
			if len(fc.Path) != 30 {
				t.Fatalf("%d path points, want 30", len(fc.Path))
			}
			for i, p := range fc.Path {
				dayEnd := start.AddDate(0, 0, i+1)
				if w := priceMonth(t, tp, start, dayEnd, rowsBefore(rows, dayEnd)).Total; !p.At.Equal(start.AddDate(0, 0, i)) || !p.Total.Equal(w) {
					t.Errorf("path[%d] %s: %s, the month so far at %s is %s", i, p.At, p.Total, dayEnd, w)
				}
			}
			checkPath(t, fc)
			daily, err := DailySpend("acme", tp, start, end, rows)
			if err != nil {
				t.Fatal(err)
			}
			sum := decimal.Zero
			for _, p := range daily.Points {
				sum = sum.Add(p.Value)
			}
			if sum.Equal(want.Total) {
				t.Errorf("days priced alone sum to the month's %s: the case does not show the difference", sum)
			}
		})
	}
}

// TestForecastCostPricesTheTrendsUsage: usage with a weekly season and no
// noise is recovered hour by hour, so the month-end forecast is exactly
// the true month's usage priced (burst hours above the reservation
// included), with no band; the path's point at as of is the month so far.
func TestForecastCostPricesTheTrendsUsage(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, ny)
	end := start.AddDate(0, 1, 0)
	asOf := time.Date(2026, 11, 17, 0, 0, 0, 0, ny) // a day boundary
	tp := costPricing(t, "1000")
	truth := func(h time.Time) []pricing.Usage { return weekUsage(h, decimal.NewFromInt(1)) }
	usage := usageBetween(start.AddDate(0, 0, -35), asOf, truth)
	fc, err := ForecastCost(CostForecastInput{Tenant: "acme", Pricing: tp, PeriodStart: start, PeriodEnd: end, AsOf: asOf, Usage: usage, Weeks: DefaultForecastWeeks})
	if err != nil {
		t.Fatal(err)
	}
	month := usageBetween(start, end, truth)
	want := priceMonth(t, tp, start, end, month)
	if fc.Method != MethodTrend || fc.Weeks != 7 || !fc.Forecast.Total.Equal(want.Total) || !fc.Low.Equal(want.Total) || !fc.High.Equal(want.Total) {
		t.Errorf("%s over %d weeks: forecast %s [%s, %s]; the true month priced is %s", fc.Method, fc.Weeks, fc.Forecast.Total, fc.Low, fc.High, want.Total)
	}
	if so := priceMonth(t, tp, start, asOf, rowsBefore(month, asOf)); !fc.SoFar.Total.Equal(so.Total) || !fc.Path[15].Total.Equal(so.Total) || fc.Path[15].Projected {
		t.Errorf("so far %s, path at as of %s; want %s", fc.SoFar.Total, fc.Path[15].Total, so.Total)
	}
	for _, u := range fc.Usage {
		if u.SKU == "H100-SXM5-80GB" && u.Meter == pricing.GPUHours {
			var tot decimal.Decimal
			for _, r := range month {
				if r.SKU == u.SKU && r.Meter == u.Meter {
					tot = tot.Add(r.Quantity)
				}
			}
			if !u.Total.Equal(tot) || !u.Low.Equal(tot) || !u.High.Equal(tot) {
				t.Errorf("H100 GPU-hours %s [%s, %s], want %s", u.Total, u.Low, u.High, tot)
			}
		}
	}
	checkPath(t, fc)
}

// TestForecastCostRunRateBeforeTwoWeeks: a tenant new this month carries
// on at its hourly average, priced with its commitment trued up.
func TestForecastCostRunRateBeforeTwoWeeks(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	end := start.AddDate(0, 1, 0)
	asOf := start.Add(100 * time.Hour)
	tp := costPricing(t, "9000")
	flat := func(h time.Time) []pricing.Usage {
		return []pricing.Usage{{Hour: h, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: dec("2.5")}}
	}
	fc, err := ForecastCost(CostForecastInput{Tenant: "acme", Pricing: tp, PeriodStart: start, PeriodEnd: end, AsOf: asOf,
		Usage: usageBetween(start, asOf, flat), Weeks: DefaultForecastWeeks})
	if err != nil {
		t.Fatal(err)
	}
	want := priceMonth(t, tp, start, end, usageBetween(start, end, flat))
	if fc.Method != MethodRunRate || !fc.Forecast.Total.Equal(want.Total) || !want.Total.Equal(dec("9000")) {
		t.Errorf("%s: forecast %s, want %s (the commitment)", fc.Method, fc.Forecast.Total, want.Total)
	}
	checkPath(t, fc)
}

// noisyNovember is acme's cost forecast asked on 17 November 2026 at noon,
// with six weeks of history whose hours vary at random (seeded).
func noisyNovember(tb testing.TB) CostForecastInput {
	tb.Helper()
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	asOf := time.Date(2026, 11, 17, 12, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(3, 31))
	noisy := func(h time.Time) []pricing.Usage {
		return weekUsage(h, decimal.NewFromInt(int64(50+r.IntN(100))).Div(decimal.NewFromInt(100)))
	}
	return CostForecastInput{Tenant: "acme", Pricing: costPricing(tb, "1000"), PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0), AsOf: asOf,
		Usage: usageBetween(start.AddDate(0, 0, -42), asOf, noisy), Weeks: DefaultForecastWeeks}
}

// TestForecastCostBandUnderNoise: noisy history gives a band around the
// forecast that widens along the path.
func TestForecastCostBandUnderNoise(t *testing.T) {
	fc, err := ForecastCost(noisyNovember(t))
	if err != nil {
		t.Fatal(err)
	}
	if fc.Method != MethodTrend || !fc.Low.LessThan(fc.Forecast.Total) || !fc.High.GreaterThan(fc.Forecast.Total) {
		t.Errorf("%s: band [%s, %s] around %s", fc.Method, fc.Low, fc.High, fc.Forecast.Total)
	}
	if p := fc.Path[16]; !p.Projected || !p.High.Sub(p.Low).LessThan(fc.High.Sub(fc.Low)) {
		t.Errorf("the band on 17 November [%s, %s] is not narrower than at the month's end", p.Low, p.High)
	}
	checkPath(t, fc)
}

func TestForecastCostRefusesBadInput(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	end := start.AddDate(0, 1, 0)
	tp := costPricing(t, "0")
	for _, c := range []struct {
		name string
		in   CostForecastInput
		want string
	}{
		{"no book", CostForecastInput{PeriodStart: start, PeriodEnd: end, AsOf: end, Weeks: 8}, "book is required"},
		{"as of before the period", CostForecastInput{Pricing: tp, PeriodStart: start, PeriodEnd: end, AsOf: start, Weeks: 8}, "as of"},
		{"as of off the hour", CostForecastInput{Pricing: tp, PeriodStart: start, PeriodEnd: end, AsOf: start.Add(90 * time.Minute), Weeks: 8}, "as of"},
		{"as of after the period", CostForecastInput{Pricing: tp, PeriodStart: start, PeriodEnd: end, AsOf: end.Add(time.Hour), Weeks: 8}, "as of"},
		{"empty period", CostForecastInput{Pricing: tp, PeriodStart: end, PeriodEnd: start, AsOf: end, Weeks: 8}, "start must be before end"},
		{"weeks", CostForecastInput{Pricing: tp, PeriodStart: start, PeriodEnd: end, AsOf: end, Weeks: 1}, "weeks 1"},
		{"years", CostForecastInput{Pricing: tp, PeriodStart: start, PeriodEnd: start.AddDate(2, 0, 0), AsOf: end, Weeks: 8}, "longer than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := ForecastCost(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

// TestDayNoiseWidensForWholeDayNoise: residuals that stay high or low for
// a whole day add up within it, so the band's hourly spread is the daily
// sums' spread over √24, not the hourly one; independent hours agree.
func TestDayNoiseWidensForWholeDayNoise(t *testing.T) {
	flat := Fit{Slope: decimal.Zero, Level: make([]decimal.Decimal, 168)}
	for i := range flat.Level {
		flat.Level[i] = dec("2")
	}
	wholeDays := make([]decimal.Decimal, 14*24)
	alternating := make([]decimal.Decimal, 14*24)
	for i := range wholeDays {
		wholeDays[i] = dec("1")
		if (i/24)%2 == 1 {
			wholeDays[i] = dec("3") // residuals −1 all day, then +1 all day
		}
		alternating[i] = dec("1")
		if i%2 == 1 {
			alternating[i] = dec("3") // ±1 cancelling within each day
		}
	}
	// Daily sums ±24: MAD 24, × 1.4826 / √24 (4.898979).
	if got, want := dayNoise(wholeDays, flat), dec("35.5824").DivRound(dec("4.898979"), divPlaces); !got.Equal(want) {
		t.Errorf("whole-day noise: %s, want %s", got, want)
	}
	if got := dayNoise(alternating, flat); !got.IsZero() {
		t.Errorf("noise cancelling within days: %s, want 0", got)
	}
}
