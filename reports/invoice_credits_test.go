package reports_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/browsertest"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/gpumeter/gpumeter/reports"
)

const creditBook = `version: credits-test
currency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}
skus:
  A100-SXM4-80GB:
    meters:
      gpu_hours: {unit_price: "2.00"}
  H100-SXM5-80GB:
    meters:
      gpu_hours: {unit_price: "3.00"}
      energy_kwh: {unit_price: "0.20"}
`

// Grant ids of the credit invoice.
const (
	includedGrant = "cg_0a1b2c3d4e5f"
	launchGrant   = "cg_1b2c3d4e5f60"
	welcomeGrant  = "cg_2c3d4e5f6071"
	prepaidGrant  = "cg_3d4e5f607182"
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// creditInvoice is acme's October 2026 invoice (Europe/Berlin, 19 % tax)
// with four grants, built by billing.BuildInvoice from a burn-down written
// here by hand:
//
//   - usage on 2 October: 40 GPU-hours of H100 at 3.00 (120.00), 60 of
//     A100 at 2.00 (120.00), 50 kWh on the H100s at 0.20 (10.00): 250.00;
//   - included: 60 GPU-hours of H100-SXM5-80GB from 1 September to 20
//     November; September's invoice applied 10 (30.00), October's 40 covers
//     all H100 GPU time (-120.00); 10 left, expiring in November;
//   - promotional "launch offer": 100.00 from 1 August to 15 October;
//     September applied 20.00, October 50.00 (the A100 and the energy up to
//     it), the 30.00 left expired on 15 October;
//   - promotional "welcome back": 70.00 from 25 October to 20 November: no
//     usage after it began, all 70.00 left, expiring in November;
//   - prepaid "order 17": 60.00 with no expiry, all of it paying the total
//     after tax;
//
// so subtotal 250.00 - 120.00 - 50.00 = 80.00, tax 15.20, total after tax
// 95.20, prepaid -60.00, amount due 35.20.
func creditInvoice(t *testing.T) *billing.Invoice {
	t.Helper()
	return creditInvoiceWithout(t, "")
}

// creditInvoiceWithout is creditInvoice as if the grant drop (an id, or
// "") had never been given.
func creditInvoiceWithout(t *testing.T, drop string) *billing.Invoice {
	t.Helper()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	local := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, berlin).UTC() }
	oct, err := billing.MonthlyPeriod("2026-10", berlin)
	if err != nil {
		t.Fatal(err)
	}
	nov, err := billing.MonthlyPeriod("2026-11", berlin)
	if err != nil {
		t.Fatal(err)
	}
	book, err := pricing.ParseBook([]byte(creditBook))
	if err != nil {
		t.Fatal(err)
	}
	hour := time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)
	priced, err := pricing.Price(pricing.Input{Tenant: "acme", Book: book, Start: oct.Start, End: oct.End, Usage: []pricing.Usage{
		{Hour: hour, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: dec("40")},
		{Hour: hour, SKU: "A100-SXM4-80GB", Meter: pricing.GPUHours, Quantity: dec("60")},
		{Hour: hour, SKU: "H100-SXM5-80GB", Meter: pricing.Meter("energy_kwh"), Quantity: dec("50")},
	}})
	if err != nil {
		t.Fatal(err)
	}

	created := local(2026, 8, 1)
	included := credits.Grant{ID: includedGrant, Tenant: "acme", Kind: credits.Included, Amount: dec("60"), Meter: pricing.GPUHours,
		SKUClass: "H100-SXM5-80GB", EffectiveAt: local(2026, 9, 1), ExpiresAt: local(2026, 11, 20), Source: "plan: 60 GPU-hours", CreatedAt: created}
	launch := credits.Grant{ID: launchGrant, Tenant: "acme", Kind: credits.Promotional, Amount: dec("100"), Currency: "USD",
		EffectiveAt: local(2026, 8, 1), ExpiresAt: local(2026, 10, 15), Source: "launch offer", CreatedAt: created}
	welcome := credits.Grant{ID: welcomeGrant, Tenant: "acme", Kind: credits.Promotional, Amount: dec("70"), Currency: "USD", Priority: 1,
		EffectiveAt: local(2026, 10, 25), ExpiresAt: local(2026, 11, 20), Source: "welcome back", CreatedAt: local(2026, 10, 25)}
	prepaid := credits.Grant{ID: prepaidGrant, Tenant: "acme", Kind: credits.Prepaid, Amount: dec("60"), Currency: "USD",
		EffectiveAt: local(2026, 9, 1), Source: "order 17", CreatedAt: created}
	sep := time.Date(2026, 9, 10, 8, 0, 0, 0, time.UTC)
	septemberDraws := []credits.Draw{
		{GrantID: includedGrant, At: sep, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: dec("10"), Amount: dec("30")},
		{GrantID: launchGrant, At: sep, SKU: "A100-SXM4-80GB", Meter: pricing.GPUHours, Amount: dec("20")},
	}
	start := credits.Result{AsOf: oct.Start, Draws: septemberDraws, Uncovered: decimal.Zero, Balances: []credits.Balance{
		{Grant: launch, Granted: dec("100"), Used: dec("20"), Remaining: dec("80")},
		{Grant: included, Granted: dec("60"), Used: dec("10"), Remaining: dec("50")},
		{Grant: prepaid, Granted: dec("60"), Remaining: dec("60")},
	}}
	end := credits.Result{AsOf: oct.End, Uncovered: dec("29.579831933"), Balances: []credits.Balance{
		{Grant: launch, Granted: dec("100"), Used: dec("70"), Expired: dec("30"), Remaining: decimal.Zero},
		{Grant: included, Granted: dec("60"), Used: dec("50"), Remaining: dec("10")},
		{Grant: prepaid, Granted: dec("60"), Used: dec("60"), Remaining: decimal.Zero},
		{Grant: welcome, Granted: dec("70"), Remaining: dec("70")},
	}, Draws: append(septemberDraws,
		credits.Draw{GrantID: includedGrant, At: hour, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: dec("40"), Amount: dec("120")},
		credits.Draw{GrantID: launchGrant, At: hour, SKU: "A100-SXM4-80GB", Meter: pricing.GPUHours, Amount: dec("50")},
		credits.Draw{GrantID: prepaidGrant, At: hour, SKU: "A100-SXM4-80GB", Meter: pricing.GPUHours, Amount: dec("60"), Tax: dec("9.579831933")},
	)}

	for _, res := range []*credits.Result{&start, &end} {
		res.Balances = slices.DeleteFunc(res.Balances, func(b credits.Balance) bool { return b.Grant.ID == drop })
		res.Draws = slices.DeleteFunc(slices.Clone(res.Draws), func(d credits.Draw) bool { return d.GrantID == drop })
	}

	issuer := billing.Issuer{ID: "gm", Name: "GPU Metering GmbH", Address: []string{"Hauptstraße 1", "10115 Berlin"},
		TaxID: "DE123456789", NumberPrefix: "GM-", PaymentTerms: billing.PaymentTerms{Days: ptr(14), Note: "Bank transfer to IBAN DE89 3704 0044 0532 0130 00"}}
	customer := billing.Customer{Tenant: "acme", Department: "research", Name: "Acme Forschung AG", Address: []string{"Königsallee 7", "40212 Düsseldorf"},
		Currency: "USD", TimeZone: "Europe/Berlin", TaxRate: dec("19")}
	inv, err := billing.BuildInvoice(billing.Draft{ID: "acme/2026-10/1", Issuer: issuer, Customer: customer, Period: oct, Priced: priced,
		Credits: &billing.CreditInput{Start: start, End: end, NextPeriodEnd: nov.End,
			AppliedMinor: map[string]int64{includedGrant: 3000, launchGrant: 2000}, AppliedQty: map[string]decimal.Decimal{includedGrant: dec("10")}},
		BookDigest: "sha256:book", InputsHash: "sha256:c4ed17", RollupVersion: 7, Now: time.Date(2026, 11, 2, 3, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	finalized := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	inv.Status, inv.Number, inv.Seq, inv.SequenceKey, inv.FinalizedAt, inv.DueDate = billing.StatusFinalized, "GM-000051", 51, "gm", &finalized, "2026-11-16"
	if err := inv.Validate(); err != nil {
		t.Fatal(err)
	}
	return inv
}

// The fixture holds what the renderers are tested on: a line of each
// credit kind, tax, an amount due above zero, and accounts with something
// ended and something expiring next period, in money and in GPU-hours.
func TestCreditInvoiceFixture(t *testing.T) {
	inv := creditInvoice(t)
	byGrant := map[string]billing.Line{}
	for _, l := range inv.Lines {
		if l.GrantID != "" {
			byGrant[l.GrantID] = l
		}
	}
	for _, want := range []struct {
		grant string
		kind  pricing.Kind
		minor int64
		qty   string
	}{
		{includedGrant, billing.KindIncludedCredit, -12000, "40"},
		{launchGrant, billing.KindPromotionalCredit, -5000, "0"},
		{prepaidGrant, billing.KindPrepaidCredit, -6000, "0"},
	} {
		l, ok := byGrant[want.grant]
		if !ok || l.Kind != want.kind || l.AmountMinor != want.minor || !l.Quantity.Equal(dec(want.qty)) {
			t.Errorf("grant %s: line %+v, want %s of %d minor, quantity %s", want.grant, l, want.kind, want.minor, want.qty)
		}
	}
	if _, ok := byGrant[welcomeGrant]; ok {
		t.Errorf("the welcome grant began after the usage, yet has a line")
	}
	if inv.SubtotalMinor != 8000 || inv.TaxMinor != 1520 || inv.PrepaidMinor != -6000 || inv.TotalMinor != 3520 {
		t.Errorf("subtotal %d, tax %d, prepaid %d, total %d; want 8000, 1520, -6000, 3520",
			inv.SubtotalMinor, inv.TaxMinor, inv.PrepaidMinor, inv.TotalMinor)
	}
	got := map[string]string{}
	for _, st := range inv.Credits {
		got[st.GrantID] = strings.Join([]string{st.Unit, st.Before.String(), st.Used.String(), st.Ended.String(), st.After.String(),
			strconv.FormatBool(st.ExpiresNextPeriod)}, " ")
	}
	want := map[string]string{
		includedGrant: "GPU-hours 50 40 0 10 true",
		launchGrant:   "USD 80 50 30 0 false",
		welcomeGrant:  "USD 70 0 0 70 true",
		prepaidGrant:  "USD 60 60 0 0 false",
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("account of %s: %q, want %q", id, got[id], w)
		}
	}
	if len(inv.Credits) != len(want) {
		t.Errorf("%d accounts, want %d", len(inv.Credits), len(want))
	}
}

// creditTotals are the figures one rendering shows; addsUp checks them
// creditTotals are the figures one rendering of an invoice with credits
// shows, read back from it; addsUp checks them against each other and
// the invoice.
type creditTotals struct {
	lines    []string // the lines before the subtotal, credit lines included
	subtotal string
	tax      []string
	afterTax string // empty where the rendering shows none (no prepaid line)
	prepaid  []string
	due      string
}

// addsUp checks, in amounts read back from the rendering: the lines add
// up to the subtotal, subtotal and tax to the total after tax, that and
// the prepaid credit to the amount due; the amount due is TotalMinor.
func (c creditTotals) addsUp(t *testing.T, format string, inv *billing.Invoice) {
	t.Helper()
	sum := func(ss ...string) decimal.Decimal {
		total := decimal.Zero
		for _, s := range ss {
			d, err := decimal.NewFromString(s)
			if err != nil {
				t.Errorf("%s: amount %q: %v", format, s, err)
				continue
			}
			total = total.Add(d)
		}
		return total
	}
	lines, prepaidLines := 0, 0
	for _, l := range inv.Lines {
		switch l.Kind {
		case billing.KindTax:
		case billing.KindPrepaidCredit:
			prepaidLines++
		default:
			lines++
		}
	}
	if len(c.lines) != lines {
		t.Errorf("%s: %d lines before the subtotal, want %d", format, len(c.lines), lines)
	}
	if s := sum(c.lines...); !s.Equal(sum(c.subtotal)) {
		t.Errorf("%s: lines add up to %s, subtotal %s", format, s, c.subtotal)
	}
	afterTax := c.afterTax
	if afterTax == "" {
		if prepaidLines > 0 {
			t.Errorf("%s: %d prepaid credit lines and no total after tax", format, prepaidLines)
		}
		afterTax = c.due
	}
	if s := sum(c.subtotal).Add(sum(c.tax...)); !s.Equal(sum(afterTax)) {
		t.Errorf("%s: subtotal %s + tax %v = %s, total after tax %s", format, c.subtotal, c.tax, s, afterTax)
	}
	if s := sum(afterTax).Add(sum(c.prepaid...)); !s.Equal(sum(c.due)) {
		t.Errorf("%s: total after tax %s + prepaid %v = %s, amount due %s", format, afterTax, c.prepaid, s, c.due)
	}
	if c.due != inv.Money(inv.TotalMinor) || c.subtotal != inv.Money(inv.SubtotalMinor) ||
		!sum(c.prepaid...).Equal(sum(inv.Money(inv.PrepaidMinor))) || !sum(c.tax...).Equal(sum(inv.Money(inv.TaxMinor))) {
		t.Errorf("%s: amount due %s, subtotal %s, tax %v, prepaid %v; the invoice's %s, %s, %s, %s", format, c.due, c.subtotal, c.tax, c.prepaid,
			inv.Money(inv.TotalMinor), inv.Money(inv.SubtotalMinor), inv.Money(inv.TaxMinor), inv.Money(inv.PrepaidMinor))
	}
}

// amountPattern matches an amount in minor units' places: 12, -3.20, 0.125.
const amountPattern = `-?\d+(?:\.\d+)?`

// textCreditTotals reads the totals of WriteInvoiceText's output: the
// lines' amounts by the AMOUNT column, the totals by their labels.
func textCreditTotals(t *testing.T, out string, inv *billing.Invoice) creditTotals {
	t.Helper()
	var c creditTotals
	rows := strings.Split(out, "\n")
	head := slices.IndexFunc(rows, func(r string) bool { return strings.HasPrefix(r, "NO  KIND") })
	if head < 0 {
		t.Fatalf("text: no table of lines in\n%s", out)
	}
	from, to := strings.Index(rows[head], "AMOUNT"), strings.Index(rows[head], "DESCRIPTION")
	for _, r := range rows[head+1:] {
		if r == "" {
			break
		}
		kind := strings.Fields(r)[1]
		if kind != string(billing.KindTax) && kind != string(billing.KindPrepaidCredit) {
			c.lines = append(c.lines, strings.TrimSpace(r[from:to]))
		}
	}
	total := func(label string, required bool) string {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(label) + ` +(` + amountPattern + `) ` + inv.Currency.Code + `$`).FindStringSubmatch(out)
		if m == nil {
			if required {
				t.Errorf("text: no %q total in\n%s", label, out)
			}
			return ""
		}
		return m[1]
	}
	c.subtotal, c.tax, c.due = total("subtotal (taxable)", true), []string{total("tax", true)}, total("amount due", true)
	c.afterTax = total("total after tax", false)
	if p := total("prepaid credit", false); p != "" {
		c.prepaid = []string{p}
	}
	return c
}

