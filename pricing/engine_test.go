package pricing_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/pricing"
	"github.com/shopspring/decimal"
)

// march is the start of the period most tests price.
var march = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func hourAt(h int) time.Time { return march.Add(time.Duration(h) * time.Hour) }

// mustParse is src parsed by parse (a book, a contract), what naming it in
// the failure.
func mustParse[T any](t testing.TB, what string, parse func([]byte) (T, error), src string) T {
	t.Helper()
	v, err := parse([]byte(src))
	if err != nil {
		t.Fatalf("parse %s: %v", what, err)
	}
	return v
}

func mustBook(t testing.TB, src string) *pricing.Book {
	t.Helper()
	return mustParse(t, "book", pricing.ParseBook, src)
}

func mustContract(t testing.TB, src string) *pricing.Contract {
	t.Helper()
	return mustParse(t, "contract", pricing.ParseContract, src)
}

// h100Head is a USD book up to the meters of SKU "H100" (weight 1).
const h100Head = `
version: test
currency: {code: USD, rounding: {minor_units: 2}}
skus:
  H100:
    weight: 1
    meters:
`

// bookWith wraps one gpu_hours price of SKU "H100" into a book.
func bookWith(t testing.TB, gpuHours string) *pricing.Book {
	t.Helper()
	return mustBook(t, h100Head+"      gpu_hours:\n"+indent(gpuHours, "        "))
}

// tieredBooks are two books pricing H100 gpu_hours by tiers, one in volume
// mode and one graduated.
func tieredBooks(t testing.TB, tiers string) (volume, graduated *pricing.Book) {
	t.Helper()
	return bookWith(t, "mode: volume"+tiers), bookWith(t, "mode: graduated"+tiers)
}

// energyBook prices H100 energy_kwh at 1 in currency, a YAML currency body
// such as "USD, rounding: {minor_units: 2}".
func energyBook(t testing.TB, currency string) *pricing.Book {
	t.Helper()
	return mustBook(t, `
version: test
currency: {code: `+currency+`}
skus:
  H100: {meters: {energy_kwh: {unit_price: "1"}}}
`)
}

// priceEnergy prices H100 energy_kwh of the given quantities, one an hour
// from march, in March.
func priceEnergy(t testing.TB, b *pricing.Book, quantities ...string) pricing.Result {
	t.Helper()
	return mustPrice(t, pricing.Input{Book: b, Usage: usageOf("H100", pricing.Meter("energy_kwh"), quantities...)})
}

// priceH100 prices H100 gpu_hours of the given quantities, one an hour
// from march, in March.
func priceH100(t testing.TB, b *pricing.Book, quantities ...string) pricing.Result {
	t.Helper()
	return mustPrice(t, pricing.Input{Book: b, Usage: usageOf("H100", pricing.GPUHours, quantities...)})
}

