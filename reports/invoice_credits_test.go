package reports_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"html"
	"os"
	"path/filepath"
	"regexp"
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
// against each other and the invoice.
type creditTotals struct {
	lines    []string // amounts of the lines before the subtotal, credits included
	subtotal string
	tax      []string
	afterTax string
	prepaid  []string
	due      string
}

// addsUp checks, in minor units read back from the rendering: the lines
// add up to the subtotal, subtotal and tax to the total after tax, that
// and the prepaid credit to the amount due, which is TotalMinor.
func (c creditTotals) addsUp(t *testing.T, format string, inv *billing.Invoice) {
	t.Helper()
	sum := func(ss []string) decimal.Decimal {
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
	money := func(s string) decimal.Decimal { return sum([]string{s}) }
	nonTax := 0
	for _, l := range inv.Lines {
		if l.Kind != billing.KindTax && l.Kind != billing.KindPrepaidCredit {
			nonTax++
		}
	}
	if len(c.lines) != nonTax || len(c.tax) != 1 || len(c.prepaid) != 1 {
		t.Errorf("%s: %d lines, %d tax, %d prepaid rows; want %d, 1, 1", format, len(c.lines), len(c.tax), len(c.prepaid), nonTax)
	}
	if s := sum(c.lines); !s.Equal(money(c.subtotal)) {
		t.Errorf("%s: lines add up to %s, subtotal %s", format, s, c.subtotal)
	}
	if s := money(c.subtotal).Add(sum(c.tax)); !s.Equal(money(c.afterTax)) {
		t.Errorf("%s: subtotal + tax = %s, total after tax %s", format, s, c.afterTax)
	}
	if s := money(c.afterTax).Add(sum(c.prepaid)); !s.Equal(money(c.due)) {
		t.Errorf("%s: total after tax + prepaid = %s, amount due %s", format, s, c.due)
	}
	if c.due != inv.Money(inv.TotalMinor) || c.subtotal != inv.Money(inv.SubtotalMinor) {
		t.Errorf("%s: amount due %s, subtotal %s; the invoice's %s and %s", format, c.due, c.subtotal,
			inv.Money(inv.TotalMinor), inv.Money(inv.SubtotalMinor))
	}
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
	var c creditTotals
	lineRow := regexp.MustCompile(`(?m)^(\d+)\s+(\S+)\s.*?\s(-?\d+\.\d\d)\s+\S`)
	for _, m := range lineRow.FindAllStringSubmatch(out, -1) {
		switch pricing.Kind(m[2]) {
		case billing.KindTax:
		case billing.KindPrepaidCredit:
		default:
			c.lines = append(c.lines, m[3])
		}
	}
	total := func(label string) string {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(label) + ` +(-?\d+\.\d\d) USD$`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("no %q total in\n%s", label, out)
			return ""
		}
		return m[1]
	}
	c.subtotal, c.tax, c.afterTax = total("subtotal (taxable)"), []string{total("tax")}, total("total after tax")
	c.prepaid, c.due = []string{total("prepaid credit")}, total("amount due")
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

var (
	htmlGroupRow   = regexp.MustCompile(`<tr class="group"><th colspan="6">([^<]*)</th></tr>`)
	htmlLineAmount = regexp.MustCompile(`<tr class="line"><td>(\d+)</td><td>([^<]*)(?:<br>.*?)?</td>.*<td class="num amount">([^<]*)</td></tr>`)
	htmlSumRow     = regexp.MustCompile(`<tr class="(subtotal|tax|taxtotal|aftertax|prepaid|total)"><td>([^<]*)</td><td class="num">([^<]*) USD</td></tr>`)
)

func TestWriteInvoiceHTMLWithCredits(t *testing.T) {
	inv := creditInvoice(t)
	var buf bytes.Buffer
	if err := reports.WriteInvoiceHTML(&buf, inv); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	var c creditTotals
	var creditLines []string
	// The Credits group comes after every other group, and holds the
	// included and promotional lines, each named by its description.
	groups := htmlGroupRow.FindAllStringSubmatchIndex(out, -1)
	if len(groups) == 0 || out[groups[len(groups)-1][2]:groups[len(groups)-1][3]] != "Credits" {
		t.Fatalf("the last group is not Credits: %v", htmlGroupRow.FindAllStringSubmatch(out, -1))
	}
	creditsAt := groups[len(groups)-1][0]
	for _, m := range htmlLineAmount.FindAllStringSubmatchIndex(out, -1) {
		text, amount := html.UnescapeString(out[m[4]:m[5]]), out[m[6]:m[7]]
		c.lines = append(c.lines, amount)
		if m[0] > creditsAt {
			creditLines = append(creditLines, text+" = "+amount)
		}
	}
	wantCredit := []string{
		"Included GPU-hours of H100-SXM5-80GB (plan: 60 GPU-hours), grant " + includedGrant + " = -120.00",
		"Promotional credit (launch offer), grant " + launchGrant + " = -50.00",
	}
	if strings.Join(creditLines, "\n") != strings.Join(wantCredit, "\n") {
		t.Errorf("credit group:\n%s\nwant\n%s", strings.Join(creditLines, "\n"), strings.Join(wantCredit, "\n"))
	}
	var order []string
	for _, m := range htmlSumRow.FindAllStringSubmatch(out, -1) {
		label := html.UnescapeString(m[2])
		order = append(order, m[1]+": "+label)
		switch m[1] {
		case "subtotal":
			c.subtotal = m[3]
		case "tax":
			c.tax = append(c.tax, m[3])
		case "aftertax":
			c.afterTax = m[3]
		case "prepaid":
			c.prepaid = append(c.prepaid, m[3])
		case "total":
			c.due = m[3]
		}
	}
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
	// pdftotext -layout keeps a row on one text line.
	var c creditTotals
	lineRow := regexp.MustCompile(`(?m)^\s*(\d+)\s{2,}(\S.*?)\s{2,}.*?(-?\d+\.\d\d)$`)
	for _, m := range lineRow.FindAllStringSubmatch(text, -1) {
		c.lines = append(c.lines, m[3])
	}
	total := func(label string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`(?m)^\s*`+label+`\s+(-?\d+\.\d\d) USD$`).FindAllStringSubmatch(text, -1) {
			out = append(out, m[1])
		}
		if len(out) == 0 {
			t.Errorf("no %q total in\n%s", label, text)
			return []string{""}
		}
		return out
	}
	c.subtotal, c.tax, c.afterTax = total(`Subtotal \(taxable\)`)[0], total(`Tax 19% on 80\.00 USD`), total("Total after tax")[0]
	c.prepaid, c.due = total(`Prepaid credit \(order 17\), grant `+prepaidGrant), total("Amount due")[0]
	c.addsUp(t, "pdf", inv)
	for _, s := range []string{
		"Credits", "Included GPU-hours of H100-SXM5-80GB (plan: 60", "Promotional credit (launch offer), grant " + launchGrant,
		"Credit balances over the period", "Grant", "Before", "Used", "Ended", "After",
		"Amount due 35.20 USD", "Page 1/",
	} {
		if !strings.Contains(strings.Join(strings.Fields(text), " "), s) {
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
	flat := strings.Join(strings.Fields(text), " ")
	for _, s := range expiringNotes {
		if !strings.Contains(flat, s) {
			t.Errorf("no %q in\n%s", s, text)
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
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	if len(rows) != 1+len(inv.Lines)+5 {
		t.Fatalf("%d rows, want header + %d lines + 5 totals", len(rows), len(inv.Lines))
	}
	var c creditTotals
	for i, l := range inv.Lines {
		r := rows[1+i]
		if r[col["kind"]] != string(l.Kind) || r[col["amount"]] != inv.Money(l.AmountMinor) || r[col["line_no"]] != strconv.Itoa(l.No) {
			t.Errorf("line %d: %v", l.No, r)
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
	for _, r := range rows[1+len(inv.Lines):] {
		if r[col["line_no"]] != "" || r[col["currency"]] != "USD" {
			t.Errorf("summary row %v", r)
		}
		summary = append(summary, r[col["kind"]]+" "+r[col["description"]]+" "+r[col["amount"]])
		switch r[col["kind"]] {
		case "subtotal":
			c.subtotal = r[col["amount"]]
		case "tax_total":
			if r[col["amount"]] != c.tax[0] {
				t.Errorf("tax_total %s, tax line %s", r[col["amount"]], c.tax[0])
			}
		case "total_after_tax":
			c.afterTax = r[col["amount"]]
		case "prepaid_total":
			if r[col["amount"]] != c.prepaid[0] {
				t.Errorf("prepaid_total %s, prepaid line %s", r[col["amount"]], c.prepaid[0])
			}
		case "total":
			c.due = r[col["amount"]]
		}
	}
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