// htmlCreditTotals reads the totals of WriteInvoiceHTML's output, and the
// totals' rows in order (class: label).
func htmlCreditTotals(t *testing.T, out string, inv *billing.Invoice) (creditTotals, []string) {
	t.Helper()
	var c creditTotals
	for _, m := range amountCell.FindAllStringSubmatch(out, -1) {
		c.lines = append(c.lines, m[1])
	}
	var order, taxTotal []string
	sumRow := regexp.MustCompile(`<tr class="(subtotal|tax|taxtotal|aftertax|prepaid|total)"><td>([^<]*)</td><td class="num">([^<]*) ` +
		inv.Currency.Code + `</td></tr>`)
	for _, m := range sumRow.FindAllStringSubmatch(out, -1) {
		order = append(order, m[1]+": "+html.UnescapeString(m[2]))
		switch m[1] {
		case "subtotal":
			c.subtotal = m[3]
		case "tax":
			c.tax = append(c.tax, m[3])
		case "taxtotal":
			taxTotal = append(taxTotal, m[3])
		case "aftertax":
			c.afterTax = m[3]
		case "prepaid":
			c.prepaid = append(c.prepaid, m[3])
		case "total":
			c.due = m[3]
		}
	}
	if len(c.tax) == 0 {
		c.tax = taxTotal // no tax line: the tax row shows 0
	}
	return c, order
}