func indent(s, by string) string {
	lines := strings.Split(strings.Trim(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = by + l
	}
	return strings.Join(lines, "\n") + "\n"
}

func mustPrice(t testing.TB, in pricing.Input) pricing.Result {
	t.Helper()
	if in.Start.IsZero() {
		in.Start, in.End = march, march.AddDate(0, 1, 0)
	}
	r, err := pricing.Price(in)
	if err != nil {
		t.Fatalf("price: %v", err)
	}
	checkTotal(t, r)
	return r
}

// checkTotal pins the rounding rule on every result a test sees: the total
// is the sum of the lines' rounded amounts, and each line's AmountRounded
// is its stored 9-place Amount rounded, so whoever checks the stored line
// later finds the same minor units.
func checkTotal(t testing.TB, r pricing.Result) {
	t.Helper()
	sum := decimal.Zero
	for _, l := range r.Lines {
		if !l.AmountRounded.Round(r.Currency.MinorUnits).Equal(l.AmountRounded) {
			t.Errorf("line %q: rounded %s is not in whole minor units", l.Description, l.AmountRounded)
		}
		if !r.Currency.Round(l.Amount).Equal(l.AmountRounded) {
			t.Errorf("line %q: rounded %s is not %s rounded", l.Description, l.AmountRounded, l.Amount)
		}
		if !l.Amount.Round(pricing.StoragePlaces).Equal(l.Amount) {
			t.Errorf("line %q: amount %s has more than %d places", l.Description, l.Amount, pricing.StoragePlaces)
		}
		sum = sum.Add(l.AmountRounded)
	}
	if !sum.Equal(r.Total) {
		t.Errorf("total %s, but the rounded lines add up to %s", r.Total, sum)
	}
}

// usageOf spreads quantities over consecutive hours from march.
func usageOf(sku string, m pricing.Meter, quantities ...string) []pricing.Usage {
	var out []pricing.Usage
	for i, q := range quantities {
		out = append(out, pricing.Usage{Hour: hourAt(i), SKU: sku, Meter: m, Quantity: dec(q)})
	}
	return out
}

func linesOf(r pricing.Result, k pricing.Kind) []pricing.Line {
	var out []pricing.Line
	for _, l := range r.Lines {
		if l.Kind == k {
			out = append(out, l)
		}
	}
	return out
}

func wantDec(t testing.TB, what string, got decimal.Decimal, want string) {
	t.Helper()
	if !got.Equal(dec(want)) {
		t.Errorf("%s = %s, want %s", what, got.String(), want)
	}
}

// Stripe's documented example: units 1–5 at 7, 6–10 at 6.50, 11+ at 6.
const stripeTiers = `
tiers:
  - {up_to: 5, unit_price: "7"}
  - {up_to: 10, unit_price: "6.50"}
  - {unit_price: "6"}
`

// Whole units as in Stripe's example, and fractional quantities at the
// tier edges; amount is the line's full precision, total its rounding.
func TestTiersStripeExample(t *testing.T) {
	volume, graduated := tieredBooks(t, stripeTiers)
	cases := []struct {
		name          string
		book          *pricing.Book
		units         string
		amount, total string
	}{
		{"volume, 1 unit = 7", volume, "1", "7", "7.00"},
		{"volume, 5 units = 35 (up_to is inclusive)", volume, "5", "35", "35.00"},
		{"volume, 6 units = 39 (all at tier 2)", volume, "6", "39", "39.00"},
		{"volume, 20 units = 120", volume, "20", "120", "120.00"},
		{"volume, 25 units = 150", volume, "25", "150", "150.00"},
		{"graduated, 5 units = 35", graduated, "5", "35", "35.00"},
		{"graduated, 6 units = 41.50", graduated, "6", "41.5", "41.50"},
		{"graduated, 20 units = 127.50", graduated, "20", "127.5", "127.50"},
		{"graduated, 25 units = 157.50", graduated, "25", "157.5", "157.50"},
		{"volume, 4.999 stays in tier 1", volume, "4.999", "34.993", "34.99"},
		{"volume, 5.0 is still tier 1 (inclusive edge)", volume, "5.0", "35", "35.00"},
		{"volume, 5.001 moves every unit to tier 2", volume, "5.001", "32.5065", "32.51"},
		{"volume, 10.5 moves every unit to tier 3", volume, "10.5", "63", "63.00"},
		{"graduated, 5.5 prices 0.5 in tier 2", graduated, "5.5", "38.25", "38.25"},
		{"graduated, 10.000000001 prices a billionth in tier 3", graduated, "10.000000001", "67.500000006", "67.50"},
		{"graduated, 0.25 prices a quarter unit in tier 1", graduated, "0.25", "1.75", "1.75"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := priceH100(t, tc.book, tc.units)
			if len(r.Lines) != 1 || r.Lines[0].Kind != pricing.KindOnDemand {
				t.Fatalf("want one on_demand line, got %+v", r.Lines)
			}
			wantDec(t, "amount", r.Lines[0].Amount, tc.amount)
			wantDec(t, "total", r.Total, tc.total)
		})
	}
}

func TestTiersGraduatedBreakdown(t *testing.T) {
	r := priceH100(t, bookWith(t, "mode: graduated"+stripeTiers), "20")
	tiers := r.Lines[0].Tiers
	want := []struct {
		idx              int
		q, price, amount string
	}{{0, "5", "7", "35"}, {1, "5", "6.5", "32.5"}, {2, "10", "6", "60"}}
	if len(tiers) != len(want) {
		t.Fatalf("got %d tiers, want %d: %+v", len(tiers), len(want), tiers)
	}
	for i, w := range want {
		if tiers[i].TierIndex != w.idx || !tiers[i].Quantity.Equal(dec(w.q)) || !tiers[i].UnitPrice.Equal(dec(w.price)) || !tiers[i].Amount.Equal(dec(w.amount)) {
			t.Errorf("tier %d = %+v, want %+v", i, tiers[i], w)
		}
	}
}

