package reports_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/gpumeter/gpumeter/reports"
)

// amountCase is one invoice of the property test: a book with one price
// per meter and hourly usage in the integer units collectors record.
type amountCase struct {
	name     string
	currency string // the book's currency block
	prices   map[pricing.Meter]string
	tiered   bool // gpu_hours in two graduated tiers, the second at prices[GPUHours]
	tax      string
	// microseconds of GPU time (or millijoules, for energy) per hour
	hourly map[pricing.Meter][]int64
}

// The demo's case that could never be invoiced: 24 hours of 1,825
// GPU-seconds at 2.49 is 30.2949999…, which is 30.295000000 at the nine
// places invoices store.
var demoHalfCent = amountCase{
	name:     "24 hours of 1,825 GPU-seconds at 2.49",
	currency: "{code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}",
	prices:   map[pricing.Meter]string{pricing.GPUHours: "2.49"},
	hourly:   map[pricing.Meter][]int64{pricing.GPUHours: slices.Repeat([]int64{1_825_000_000}, 24)},
}

func randomAmountCase(r *rand.Rand, i int) amountCase {
	currencies := []string{
		"{code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}",
		"{code: EUR, rounding: {minor_units: 2, mode: half_even}}",
		"{code: JPY, rounding: {minor_units: 0}}",
		"{code: KWD, rounding: {minor_units: 3, mode: half_even}}",
	}
	// Prices with up to six places, quantities from seconds of GPU time
	// (hours with repeating decimals) and millijoules: sums that land
	// within a hair of a minor unit's half, as the demo's did.
	price := func() string {
		return decimal.New(r.Int64N(5_000_000)+1, -int32(r.IntN(7))).String()
	}
	c := amountCase{
		name:     fmt.Sprintf("random %d", i),
		currency: currencies[r.IntN(len(currencies))],
		prices:   map[pricing.Meter]string{pricing.GPUHours: price(), pricing.Meter("energy_kwh"): price()},
		tiered:   r.IntN(3) == 0,
		hourly:   map[pricing.Meter][]int64{},
	}
	if r.IntN(2) == 0 {
		c.tax = decimal.New(r.Int64N(300_000), -4).String()
	}
	hours := 1 + r.IntN(48)
	for range hours {
		c.hourly[pricing.GPUHours] = append(c.hourly[pricing.GPUHours], r.Int64N(3_600_000_000)+1)
		c.hourly[pricing.Meter("energy_kwh")] = append(c.hourly[pricing.Meter("energy_kwh")], r.Int64N(2_500_000_000))
	}
	return c
}

func (c amountCase) invoice(t *testing.T) (pricing.Result, *billing.Invoice) {
	t.Helper()
	return c.invoiceWith(t, nil)
}

// invoiceWith builds the case's invoice for November 2026, applying
// grants (when there are any) as the billing run does: burnt down at the
// period's start and end over the priced usage (credits.Burn).
func (c amountCase) invoiceWith(t *testing.T, grants []credits.Grant) (pricing.Result, *billing.Invoice) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "version: property\ncurrency: %s\nskus:\n  H100-SXM5-80GB:\n    meters:\n", c.currency)
	for _, m := range []pricing.Meter{pricing.GPUHours, pricing.Meter("energy_kwh")} {
		p, ok := c.prices[m]
		switch {
		case !ok:
		case m == pricing.GPUHours && c.tiered:
			fmt.Fprintf(&b, "      %s: {mode: graduated, tiers: [{up_to: 5, unit_price: \"%s\", flat_fee: \"0.333\"}, {unit_price: \"%s\"}]}\n",
				m, decimal.RequireFromString(p).Add(decimal.RequireFromString("0.0007")), p)
		default:
			fmt.Fprintf(&b, "      %s: {unit_price: \"%s\"}\n", m, p)
		}
	}
	book, err := pricing.ParseBook([]byte(b.String()))
	if err != nil {
		t.Fatalf("book:\n%s\n%v", b.String(), err)
	}
	p, err := billing.MonthlyPeriod("2026-11", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	// Hourly quantities as the store converts them (internal/store.ratio):
	// microseconds or millijoules per hour or kWh, to 18 places.
	per := map[pricing.Meter]int64{pricing.GPUHours: 3_600_000_000, pricing.Meter("energy_kwh"): 3_600_000_000}
	var usage []pricing.Usage
	for m, qs := range c.hourly {
		for h, q := range qs {
			usage = append(usage, pricing.Usage{Hour: p.Start.Add(time.Duration(h) * time.Hour), SKU: "H100-SXM5-80GB", Meter: m,
				Quantity: decimal.NewFromInt(q).DivRound(decimal.NewFromInt(per[m]), 18)})
		}
	}
	priced, err := pricing.Price(pricing.Input{Tenant: "acme", Start: p.Start, End: p.End, Usage: usage, Book: book})
	if err != nil {
		t.Fatal(err)
	}
	cust := billing.Customer{Tenant: "acme", Name: "Acme", TimeZone: "UTC"}
	if c.tax != "" {
		cust.TaxRate = decimal.RequireFromString(c.tax)
	}
	var credit *billing.CreditInput
	if len(grants) > 0 {
		start, err := credits.Burn(grants, nil, p.Start)
		if err != nil {
			t.Fatal(err)
		}
		end, err := credits.Burn(grants, credits.ChargesOf(priced, usage, cust.TaxRate), p.End)
		if err != nil {
			t.Fatal(err)
		}
		credit = &billing.CreditInput{Start: start, End: end, NextPeriodEnd: p.End.AddDate(0, 1, 0)}
	}
	inv, err := billing.BuildInvoice(billing.Draft{ID: "acme/2026-11/1", Issuer: billing.Issuer{ID: "gc", Name: "GPU Cloud"},
		Customer: cust, Period: p, Priced: priced, Credits: credit, InputsHash: "inputs", Now: p.End})
	if err != nil {
		t.Fatalf("%s: build invoice: %v", c.name, err)
	}
	return priced, inv
}