// pdfCreditTotals reads the totals of a PDF's text (pdftotext -layout,
// which keeps a row on one text line): lines are the rows that begin with
// their number and a word, and end with their amount.
func pdfCreditTotals(t *testing.T, text string, inv *billing.Invoice) creditTotals {
	t.Helper()
	var c creditTotals
	code := inv.Currency.Code
	for _, m := range regexp.MustCompile(`(?m)^\s*\d+\s{2,}[A-Za-z].*\s(`+amountPattern+`)$`).FindAllStringSubmatch(text, -1) {
		c.lines = append(c.lines, m[1])
	}
	total := func(label string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`(?m)^\s*`+label+`\s+(`+amountPattern+`) `+code+`$`).FindAllStringSubmatch(text, -1) {
			out = append(out, m[1])
		}
		return out
	}
	one := func(label string) string {
		if got := total(label); len(got) == 1 {
			return got[0]
		}
		return ""
	}
	c.subtotal, c.afterTax, c.due = one(`Subtotal \(taxable\)`), one("Total after tax"), one("Amount due")
	if c.tax = total(`Tax \S+% on \S+ ` + code); len(c.tax) == 0 {
		c.tax = total("Tax")
	}
	c.prepaid = total(`Prepaid credit.*`)
	if c.subtotal == "" || c.due == "" {
		t.Errorf("pdf: no subtotal or amount due in\n%s", text)
	}
	return c
}