func TestTiersFlatFees(t *testing.T) {
	const flatTiers = `
tiers:
  - {up_to: 10, unit_price: "1", flat_fee: "5"}
  - {up_to: 100, unit_price: "0.5", flat_fee: "20"}
  - {flat_fee: "100"}
`
	volume, graduated := tieredBooks(t, flatTiers)
	cases := []struct {
		name  string
		book  *pricing.Book
		usage []string
		want  string
	}{
		{"graduated, first unit pays tier 1's flat fee", graduated, []string{"1"}, "6.00"},
		{"graduated, entering tier 2 adds its flat fee once", graduated, []string{"11"}, "5+10+20+0.5"},
		{"graduated, flat fee is charged once however many hours fill the tier", graduated, []string{"3", "3", "3", "3"}, "5+10+20+1"},
		{"graduated, a flat-fee-only open tier charges its fee and no unit price", graduated, []string{"150"}, "5+10+20+45+100"},
		{"volume, the reached tier's flat fee only", volume, []string{"11"}, "20+5.5"},
		{"volume, flat-fee-only tier", volume, []string{"150"}, "100"},
		{"graduated, zero usage pays no flat fee", graduated, []string{"0"}, "0"},
		{"volume, zero usage pays no flat fee", volume, []string{"0", "0"}, "0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := priceH100(t, tc.book, tc.usage...)
			want := decimal.Zero
			for _, part := range strings.Split(tc.want, "+") {
				want = want.Add(dec(part))
			}
			wantDec(t, "total", r.Total, want.String())
		})
	}
}

func TestZeroUsage(t *testing.T) {
	book := bookWith(t, "mode: graduated"+stripeTiers)
	cases := []struct {
		name  string
		usage []pricing.Usage
	}{
		{"no rows at all gives no lines and a zero total", nil},
		{"rows of zero quantity give no lines and a zero total", usageOf("H100", pricing.GPUHours, "0", "0.000")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustPrice(t, pricing.Input{Book: book, Usage: tc.usage})
			if len(r.Lines) != 0 {
				t.Errorf("want no lines, got %+v", r.Lines)
			}
			wantDec(t, "total", r.Total, "0")
		})
	}
}

func TestUnitPriceSumsHoursExactly(t *testing.T) {
	// 3/7 of a GPU for 7 hours, as the collector reports a 3g instance,
	// priced at 2.69: 3 × 2.69 = 8.07, not 8.0699999.
	b := bookWith(t, `unit_price: "2.69"`)
	q := "0.428571428571428571"
	r := priceH100(t, b, q, q, q, q, q, q, q)
	wantDec(t, "quantity", r.Lines[0].Quantity, "2.999999999999999997")
	wantDec(t, "amount (9 places)", r.Lines[0].Amount, "8.070000000")
	wantDec(t, "total", r.Total, "8.07")
	if r.Lines[0].UnitPrice == nil || !r.Lines[0].UnitPrice.Equal(dec("2.69")) {
		t.Errorf("unit price = %v, want 2.69", r.Lines[0].UnitPrice)
	}
}

func TestRoundingModes(t *testing.T) {
	cases := []struct {
		name, mode, quantity, want string
	}{
		{"half away from zero rounds 0.125 up to 0.13", "half_away_from_zero", "0.125", "0.13"},
		{"half even rounds 0.125 down to 0.12", "half_even", "0.125", "0.12"},
		{"half even rounds 0.135 up to 0.14", "half_even", "0.135", "0.14"},
		{"default mode is half away from zero", "", "0.125", "0.13"},
		{"a value below the half rounds down in both modes", "half_away_from_zero", "0.124999999", "0.12"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mode := ""
			if tc.mode != "" {
				mode = ", mode: " + tc.mode
			}
			r := priceEnergy(t, energyBook(t, "USD, rounding: {minor_units: 2"+mode+"}"), tc.quantity)
			wantDec(t, "total", r.Total, tc.want)
		})
	}
}