// minor is an amount in minor units, as an integer.
func minor(d decimal.Decimal, places int32) int64 { return d.Shift(places).IntPart() }

// amountCell matches a line's amount cell in the HTML.
var amountCell = regexp.MustCompile(`<td class="num amount">([^<]*)</td>`)

// prepaidRow matches a prepaid credit line's row among the HTML's totals.
var prepaidRow = regexp.MustCompile(`<tr class="prepaid"><td>[^<]*</td><td class="num">([^<]*) [A-Z]{3}</td></tr>`)

// One amount, rounded once: for random prices and quantities, the
// engine's rounded amount, the stored line (9 places, as Decimal(38, 9)
// keeps it), Validate on the invoice built and on its stored document
// read back, and every rendering agree on each line's minor units.
func TestEveryPlaceRoundsTheSameAmount(t *testing.T) {
	r := rand.New(rand.NewPCG(30, 2026))
	cases := []amountCase{demoHalfCent}
	for i := range 400 {
		cases = append(cases, randomAmountCase(r, i))
	}
	for i, c := range cases {
		priced, inv := c.invoice(t)
		cur := inv.Currency
		for j, pl := range priced.Lines {
			l := inv.Lines[j]
			if !l.Amount.Equal(pl.Amount) || l.AmountMinor != minor(pl.AmountRounded, cur.MinorUnits) {
				t.Errorf("%s line %d: invoice %s / %d, engine %s / %s", c.name, l.No, l.Amount, l.AmountMinor, pl.Amount, pl.AmountRounded)
			}
		}
		for _, l := range inv.Lines {
			// What Decimal(38, 9) stores, and what a check of the stored
			// line rounds it to.
			stored := decimal.RequireFromString(l.Amount.StringFixed(pricing.StoragePlaces))
			if !stored.Equal(l.Amount) {
				t.Errorf("%s line %d: amount %s has more than %d places", c.name, l.No, l.Amount, pricing.StoragePlaces)
			}
			if got := minor(cur.Round(stored), cur.MinorUnits); got != l.AmountMinor {
				t.Errorf("%s line %d: stored %s rounds to %d, the line says %d", c.name, l.No, stored, got, l.AmountMinor)
			}
		}
		doc, err := inv.Document()
		if err != nil {
			t.Fatal(err)
		}
		back, err := billing.ParseDocument(doc)
		if err != nil {
			t.Fatal(err)
		}
		if err := back.Validate(); err != nil {
			t.Errorf("%s: the stored document does not validate: %v", c.name, err)
		}
		for j, l := range back.Lines {
			if !l.Amount.Equal(inv.Lines[j].Amount) || l.AmountMinor != inv.Lines[j].AmountMinor {
				t.Errorf("%s line %d: document %s / %d, invoice %s / %d", c.name, l.No, l.Amount, l.AmountMinor, inv.Lines[j].Amount, inv.Lines[j].AmountMinor)
			}
		}
		checkRenderings(t, c.name, inv, doc, i < 6)
	}
}