// csvCreditTotals reads the totals of WriteInvoiceCSV's output: the line
// rows by kind, the summary rows; it checks the summary rows' tax and
// prepaid against the lines', and returns them as "kind description
// amount".
func csvCreditTotals(t *testing.T, rows [][]string, inv *billing.Invoice) (creditTotals, []string) {
	t.Helper()
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	if len(rows) != 1+len(inv.Lines)+5 {
		t.Fatalf("csv: %d rows, want header + %d lines + 5 totals", len(rows), len(inv.Lines))
	}
	var c creditTotals
	for i, l := range inv.Lines {
		r := rows[1+i]
		if r[col["kind"]] != string(l.Kind) || r[col["amount"]] != inv.Money(l.AmountMinor) || r[col["line_no"]] != strconv.Itoa(l.No) {
			t.Errorf("csv line %d: %v", l.No, r)
		}
		switch pricing.Kind(r[col["kind"]]) {
		case billing.KindTax:
			c.tax = append(c.tax, r[col["amount"]])
		case billing.KindPrepaidCredit:
			c.prepaid = append(c.prepaid, r[col["amount"]])
		default:
			c.lines = append(c.lines, r[col["amount"]])
		}
	}
	var summary []string
	var taxTotal, prepaidTotal string
	for _, r := range rows[1+len(inv.Lines):] {
		if r[col["line_no"]] != "" || r[col["currency"]] != inv.Currency.Code {
			t.Errorf("csv summary row %v", r)
		}
		summary = append(summary, r[col["kind"]]+" "+r[col["description"]]+" "+r[col["amount"]])
		switch r[col["kind"]] {
		case "subtotal":
			c.subtotal = r[col["amount"]]
		case "tax_total":
			taxTotal = r[col["amount"]]
		case "total_after_tax":
			c.afterTax = r[col["amount"]]
		case "prepaid_total":
			prepaidTotal = r[col["amount"]]
		case "total":
			c.due = r[col["amount"]]
		}
	}
	sum := func(ss []string) string {
		total := decimal.Zero
		for _, s := range ss {
			total = total.Add(decimal.RequireFromString(s))
		}
		return total.StringFixed(inv.Currency.MinorUnits)
	}
	if taxTotal != sum(c.tax) || prepaidTotal != sum(c.prepaid) {
		t.Errorf("csv: tax_total %s, prepaid_total %s; the lines' %s and %s", taxTotal, prepaidTotal, sum(c.tax), sum(c.prepaid))
	}
	return c, summary
}