func TestLineIsRoundedOnceFromItsStoredAmount(t *testing.T) {
	// amount is the exact amount quantized to the 9 places invoices store;
	// amount_rounded is that amount rounded to minor units, never the exact
	// amount: 1.2349999996 is 1.235000000 as stored, and 1.24 from there,
	// which is what any later check of the stored line computes.
	cases := []struct {
		name, currency, quantity, amount, rounded string
	}{
		{"just below a cent's half, past the 9th place: the stored half rounds up", "USD, rounding: {minor_units: 2}", "1.2349999996", "1.235000000", "1.24"},
		{"a half at the 10th place just below a cent's half", "USD, rounding: {minor_units: 2}", "1.2349999995", "1.235000000", "1.24"},
		{"just below a half beyond the 9th place, rounded down at 9", "USD, rounding: {minor_units: 2}", "1.2349999994", "1.234999999", "1.23"},
		{"just below a cent's half at the 9th place", "USD, rounding: {minor_units: 2}", "1.234999999", "1.234999999", "1.23"},
		{"exactly a cent's half rounds away from zero", "USD, rounding: {minor_units: 2}", "1.235", "1.235000000", "1.24"},
		{"half even: just past a cent's half, stored as the half, rounds to even", "USD, rounding: {minor_units: 2, mode: half_even}", "1.2450000004", "1.245000000", "1.24"},
		{"half even: just past a cent's half at the 9th place rounds up", "USD, rounding: {minor_units: 2, mode: half_even}", "1.245000001", "1.245000001", "1.25"},
		{"half even: exactly a cent's half rounds to even", "USD, rounding: {minor_units: 2, mode: half_even}", "1.245", "1.245000000", "1.24"},
		{"half even: a half at the 10th place rounds to even there too", "USD, rounding: {minor_units: 2, mode: half_even}", "1.2350000005", "1.235000000", "1.24"},
		{"no minor units: just below a yen's half, stored as the half", "JPY, rounding: {minor_units: 0}", "2.4999999996", "2.500000000", "3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := priceEnergy(t, energyBook(t, tc.currency), tc.quantity)
			if len(r.Lines) != 1 {
				t.Fatalf("want one line, got %+v", r.Lines)
			}
			wantDec(t, "amount (9 places)", r.Lines[0].Amount, tc.amount)
			wantDec(t, "amount_rounded", r.Lines[0].AmountRounded, tc.rounded)
			wantDec(t, "total", r.Total, tc.rounded)
		})
	}
}

func TestTotalIsSumOfRoundedLines(t *testing.T) {
	// Three lines of 0.004 each: rounding each line gives 0.00 three times,
	// so the total is 0.00, not round(0.012) = 0.01.
	b := mustBook(t, `
version: test
currency: {code: USD, rounding: {minor_units: 2}}
skus:
  A: {meters: {energy_kwh: {unit_price: "0.004"}}}
  B: {meters: {energy_kwh: {unit_price: "0.004"}}}
  C: {meters: {energy_kwh: {unit_price: "0.004"}}}
`)
	var usage []pricing.Usage
	for _, s := range []string{"A", "B", "C"} {
		usage = append(usage, usageOf(s, pricing.Meter("energy_kwh"), "1")...)
	}
	r := mustPrice(t, pricing.Input{Book: b, Usage: usage})
	if len(r.Lines) != 3 {
		t.Fatalf("want 3 lines, got %d", len(r.Lines))
	}
	wantDec(t, "total", r.Total, "0")
}