// checkRenderings reads each line's amount back from the JSON, CSV, HTML,
// terminal text and (when withPDF) PDF renderings of inv.
func checkRenderings(t *testing.T, name string, inv *billing.Invoice, doc []byte, withPDF bool) {
	t.Helper()
	cur := inv.Currency
	var js bytes.Buffer
	if err := reports.WriteInvoiceJSON(&js, doc); err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Lines []struct {
			Amount      string `json:"amount"`
			AmountMinor int64  `json:"amount_minor"`
		} `json:"lines"`
	}
	if err := json.Unmarshal(js.Bytes(), &parsed); err != nil {
		t.Fatal(err)
	}
	for j, l := range parsed.Lines {
		if got := minor(cur.Round(decimal.RequireFromString(l.Amount)), cur.MinorUnits); got != l.AmountMinor || got != inv.Lines[j].AmountMinor {
			t.Errorf("%s json line %d: amount %s rounds to %d, amount_minor %d, invoice %d", name, j+1, l.Amount, got, l.AmountMinor, inv.Lines[j].AmountMinor)
		}
	}

	var cb bytes.Buffer
	if err := reports.WriteInvoiceCSV(&cb, inv); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&cb).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, c := range rows[0] {
		col[c] = i
	}
	for j, l := range inv.Lines {
		row := rows[1+j]
		exact := decimal.RequireFromString(row[col["amount_exact"]])
		if row[col["amount"]] != inv.Money(l.AmountMinor) || cur.Round(exact).StringFixed(cur.MinorUnits) != row[col["amount"]] {
			t.Errorf("%s csv line %d: amount_exact %s, amount %s, want %s", name, l.No, exact, row[col["amount"]], inv.Money(l.AmountMinor))
		}
	}

	// The lines' amounts, sorted: prepaid credit lines print among the
	// totals, after the tax; the rest in the table of lines.
	var want, wantPrepaid []string
	for _, l := range inv.Lines {
		switch l.Kind {
		case billing.KindTax:
		case billing.KindPrepaidCredit:
			wantPrepaid = append(wantPrepaid, inv.Money(l.AmountMinor))
		default:
			want = append(want, inv.Money(l.AmountMinor))
		}
	}
	slices.Sort(want)
	slices.Sort(wantPrepaid)
	var hb bytes.Buffer
	if err := reports.WriteInvoiceHTML(&hb, inv); err != nil {
		t.Fatal(err)
	}
	var got, gotPrepaid []string
	for _, m := range amountCell.FindAllStringSubmatch(hb.String(), -1) {
		got = append(got, m[1])
	}
	for _, m := range prepaidRow.FindAllStringSubmatch(hb.String(), -1) {
		gotPrepaid = append(gotPrepaid, m[1])
	}
	slices.Sort(got)
	slices.Sort(gotPrepaid)
	if !slices.Equal(got, want) || !slices.Equal(gotPrepaid, wantPrepaid) {
		t.Errorf("%s html: line amounts %v and prepaid %v, want %v and %v", name, got, gotPrepaid, want, wantPrepaid)
	}

	var tb bytes.Buffer
	if err := reports.WriteInvoiceText(&tb, inv); err != nil {
		t.Fatal(err)
	}
	text := tb.String()
	for _, l := range inv.Lines {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s.*\s%s\s`, l.No, regexp.QuoteMeta(inv.Money(l.AmountMinor)))).MatchString(text) {
			t.Errorf("%s text: line %d has no amount %s:\n%s", name, l.No, inv.Money(l.AmountMinor), text)
		}
	}

	if !withPDF {
		return
	}
	var pdf bytes.Buffer
	if err := reports.WriteInvoicePDF(&pdf, inv); err != nil {
		t.Fatal(err)
	}
	pt := pdfText(t, pdf.Bytes())
	for _, l := range inv.Lines {
		if !strings.Contains(pt, inv.Money(l.AmountMinor)) {
			t.Errorf("%s pdf: no amount %s for line %d:\n%s", name, inv.Money(l.AmountMinor), l.No, pt)
		}
	}
	if !strings.Contains(pt, inv.Money(inv.TotalMinor)+" "+cur.Code) {
		t.Errorf("%s pdf: no total %s", name, inv.Money(inv.TotalMinor))
	}
}

// The demo's line is 30.30, not 30.29, wherever it is read.
func TestDemoHalfCentLineIsThirtyThirty(t *testing.T) {
	_, inv := demoHalfCent.invoice(t)
	if len(inv.Lines) != 1 || inv.Lines[0].AmountMinor != 3030 || inv.TotalMinor != 3030 ||
		!inv.Lines[0].Amount.Equal(decimal.RequireFromString("30.295")) {
		t.Fatalf("lines %+v, total %d: want one line of 30.295000000, 30.30", inv.Lines, inv.TotalMinor)
	}
}