// expiringNotes are the sentences every format prints on the credit that
// expires in the next period, dated in Berlin.
var expiringNotes = []string{
	"10.000 GPU-hours of grant " + includedGrant + ", Included GPU-hours of H100-SXM5-80GB (plan: 60 GPU-hours), expires on 20 Nov 2026.",
	"70.00 USD of grant " + welcomeGrant + ", Promotional credit (welcome back), expires on 20 Nov 2026.",
}

func TestWriteInvoiceTextWithCredits(t *testing.T) {
	inv := creditInvoice(t)
	var buf bytes.Buffer
	if err := reports.WriteInvoiceText(&buf, inv); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	c := textCreditTotals(t, out, inv)
	if c.afterTax != "95.20" || len(c.prepaid) != 1 || c.prepaid[0] != "-60.00" || c.due != "35.20" {
		t.Errorf("text totals %+v", c)
	}
	c.addsUp(t, "text", inv)
	for _, s := range append([]string{
		"promotional_credit", "Promotional credit (launch offer), grant " + launchGrant,
		"included_credit", "40 GPU-hours", "prepaid_credit", "Prepaid credit (order 17), grant " + prepaidGrant,
		"credit balances over the period", "GRANT", "ENDED",
	}, expiringNotes...) {
		if !strings.Contains(out, s) {
			t.Errorf("no %q in\n%s", s, out)
		}
	}
	golden(t, "invoice-credits.txt", buf.Bytes())

	// An invoice without credits keeps its three totals.
	_, plain := invoices(t)
	buf.Reset()
	if err := reports.WriteInvoiceText(&buf, plain); err != nil {
		t.Fatal(err)
	}
	want := "\nsubtotal  " + plain.Money(plain.SubtotalMinor) + " USD\ntax       " + plain.Money(plain.TaxMinor) +
		" USD\ntotal     " + plain.Money(plain.TotalMinor) + " USD\n"
	if !strings.Contains(buf.String(), want) || strings.Contains(buf.String(), "amount due") || strings.Contains(buf.String(), "credit balances") {
		t.Errorf("an invoice without credits:\n%s", buf.String())
	}
}

var htmlGroupRow = regexp.MustCompile(`<tr class="group"><th colspan="6">([^<]*)</th></tr>`)

func TestWriteInvoiceHTMLWithCredits(t *testing.T) {
	inv := creditInvoice(t)
	var buf bytes.Buffer
	if err := reports.WriteInvoiceHTML(&buf, inv); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	// The Credits group comes after every other group, and holds the
	// included and promotional lines, each named by its description.
	groups := htmlGroupRow.FindAllStringSubmatchIndex(out, -1)
	if len(groups) == 0 || out[groups[len(groups)-1][2]:groups[len(groups)-1][3]] != "Credits" {
		t.Fatalf("the last group is not Credits: %v", htmlGroupRow.FindAllStringSubmatch(out, -1))
	}
	creditRows := regexp.MustCompile(`<tr class="line"><td>\d+</td><td>([^<]*)</td><td class="num">([^<]*)</td><td class="unit">([^<]*)</td>`+
		`<td class="num"></td><td class="num amount">([^<]*)</td></tr>`).FindAllStringSubmatch(out[groups[len(groups)-1][0]:], -1)
	var credited []string
	for _, m := range creditRows {
		credited = append(credited, html.UnescapeString(strings.Join(m[1:], " | ")))
	}
	wantCredit := []string{
		"Included GPU-hours of H100-SXM5-80GB (plan: 60 GPU-hours), grant " + includedGrant + " | 40.000 | GPU-hours | -120.00",
		"Promotional credit (launch offer), grant " + launchGrant + " |  |  | -50.00",
	}
	if strings.Join(credited, "\n") != strings.Join(wantCredit, "\n") {
		t.Errorf("credit group:\n%s\nwant\n%s", strings.Join(credited, "\n"), strings.Join(wantCredit, "\n"))
	}
	c, order := htmlCreditTotals(t, out, inv)
	wantOrder := []string{"subtotal: Subtotal (taxable)", "tax: Tax 19% on 80.00 USD", "aftertax: Total after tax",
		"prepaid: Prepaid credit (order 17), grant " + prepaidGrant, "total: Amount due"}
	if strings.Join(order, "\n") != strings.Join(wantOrder, "\n") {
		t.Errorf("totals:\n%s\nwant\n%s", strings.Join(order, "\n"), strings.Join(wantOrder, "\n"))
	}
	c.addsUp(t, "html", inv)
	text := html.UnescapeString(out)
	for _, s := range append([]string{
		"<p>Credit balances over the period:</p>",
		`<tr><td>Included GPU-hours of H100-SXM5-80GB (plan: 60 GPU-hours), grant ` + includedGrant +
			`</td><td class="unit">GPU-hours</td><td>50.000</td><td>40.000</td><td>0.000</td><td>10.000</td></tr>`,
		`<tr><td>Promotional credit (launch offer), grant ` + launchGrant + `</td><td class="unit">USD</td><td>80.00</td><td>50.00</td><td>30.00</td><td>0.00</td></tr>`,
		`<tr><td>Promotional credit (welcome back), grant ` + welcomeGrant + `</td><td class="unit">USD</td><td>70.00</td><td>0.00</td><td>0.00</td><td>70.00</td></tr>`,
		`<tr><td>Prepaid credit (order 17), grant ` + prepaidGrant + `</td><td class="unit">USD</td><td>60.00</td><td>60.00</td><td>0.00</td><td>0.00</td></tr>`,
		"Ended: expired, voided or rolled over",
	}, expiringNotes...) {
		if !strings.Contains(text, s) {
			t.Errorf("no %q", s)
		}
	}
	golden(t, "invoice-credits.html", buf.Bytes())

	// In chromium, at a desktop's width and a phone's, nothing scrolls
	// sideways: the balances table fits beside the lines.
	path := filepath.Join(t.TempDir(), "invoice-credits.html")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, width := range []int{1000, 400} {
		if n := browsertest.Overflow(t, path, width); n > 0 {
			t.Errorf("at %d px the credit invoice is %d px too wide", width, n)
		}
	}
}