func TestPriceChangeMidPeriod(t *testing.T) {
	change := time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)
	// aroundChange is H100 gpu_hours in the hour before the change and the
	// hour it takes effect.
	aroundChange := func(before, after string) []pricing.Usage {
		return []pricing.Usage{
			{Hour: change.Add(-time.Hour), SKU: "H100", Meter: pricing.GPUHours, Quantity: dec(before)},
			{Hour: change, SKU: "H100", Meter: pricing.GPUHours, Quantity: dec(after)},
		}
	}
	t.Run("unit price change prices each part at its own price", func(t *testing.T) {
		b := bookWith(t, `
unit_price: "2.00"
changes:
  - from: 2026-03-15T00:00:00Z
    unit_price: "1.50"
`)
		usage := aroundChange("10", "10")
		r := mustPrice(t, pricing.Input{Book: b, Usage: usage})
		od := linesOf(r, pricing.KindOnDemand)
		if len(od) != 2 {
			t.Fatalf("want 2 lines, got %+v", r.Lines)
		}
		wantDec(t, "before the change", od[0].Amount, "20")
		wantDec(t, "after the change", od[1].Amount, "15")
		if !od[0].To.Equal(change) || !od[1].From.Equal(change) || !od[1].To.Equal(march.AddDate(0, 1, 0)) {
			t.Errorf("line spans %v–%v and %v–%v, want the change at %v", od[0].From, od[0].To, od[1].From, od[1].To, change)
		}
		wantDec(t, "total", r.Total, "35")
	})
	// Tiers across a change: the mode and tiers of the change's own version
	// price each part, with the quantity counted over the whole period.
	tierCases := []struct {
		name, book, before, after string
		wantBefore, wantAfter     string
		whyBefore, whyAfter       string
	}{
		{
			name: "graduated tiers keep counting from the period's first unit across a change",
			book: `
mode: graduated
tiers: [{up_to: 10, unit_price: "2"}, {unit_price: "1.5"}]
changes:
  - from: 2026-03-15T00:00:00Z
    mode: graduated
    tiers: [{up_to: 10, unit_price: "1.8"}, {unit_price: "1.2"}]
`,
			before: "8", after: "8", wantBefore: "16", wantAfter: "10.8",
			whyBefore: "units 1–8 at the old tier 1", whyAfter: "units 9–10 at the new tier 1, 11–16 at the new tier 2",
		},
		{
			// 12 units reach tier 2 in both versions; each part pays its units
			// and its quantity share of that version's flat fee.
			name: "volume tier is chosen by the period total and priced per part",
			book: `
mode: volume
tiers: [{up_to: 10, unit_price: "2"}, {unit_price: "1.5", flat_fee: "3"}]
changes:
  - from: 2026-03-15T00:00:00Z
    mode: volume
    tiers: [{up_to: 10, unit_price: "1.8"}, {unit_price: "1.2", flat_fee: "6"}]
`,
			before: "4", after: "8", wantBefore: "7", wantAfter: "13.6",
			whyBefore: "4 units at 1.5 plus 4/12 of 3", whyAfter: "8 units at 1.2 plus 8/12 of 6",
		},
	}
	for _, tc := range tierCases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustPrice(t, pricing.Input{Book: bookWith(t, tc.book), Usage: aroundChange(tc.before, tc.after)})
			od := linesOf(r, pricing.KindOnDemand)
			wantDec(t, tc.whyBefore, od[0].Amount, tc.wantBefore)
			wantDec(t, tc.whyAfter, od[1].Amount, tc.wantAfter)
		})
	}
	t.Run("a change to the same price leaves the total unchanged", func(t *testing.T) {
		tiers := `
mode: graduated
tiers: [{up_to: 10, unit_price: "2", flat_fee: "1"}, {up_to: 20, unit_price: "1.5", flat_fee: "2"}, {unit_price: "1"}]
`
		same := bookWith(t, tiers+"changes:\n  - from: 2026-03-15T00:00:00Z\n"+indent(tiers, "    "))
		plain := bookWith(t, tiers)
		usage := aroundChange("9.5", "13.25")
		a := mustPrice(t, pricing.Input{Book: same, Usage: usage})
		b := mustPrice(t, pricing.Input{Book: plain, Usage: usage})
		if len(linesOf(a, pricing.KindOnDemand)) != 2 {
			t.Fatalf("want the change to split the line, got %+v", a.Lines)
		}
		sum := decimal.Zero
		for _, l := range a.Lines {
			sum = sum.Add(l.Amount)
		}
		wantDec(t, "amounts with a no-op change", sum, b.Lines[0].Amount.String())
	})
}

func TestUnpricedMetersAreReportedNotBilled(t *testing.T) {
	b := bookWith(t, `unit_price: "2"`)
	usage := append(usageOf("H100", pricing.GPUHours, "1"), usageOf("H100", pricing.Meter("energy_kwh"), "0.7", "0.3")...)
	r := mustPrice(t, pricing.Input{Book: b, Usage: usage})
	wantDec(t, "total", r.Total, "2")
	if len(r.Unpriced) != 1 || r.Unpriced[0].Meter != pricing.Meter("energy_kwh") || !r.Unpriced[0].Quantity.Equal(dec("1")) {
		t.Errorf("unpriced = %+v, want 1 energy_kwh", r.Unpriced)
	}
}