func TestWriteInvoicePDFWithCredits(t *testing.T) {
	inv := creditInvoice(t)
	var buf bytes.Buffer
	if err := reports.WriteInvoicePDF(&buf, inv); err != nil {
		t.Fatal(err)
	}
	text := pdfText(t, buf.Bytes())
	c := pdfCreditTotals(t, text, inv)
	if c.afterTax != "95.20" || len(c.prepaid) != 1 || c.prepaid[0] != "-60.00" || c.due != "35.20" {
		t.Errorf("pdf totals %+v in\n%s", c, text)
	}
	c.addsUp(t, "pdf", inv)
	flat := strings.Join(strings.Fields(text), " ")
	for _, s := range append([]string{
		"Credits", "Included GPU-hours of H100-SXM5-80GB (plan: 60", "Promotional credit (launch offer), grant " + launchGrant,
		"Prepaid credit (order 17), grant " + prepaidGrant + " -60.00 USD", "Total after tax 95.20 USD", "Amount due 35.20 USD",
		"Credit balances over the period", "Grant Unit Before Used Ended After", "Ended: expired, voided or rolled over", "Page 1/1",
	}, expiringNotes...) {
		if !strings.Contains(flat, s) {
			t.Errorf("no %q in\n%s", s, text)
		}
	}
	// The accounts, one row each: unit, before, used, ended, after.
	for _, row := range []string{
		`GPU-hours\s+50\.000\s+40\.000\s+0\.000\s+10\.000`,
		`welcome back\), grant ` + welcomeGrant + `\s+USD\s+70\.00\s+0\.00\s+0\.00\s+70\.00`,
		`launch offer\), grant ` + launchGrant + `\s+USD\s+80\.00\s+50\.00\s+30\.00\s+0\.00`,
		`order 17\), grant ` + prepaidGrant + `\s+USD\s+60\.00\s+60\.00\s+0\.00\s+0\.00`,
	} {
		if !regexp.MustCompile(row).MatchString(text) {
			t.Errorf("no balance row %s in\n%s", row, text)
		}
	}
}

func TestWriteInvoiceCSVWithCredits(t *testing.T) {
	inv := creditInvoice(t)
	var buf bytes.Buffer
	if err := reports.WriteInvoiceCSV(&buf, inv); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(buf.Bytes())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	c, summary := csvCreditTotals(t, rows, inv)
	want := "subtotal Subtotal (taxable) 80.00|tax_total Tax 15.20|total_after_tax Total after tax 95.20|" +
		"prepaid_total Prepaid credit -60.00|total Amount due 35.20"
	if got := strings.Join(summary, "|"); got != want {
		t.Errorf("summary rows\n%s\nwant\n%s", got, want)
	}
	c.addsUp(t, "csv", inv)
	golden(t, "invoice-credits.csv", buf.Bytes())
}

// The canonical document keeps every credit line and account: written
// as stored, read back, and written again, byte for byte.
func TestWriteInvoiceJSONWithCredits(t *testing.T) {
	inv := creditInvoice(t)
	doc, err := inv.Document()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := reports.WriteInvoiceJSON(&buf, doc); err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Lines []struct {
			Kind        string `json:"kind"`
			GrantID     string `json:"grant_id"`
			AmountMinor int64  `json:"amount_minor"`
		} `json:"lines"`
		SubtotalMinor int64 `json:"subtotal_minor"`
		TaxMinor      int64 `json:"tax_minor"`
		PrepaidMinor  int64 `json:"prepaid_minor"`
		TotalMinor    int64 `json:"total_minor"`
		Credits       []struct {
			GrantID           string     `json:"grant_id"`
			Before            string     `json:"before"`
			After             string     `json:"after"`
			AppliedMinor      int64      `json:"applied_minor"`
			ExpiresAt         *time.Time `json:"expires_at"`
			ExpiresNextPeriod bool       `json:"expires_next_period"`
		} `json:"credits"`
	}
	if err := json.Unmarshal(buf.Bytes(), &parsed); err != nil {
		t.Fatal(err)
	}
	var sub, tax, prepaid int64
	grants := 0
	for _, l := range parsed.Lines {
		switch {
		case l.Kind == string(billing.KindTax):
			tax += l.AmountMinor
		case l.Kind == string(billing.KindPrepaidCredit):
			prepaid += l.AmountMinor
		default:
			sub += l.AmountMinor
		}
		if l.GrantID != "" {
			grants++
		}
	}
	if grants != 3 || sub != parsed.SubtotalMinor || tax != parsed.TaxMinor || prepaid != parsed.PrepaidMinor ||
		parsed.TotalMinor != sub+tax+prepaid || parsed.TotalMinor != inv.TotalMinor {
		t.Errorf("json: %d grant lines, lines %d/%d/%d, totals %d/%d/%d/%d", grants, sub, tax, prepaid,
			parsed.SubtotalMinor, parsed.TaxMinor, parsed.PrepaidMinor, parsed.TotalMinor)
	}
	if len(parsed.Credits) != len(inv.Credits) {
		t.Fatalf("json: %d accounts, want %d", len(parsed.Credits), len(inv.Credits))
	}
	for i, st := range inv.Credits {
		p := parsed.Credits[i]
		if p.GrantID != st.GrantID || p.Before != st.Before.String() || p.After != st.After.String() || p.AppliedMinor != st.AppliedMinor ||
			p.ExpiresNextPeriod != st.ExpiresNextPeriod || (p.ExpiresAt == nil) != (st.ExpiresAt == nil) ||
			(p.ExpiresAt != nil && !p.ExpiresAt.Equal(*st.ExpiresAt)) {
			t.Errorf("json account %d: %+v, invoice %+v", i, p, st)
		}
	}
	back, err := billing.ParseDocument(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	again, err := back.Document()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, doc) {
		t.Errorf("read back and written again, the document differs:\n%s\n%s", again, doc)
	}
}

// randomGrants are up to four grants for an amount case's customer in
// November 2026: included GPU-hours (of the case's SKU's class or any),
// promotional and prepaid money in the book's currency, some starting or
// expiring inside the month, some expiring in December.
func randomGrants(r *rand.Rand, code string) []credits.Grant {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	day := func(n int) time.Time { return start.AddDate(0, 0, n) }
	var gs []credits.Grant
	for i := range 1 + r.IntN(4) {
		g := credits.Grant{ID: fmt.Sprintf("cg_%012d", i), Tenant: "acme", Priority: r.IntN(3), CreatedAt: day(-40 + i),
			EffectiveAt: day([]int{-30, 0, 10}[r.IntN(3)]), Source: []string{"", "order 17", "launch"}[r.IntN(3)]}
		switch r.IntN(3) {
		case 0:
			g.Kind, g.Meter, g.Amount = credits.Included, pricing.GPUHours, decimal.New(r.Int64N(4000)+1, -2)
			if r.IntN(2) == 0 {
				g.SKUClass = "H100-SXM5-80GB"
			}
		case 1:
			g.Kind, g.Currency, g.Amount = credits.Promotional, code, decimal.New(r.Int64N(100_000)+1, -2)
		default:
			g.Kind, g.Currency, g.Amount = credits.Prepaid, code, decimal.New(r.Int64N(100_000)+1, -2)
		}
		switch r.IntN(3) {
		case 0:
			g.ExpiresAt = day(20) // inside the month: what is left expires
		case 1:
			g.ExpiresAt = day(30 + 1 + r.IntN(29)) // next month: marked as expiring
		}
		gs = append(gs, g)
	}
	return gs
}

// Random invoices with random grants, burnt down by credits.Burn: in every
// format, each line's amount is the stored one (checkRenderings), and the
// lines, subtotal, tax and prepaid credit read back add up to the amount
// due, TotalMinor.
func TestCreditInvoicesAddUpInEveryFormat(t *testing.T) {
	r := rand.New(rand.NewPCG(34, 2026))
	withPrepaid, expiring := 0, 0
	for i := range 120 {
		c := randomAmountCase(r, i)
		c.name = fmt.Sprintf("credits %d", i)
		code := regexp.MustCompile(`code: ([A-Z]{3})`).FindStringSubmatch(c.currency)[1]
		_, inv := c.invoiceWith(t, randomGrants(r, code))
		doc, err := inv.Document()
		if err != nil {
			t.Fatal(err)
		}
		withPDF := i < 4
		checkRenderings(t, c.name, inv, doc, withPDF)
		if !slices.ContainsFunc(inv.Lines, func(l billing.Line) bool { return l.GrantID != "" }) {
			continue
		}
		if inv.PrepaidMinor != 0 {
			withPrepaid++
		}
		for _, st := range inv.Credits {
			if st.ExpiresNextPeriod {
				expiring++
			}
		}
		var tb, hb, cb bytes.Buffer
		if err := reports.WriteInvoiceText(&tb, inv); err != nil {
			t.Fatal(err)
		}
		textCreditTotals(t, tb.String(), inv).addsUp(t, c.name+" text", inv)
		if err := reports.WriteInvoiceHTML(&hb, inv); err != nil {
			t.Fatal(err)
		}
		ht, _ := htmlCreditTotals(t, hb.String(), inv)
		ht.addsUp(t, c.name+" html", inv)
		if err := reports.WriteInvoiceCSV(&cb, inv); err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(&cb).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		ct, _ := csvCreditTotals(t, rows, inv)
		ct.addsUp(t, c.name+" csv", inv)
		if withPDF {
			var pdf bytes.Buffer
			if err := reports.WriteInvoicePDF(&pdf, inv); err != nil {
				t.Fatal(err)
			}
			pdfCreditTotals(t, pdfText(t, pdf.Bytes()), inv).addsUp(t, c.name+" pdf", inv)
		}
	}
	// The cases must hold what they test.
	if withPrepaid < 20 || expiring < 20 {
		t.Errorf("%d invoices with prepaid credit, %d expiring accounts: too few to test", withPrepaid, expiring)
	}
}