// TestUnpricedSumIsTheDecimalSum: an unpriced meter's quantity is the
// decimal sum of its rows to the last digit and exponent (zero rows,
// 19-digit and larger coefficients, sums past an int64 included).
func TestUnpricedSumIsTheDecimalSum(t *testing.T) {
	b := bookWith(t, `unit_price: "2"`)
	cases := [][]string{
		{"0.7", "0.3"},
		{"0"},
		{"0.000000000", "5"},
		{"1.000000000000000000", "1.000000000000000000", "0.5"},
		{"922337203.6854775807", "922337203.6854775807", "0.000000001"},
		{"999999999999999.999999999", "999999999999999.999999999", "1", "0.25"},
		{"999999999.999999999", "999999999.999999999", "999999999.999999999", "999999999.999999999", "999999999.999999999",
			"999999999.999999999", "999999999.999999999", "999999999.999999999", "999999999.999999999", "999999999.999999999"},
		{"700", "700", "700", "0.0", "3e-5"},
	}
	for _, quantities := range cases {
		r := mustPrice(t, pricing.Input{Book: b, Usage: usageOf("H100", pricing.Meter("energy_kwh"), quantities...)})
		want := decimal.Zero
		for _, q := range quantities {
			want = want.Add(dec(q))
		}
		if len(r.Unpriced) != 1 {
			t.Fatalf("%v: unpriced %+v, want one", quantities, r.Unpriced)
		}
		if got := r.Unpriced[0].Quantity; got.String() != want.String() || got.Exponent() != want.Exponent() {
			t.Errorf("%v: unpriced %s (exponent %d), want %s (exponent %d)", quantities, got, got.Exponent(), want, want.Exponent())
		}
	}
}

func TestPriceRejectsBadInput(t *testing.T) {
	b := bookWith(t, `unit_price: "2"`)
	end := march.AddDate(0, 1, 0)
	row := func(h time.Time, sku string, m pricing.Meter, q string) []pricing.Usage {
		return []pricing.Usage{{Hour: h, SKU: sku, Meter: m, Quantity: dec(q)}}
	}
	cases := []struct {
		name       string
		in         pricing.Input
		wantPath   string
		wantSubstr string
	}{
		{"period end before start", pricing.Input{Book: b, Start: end, End: march}, "period", "not after start"},
		{"period without an end", pricing.Input{Book: b, Start: march}, "period", "required"},
		{"no book", pricing.Input{Start: march, End: end}, "book", "required"},
		{"row before the period", pricing.Input{Book: b, Start: march, End: end, Usage: row(march.Add(-time.Hour), "H100", pricing.GPUHours, "1")}, "usage[0].hour", "outside the period"},
		{"row at the period end", pricing.Input{Book: b, Start: march, End: end, Usage: row(end, "H100", pricing.GPUHours, "1")}, "usage[0].hour", "outside the period"},
		{"row not at the start of an hour", pricing.Input{Book: b, Start: march, End: end, Usage: row(march.Add(90*time.Minute), "H100", pricing.GPUHours, "1")}, "usage[0].hour", "not the start of an hour"},
		{"unknown SKU", pricing.Input{Book: b, Start: march, End: end, Usage: row(march, "B200", pricing.GPUHours, "1")}, "usage[0].sku", `unknown SKU "B200"`},
		{"unknown meter", pricing.Input{Book: b, Start: march, End: end, Usage: row(march, "H100", "gpu_minutes", "1")}, "usage[0].meter", `unknown meter "gpu_minutes"`},
		{"negative quantity", pricing.Input{Book: b, Start: march, End: end, Usage: row(march, "H100", pricing.GPUHours, "-1")}, "usage[0].quantity", "negative"},
		{"quantity with too many places", pricing.Input{Book: b, Start: march, End: end, Usage: row(march, "H100", pricing.GPUHours, "1e-30")}, "usage[0].quantity", "decimal places"},
		{"quantity too large", pricing.Input{Book: b, Start: march, End: end, Usage: row(march, "H100", pricing.GPUHours, "1e20")}, "usage[0].quantity", "integer digits"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pricing.Price(tc.in)
			var ve *pricing.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a *ValidationError, got %v", err)
			}
			if ve.Problems[0].Path != tc.wantPath || !strings.Contains(ve.Problems[0].Message, tc.wantSubstr) {
				t.Errorf("got %q, want path %q and %q", err, tc.wantPath, tc.wantSubstr)
			}
			if verr := tc.in.Validate(); verr == nil || verr.Error() != err.Error() {
				t.Errorf("Validate() = %v, want the same error as Price", verr)
			}
		})
	}
}