// Without a prepaid line there is no total after tax to pay: the taxable
// subtotal and its tax lead straight to the amount due. Every format
// still adds up, and CSV keeps its five summary rows.
func TestInvoiceWithCreditsAndNoPrepaidLine(t *testing.T) {
	inv := creditInvoiceWithout(t, prepaidGrant)
	if inv.PrepaidMinor != 0 || inv.TotalMinor != 9520 || len(inv.Credits) != 3 {
		t.Fatalf("prepaid %d, total %d, %d accounts: want 0, 9520, 3", inv.PrepaidMinor, inv.TotalMinor, len(inv.Credits))
	}
	var tb, hb, cb bytes.Buffer
	if err := reports.WriteInvoiceText(&tb, inv); err != nil {
		t.Fatal(err)
	}
	tc := textCreditTotals(t, tb.String(), inv)
	if tc.afterTax != "" || len(tc.prepaid) != 0 || tc.due != "95.20" {
		t.Errorf("text totals %+v", tc)
	}
	tc.addsUp(t, "text", inv)
	if err := reports.WriteInvoiceHTML(&hb, inv); err != nil {
		t.Fatal(err)
	}
	hc, order := htmlCreditTotals(t, hb.String(), inv)
	if want := "subtotal: Subtotal (taxable)|tax: Tax 19% on 80.00 USD|total: Amount due"; strings.Join(order, "|") != want {
		t.Errorf("html totals %s, want %s", strings.Join(order, "|"), want)
	}
	hc.addsUp(t, "html", inv)
	if err := reports.WriteInvoiceCSV(&cb, inv); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&cb).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	cc, summary := csvCreditTotals(t, rows, inv)
	if want := "subtotal Subtotal (taxable) 80.00|tax_total Tax 15.20|total_after_tax Total after tax 95.20|" +
		"prepaid_total Prepaid credit 0.00|total Amount due 95.20"; strings.Join(summary, "|") != want {
		t.Errorf("csv summary %s, want %s", strings.Join(summary, "|"), want)
	}
	cc.addsUp(t, "csv", inv)
	var pdf bytes.Buffer
	if err := reports.WriteInvoicePDF(&pdf, inv); err != nil {
		t.Fatal(err)
	}
	text := pdfText(t, pdf.Bytes())
	pc := pdfCreditTotals(t, text, inv)
	if pc.afterTax != "" || len(pc.prepaid) != 0 {
		t.Errorf("pdf totals %+v in\n%s", pc, text)
	}
	pc.addsUp(t, "pdf", inv)
}

// A grant's account as a stored invoice may hold it: rolled into the
// grant (Ended negative), expiring at a time that is not midnight in the
// invoice's zone, in a unit of a meter other than GPU-hours.
func TestInvoiceCreditBalancesShowTheirUnitAndZone(t *testing.T) {
	inv := creditInvoice(t)
	expires := time.Date(2026, 11, 20, 11, 30, 0, 0, time.UTC) // 12:30 in Berlin
	for i, st := range inv.Credits {
		switch st.GrantID {
		case includedGrant:
			st.Before, st.Used, st.Ended, st.After = dec("50"), dec("40"), dec("-5.25"), dec("15.25")
			st.ExpiresAt = &expires
		case launchGrant:
			st.Unit, st.Before, st.Used, st.Ended, st.After = "kWh", dec("12.3456"), dec("2"), dec("0"), dec("10.3456")
			st.Kind, st.ExpiresAt, st.ExpiresNextPeriod = credits.Included, &expires, true
		}
		inv.Credits[i] = st
	}
	var tb, hb bytes.Buffer
	if err := reports.WriteInvoiceText(&tb, inv); err != nil {
		t.Fatal(err)
	}
	if err := reports.WriteInvoiceHTML(&hb, inv); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"text": tb.String(), "html": html.UnescapeString(hb.String())} {
		for _, s := range []string{
			"15.250 GPU-hours of grant " + includedGrant + ", Included GPU-hours of H100-SXM5-80GB (plan: 60 GPU-hours), expires on 20 Nov 2026 12:30 CET.",
			"10.346 kWh of grant " + launchGrant + ", Promotional credit (launch offer), expires on 20 Nov 2026 12:30 CET.",
		} {
			if !strings.Contains(out, s) {
				t.Errorf("%s: no %q in\n%s", name, s, out)
			}
		}
	}
	if !strings.Contains(hb.String(), `<td class="unit">GPU-hours</td><td>50.000</td><td>40.000</td><td>-5.250</td><td>15.250</td>`) ||
		!strings.Contains(hb.String(), `<td class="unit">kWh</td><td>12.346</td><td>2.000</td><td>0.000</td><td>10.346</td>`) {
		t.Errorf("html: balances not in their meters' places:\n%s", hb.String())
	}
}