func TestPriceIsPure(t *testing.T) {
	in := benchInput(t)
	a := mustPrice(t, in)
	b := mustPrice(t, in)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Error("pricing the same input twice gave different results")
	}
}

func TestPriceSharesBookAndContractAcrossGoroutines(t *testing.T) {
	// An invoice run prices tenants in parallel with one book; run with
	// -race to check that Price only reads what it is given.
	in := benchInput(t)
	want := mustPrice(t, in)
	var wg sync.WaitGroup
	totals := make([]decimal.Decimal, 4)
	for i := range totals {
		wg.Go(func() {
			r, err := pricing.Price(in)
			if err != nil {
				t.Error(err)
				return
			}
			totals[i] = r.Total
		})
	}
	wg.Wait()
	for i, got := range totals {
		if !got.Equal(want.Total) {
			t.Errorf("goroutine %d: total %s, want %s", i, got, want.Total)
		}
	}
}

func TestResultJSONKeepsAllPlaces(t *testing.T) {
	r := priceH100(t, bookWith(t, "mode: graduated"+stripeTiers), "6")
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"amount":"41.500000000"`, `"amount_rounded":"41.50"`, `"total":"41.50"`, `"kind":"on_demand"`, `"tier_index":1`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("JSON lacks %s: %s", want, out)
		}
	}
}

func TestManySKUsInterleaved(t *testing.T) {
	// More SKUs than the engine's recent-SKU cache holds, in rotating order,
	// each at its own price.
	var src strings.Builder
	src.WriteString("version: test\ncurrency: {code: USD, rounding: {minor_units: 2}}\nskus:\n")
	for i := range 12 {
		src.WriteString("  SKU-" + string(rune('A'+i)) + ": {meters: {energy_kwh: {unit_price: \"" + string(rune('1'+i%9)) + "\"}}}\n")
	}
	b := mustBook(t, src.String())
	var usage []pricing.Usage
	for h := range 5 {
		for i := range 12 {
			usage = append(usage, pricing.Usage{Hour: hourAt(h), SKU: "SKU-" + string(rune('A'+(i*5+h)%12)), Meter: pricing.Meter("energy_kwh"), Quantity: dec("1")})
		}
	}
	r := mustPrice(t, pricing.Input{Book: b, Usage: usage})
	if len(r.Lines) != 12 {
		t.Fatalf("want 12 lines, got %d", len(r.Lines))
	}
	for i, l := range r.Lines {
		want := decimal.NewFromInt(int64(5 * (1 + i%9)))
		if l.SKU != "SKU-"+string(rune('A'+i)) || !l.Amount.Equal(want) {
			t.Errorf("line %d: %s %s, want SKU-%c %s", i, l.SKU, l.Amount, 'A'+i, want)
		}
	}
}

// An amount that Decimal(38, 9) cannot hold is refused: before the fix a
// price and a quantity each within bounds gave a 30-digit amount that no
// invoice could store.
func TestAmountBeyondStorageIsRefused(t *testing.T) {
	b := bookWith(t, `unit_price: "999999999999999"`)
	_, err := pricing.Price(pricing.Input{Book: b, Start: march, End: march.AddDate(0, 1, 0), Usage: usageOf("H100", pricing.GPUHours, "999999999999999")})
	if err == nil || !strings.Contains(err.Error(), "beyond what invoices store") {
		t.Fatalf("err = %v, want a refusal of the unstorable amount", err)
	}
	// The largest storable amounts still price.
	b = bookWith(t, `unit_price: "99999999999999"`)
	priceH100(t, b, "999999999999999")
}
