package reports

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
)

// Invoices are rendered in four formats. JSON is the canonical document
// stored with the invoice; CSV, HTML and PDF are made from the Invoice
// value. Every amount they print is a stored minor-unit amount (a line's
// AmountMinor, SubtotalMinor, TaxMinor, TotalMinor) formatted with
// billing.FormatMinor, never re-rounded from the exact amount or summed
// anew, so every rendering shows the same totals as the document. The one
// exception is named as such: the exact amounts (CSV's amount_exact and
// the tier breakdown under a tiered line), which explain a rounded line
// and are not added up anywhere.

// WriteInvoiceJSON writes the stored canonical document (see
// billing.Invoice.Document) exactly as it is: the same bytes, no trailing
// newline. A doc that is not JSON is refused and nothing is written.
func WriteInvoiceJSON(w io.Writer, doc []byte) error {
	if !json.Valid(doc) {
		return errors.New("invoice document: not valid JSON")
	}
	_, err := w.Write(doc)
	return err
}

// invoiceCSVHeader names the CSV columns, one row per invoice line.
var invoiceCSVHeader = []string{
	"invoice_number", "invoice_id", "tenant", "period", "line_no", "kind", "sku", "meter", "description",
	"from", "to", "quantity", "unit", "unit_price", "amount_exact", "amount", "currency",
	"adjusts_period", "adjusts_invoice", "due_date", "payment_terms",
}

// WriteInvoiceCSV writes the invoice as CSV (RFC 4180, via encoding/csv):
//
//   - a header row (invoice_number, invoice_id, tenant, period, line_no,
//     kind, sku, meter, description, from, to, quantity, unit, unit_price,
//     amount_exact, amount, currency, adjusts_period, adjusts_invoice,
//     due_date, payment_terms);
//   - one row per line in line order, the tax line included (kind "tax");
//     from and to are RFC 3339 in UTC, as stored; unit_price is empty when
//     the line has tiers instead; amount_exact is the exact amount with
//     pricing.StoragePlaces places; amount is AmountMinor in the currency's
//     minor units ("1234.50", "-3.20" for a credit);
//   - three summary rows with kinds "subtotal", "tax_total" and "total":
//     empty line_no, sku, meter, times, quantity and amount_exact, and
//     amount SubtotalMinor, TaxMinor and TotalMinor.
//
// An invoice with credits (a line of a grant, or the grants' accounts)
// has its credit lines as ordinary line rows: kinds "included_credit"
// (quantity and unit the included meter's) and "promotional_credit"
// before the tax line, "prepaid_credit" after it, each with a negative
// amount and the grant named in the description. Its summary rows are
// five, in this order:
//
//   - "subtotal" ("Subtotal (taxable)"): SubtotalMinor, the lines before
//     the tax line, credit lines included;
//   - "tax_total": TaxMinor;
//   - "total_after_tax": SubtotalMinor + TaxMinor;
//   - "prepaid_total" ("Prepaid credit"): PrepaidMinor, the prepaid credit
//     lines' sum (negative, or 0.00);
//   - "total" ("Amount due"): TotalMinor = total_after_tax + prepaid_total.
//
// The grants' balances are not rows here: the JSON document has them
// (credits).
//
// Summary rows are told apart by their empty line_no: a spreadsheet that
// sums the amount column should filter on it. invoice_number and
// due_date are empty for a draft; payment_terms says when it is due
// ("30 days", with the issuer's note).
func WriteInvoiceCSV(w io.Writer, inv *billing.Invoice) error {
	cw := csv.NewWriter(w)
	rows := [][]string{invoiceCSVHeader}
	head := []string{inv.Number, inv.ID, inv.Tenant, inv.PeriodLabel}
	terms := paymentTerms(inv)
	utc := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, l := range inv.Lines {
		price := ""
		if l.UnitPrice != nil {
			price = l.UnitPrice.String()
		}
		rows = append(rows, append(append([]string(nil), head...),
			strconv.Itoa(l.No), string(l.Kind), l.SKU, string(l.Meter), l.Description,
			utc(l.From), utc(l.To), l.Quantity.String(), l.Unit, price,
			l.Amount.StringFixed(pricing.StoragePlaces), inv.Money(l.AmountMinor), inv.Currency.Code,
			l.AdjustsPeriod, l.AdjustsInvoice, inv.DueDate, terms))
	}
	type summary struct {
		kind  string
		what  string
		minor int64
	}
	summaries := []summary{
		{"subtotal", "Subtotal", inv.SubtotalMinor},
		{"tax_total", "Tax", inv.TaxMinor},
		{"total", "Total", inv.TotalMinor},
	}
	if hasCredits(inv) {
		summaries = []summary{
			{"subtotal", taxableSubtotal, inv.SubtotalMinor},
			{"tax_total", "Tax", inv.TaxMinor},
			{"total_after_tax", totalAfterTax, inv.SubtotalMinor + inv.TaxMinor},
			{"prepaid_total", "Prepaid credit", inv.PrepaidMinor},
			{"total", amountDue, inv.TotalMinor},
		}
	}
	for _, s := range summaries {
		rows = append(rows, append(append([]string(nil), head...),
			"", s.kind, "", "", s.what, "", "", "", "", "", "", inv.Money(s.minor), inv.Currency.Code, "", "", inv.DueDate, terms))
	}
	if err := cw.WriteAll(rows); err != nil {
		return fmt.Errorf("invoice %s: write csv: %w", inv.ID, err)
	}
	return nil
}

// WriteInvoiceHTML writes the invoice as one self-contained, printable
// HTML page (inline CSS, A4 print margins, no scripts or external
// resources): issuer and customer, the number (DRAFT for a draft, a VOID
// banner with the reason for a void invoice), the period in the invoice's
// time zone, the lines grouped by SKU with tier breakdowns, corrections
// of earlier periods, subtotal, tax and total (with credits: the Credits
// group, the taxable subtotal, total after tax, prepaid credit, amount due
// and the grants' balances, invoice_credits.go), and a footer with the
// price book version and inputs hash. All text is escaped by html/template.
// The page is rendered completely before anything is written.
func WriteInvoiceHTML(w io.Writer, inv *billing.Invoice) error {
	var buf bytes.Buffer
	if err := invoiceHTML.Execute(&buf, newInvoiceView(inv)); err != nil {
		return fmt.Errorf("invoice %s: render html: %w", inv.ID, err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// invoiceView is the invoice as the HTML and PDF renderers print it: the
// same text for both, every amount already formatted from minor units.
type invoiceView struct {
	// Number is the invoice number, "DRAFT" for a draft; Banner says
	// "DRAFT" or "VOID: reason" and is empty for a finalized invoice.
	Number, Banner   string
	Issuer, Customer partyView
	Tenant           string
	Period           string // the label, e.g. 2026-03
	Start, End       string // the period's bounds in Zone
	Zone             string
	Issued           string // finalization date in Zone, empty for a draft
	Due              string // the due date, or when a draft will be due
	Terms            string // the payment terms' note: how to pay
	Currency         string
	Groups           []lineGroup
	Subtotal         string
	Taxes            []taxRow
	// TaxTotal is shown as its own row unless exactly one tax line
	// already shows it.
	TaxTotal     string
	ShowTaxTotal bool
	Total        string
	// SubtotalLabel and TotalLabel name the first and last totals:
	// "Subtotal" and "Total", or with credits "Subtotal (taxable)" and
	// "Amount due".
	SubtotalLabel, TotalLabel string
	// With credits (invoice_credits.go): Prepaid are the prepaid credit
	// lines paying AfterTax, the subtotal and tax (shown when there are
	// any); Balances the grants' accounts, Expiring what of them expires
	// in the next period.
	HasCredits   bool
	AfterTax     string
	Prepaid      []taxRow
	Balances     []creditBalanceRow
	Expiring     []string
	BalancesNote string
	Reservations []reservationRow
	// Unpriced is one line on usage the book does not price; the rows
	// themselves are in the appendix.
	Unpriced         string
	UnpricedAppendix []unpricedRow
	ID               string
	BookVersion      string
	InputsHash       string
	RoundingNote     string
}

type partyView struct {
	Name       string
	Address    []string
	TaxID      string
	Department string
}

type lineGroup struct {
	Title string
	Lines []lineView
}

type lineView struct {
	No          int
	Kind        string // a label: "On demand", "Burst", …
	Description string
	Note        string // the line's own span, or the period and invoice it corrects
	Quantity    string
	Unit        string
	UnitPrice   string
	Amount      string
	Tiers       []tierView
}

type tierView struct {
	Label, Quantity, UnitPrice, Amount string
}

type taxRow struct {
	No          int
	Description string
	Amount      string
}

type unpricedRow struct {
	SKU, What, Quantity, Unit string
}

type reservationRow struct {
	SKU, Reserved, Covered, Unused, OnDemand, Burst string
}

// Group titles for lines not grouped under a SKU.
const (
	otherGroup       = "Other charges"
	correctionsGroup = "Corrections to earlier periods"
)

func newInvoiceView(inv *billing.Invoice) invoiceView {
	loc, err := time.LoadLocation(inv.TimeZone)
	zone := inv.TimeZone
	if err != nil || inv.TimeZone == "" {
		// A stored invoice whose zone this binary does not know is shown
		// in UTC, and says so.
		loc, zone = time.UTC, "UTC"
	}
	when := func(t time.Time) string { return t.In(loc).Format("2006-01-02 15:04") }
	places := inv.Currency.MinorUnits
	v := invoiceView{
		Number:       inv.Number,
		Issuer:       invoiceParty(inv.Issuer),
		Customer:     invoiceParty(inv.Customer),
		Tenant:       inv.Tenant,
		Period:       inv.PeriodLabel,
		Start:        when(inv.PeriodStart),
		End:          when(inv.PeriodEnd),
		Zone:         zone,
		Currency:     inv.Currency.Code,
		Subtotal:     inv.Money(inv.SubtotalMinor),
		TaxTotal:     inv.Money(inv.TaxMinor),
		Total:        inv.Money(inv.TotalMinor),
		ID:           inv.ID,
		BookVersion:  inv.BookVersion,
		InputsHash:   inv.InputsHash,
		RoundingNote: roundingNote,

		SubtotalLabel: "Subtotal",
		TotalLabel:    "Total",
	}
	if hasCredits(inv) {
		v.HasCredits, v.SubtotalLabel, v.TotalLabel = true, taxableSubtotal, amountDue
		v.AfterTax = inv.Money(inv.SubtotalMinor + inv.TaxMinor)
		v.Balances, v.Expiring = creditBalances(inv, loc)
		if len(v.Balances) > 0 {
			v.BalancesNote = balancesNote
		}
	}
	switch inv.Status {
	case billing.StatusDraft:
		v.Number, v.Banner = "DRAFT", "DRAFT"
	case billing.StatusVoid:
		v.Banner = "VOID: " + inv.VoidReason
	}
	if v.Number == "" {
		v.Number = "(no number)"
	}
	if inv.FinalizedAt != nil {
		v.Issued = inv.FinalizedAt.In(loc).Format("2006-01-02")
	}
	v.Due, v.Terms = dueText(inv), inv.PaymentNote
	groups := map[string]int{}
	group := func(title string) *lineGroup {
		i, ok := groups[title]
		if !ok {
			i = len(v.Groups)
			groups[title] = i
			v.Groups = append(v.Groups, lineGroup{Title: title})
		}
		return &v.Groups[i]
	}
	// SKU groups come first, in the order the lines name them; lines
	// without a SKU and corrections follow in their own groups.
	var other, corrections, credited []lineView
	for _, l := range inv.Lines {
		if l.Kind == billing.KindTax {
			v.Taxes = append(v.Taxes, taxRow{No: l.No, Description: l.Description, Amount: inv.Money(l.AmountMinor)})
			continue
		}
		if isPrepaidLine(l) {
			v.Prepaid = append(v.Prepaid, taxRow{No: l.No, Description: l.Description, Amount: inv.Money(l.AmountMinor)})
			continue
		}
		lv := lineView{
			No:          l.No,
			Kind:        billing.KindLabel(l.Kind),
			Description: l.Description,
			Quantity:    shownQuantity(l.Quantity, l.Meter),
			Unit:        unitLabel(l.Unit),
			Amount:      inv.Money(l.AmountMinor),
		}
		if l.UnitPrice != nil {
			lv.UnitPrice = inv.Currency.Amount(*l.UnitPrice)
		} else if len(l.Tiers) > 0 {
			lv.UnitPrice = "tiered"
		}
		for _, t := range l.Tiers {
			p := inv.Currency.Amount(t.UnitPrice)
			if !t.FlatFee.IsZero() {
				p += " + " + inv.Currency.Amount(t.FlatFee) + " flat"
			}
			lv.Tiers = append(lv.Tiers, tierView{Label: fmt.Sprintf("Tier %d", t.TierIndex+1),
				Quantity: shownQuantity(t.Quantity, l.Meter), UnitPrice: p, Amount: inv.Currency.Round(t.Amount).StringFixed(places)})
		}
		switch {
		case isSubtotalCredit(l):
			// The description says what the grant is ("Included GPU-hours
			// of …", "Promotional credit (…)"): no kind before it. Money
			// has no quantity: the amount says it all.
			lv.Kind = ""
			if l.Meter == "" {
				lv.Quantity, lv.Unit = "", ""
			}
			credited = append(credited, lv)
			continue
		case l.Kind == billing.KindAdjustment || l.Kind == billing.KindCredit:
			lv.Note = "For period " + nameOr(l.AdjustsPeriod, "(not named)")
			if l.AdjustsInvoice != "" {
				lv.Note += ", invoice " + l.AdjustsInvoice
			}
			if l.AdjustsKind != "" {
				lv.Note += " (" + billing.KindLabel(l.AdjustsKind) + ")"
			}
			corrections = append(corrections, lv)
			continue
		case l.Kind == pricing.KindReserved:
			lv.Note = "Covered by the reservation fee"
		}
		if !l.From.Equal(inv.PeriodStart) || !l.To.Equal(inv.PeriodEnd) {
			span := when(l.From) + " to " + when(l.To)
			if lv.Note != "" {
				span = lv.Note + "; " + span
			}
			lv.Note = span
		}
		if l.SKU == "" {
			other = append(other, lv)
			continue
		}
		// Under its SKU's heading a line need not name the SKU again.
		lv.Description = strings.TrimPrefix(lv.Description, l.SKU+" ")
		g := group(l.SKU)
		g.Lines = append(g.Lines, lv)
	}
	if len(other) > 0 {
		v.Groups = append(v.Groups, lineGroup{Title: otherGroup, Lines: other})
	}
	if len(corrections) > 0 {
		v.Groups = append(v.Groups, lineGroup{Title: correctionsGroup, Lines: corrections})
	}
	if len(credited) > 0 {
		v.Groups = append(v.Groups, lineGroup{Title: creditsGroup, Lines: credited})
	}
	v.ShowTaxTotal = len(v.Taxes) != 1
	for _, r := range inv.Reservations {
		v.Reservations = append(v.Reservations, reservationRow{SKU: r.SKU, Reserved: shownQuantity(r.ReservedGPUHours, pricing.GPUHours),
			Covered: shownQuantity(r.CoveredGPUHours, pricing.GPUHours), Unused: shownQuantity(r.UnusedGPUHours, pricing.GPUHours),
			OnDemand: shownQuantity(r.OnDemandGPUHours, pricing.GPUHours), Burst: shownQuantity(r.BurstGPUHours, pricing.GPUHours)})
	}
	v.Unpriced, v.UnpricedAppendix = unpricedUsage(inv.Unpriced)
	return v
}

// unpricedUsage is usage the book does not price, not billed: one line
// for the invoice and the rows for its appendix.
func unpricedUsage(us []pricing.UnpricedUsage) (string, []unpricedRow) {
	if len(us) == 0 {
		return "", nil
	}
	skus := map[string]bool{}
	rows := make([]unpricedRow, len(us))
	for i, u := range us {
		skus[u.SKU] = true
		spec := u.Meter.Spec()
		rows[i] = unpricedRow{SKU: u.SKU, What: cmp.Or(spec.Noun, string(u.Meter)), Quantity: shownQuantity(u.Quantity, u.Meter), Unit: spec.Unit}
	}
	return fmt.Sprintf("Not billed: usage the price book does not price (%s on %s), listed in the appendix.",
		plural(len(us), "meter"), plural(len(skus), "SKU")), rows
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// unitLabel is a line's unit for people: an invoice stored before units
// were written as such names the meter ("gpu_hours").
func unitLabel(unit string) string {
	if p, ok := meter.LookupPriced(unit); ok {
		return p.Unit
	}
	return unit
}

// paymentTerms says when an invoice is due after it is issued, with the
// terms' note.
func paymentTerms(inv *billing.Invoice) string {
	terms := fmt.Sprintf("%d days", inv.PaymentDays)
	if inv.PaymentDays == 0 {
		terms = "due on receipt"
	}
	if inv.PaymentNote != "" {
		terms += "; " + inv.PaymentNote
	}
	return terms
}

// dueText is the due date of an issued invoice, or when a draft will be
// due.
func dueText(inv *billing.Invoice) string {
	switch {
	case inv.DueDate != "":
		return inv.DueDate
	case inv.PaymentDays == 0:
		return "on receipt"
	}
	return fmt.Sprintf("%d days after issue", inv.PaymentDays)
}

// shownQuantity is a quantity as HTML and PDF print it: a meter's to the
// meter table's places for its unit, others (months) to at most 3.
// Amounts come from the exact quantities, which JSON and CSV carry.
func shownQuantity(q decimal.Decimal, m pricing.Meter) string {
	if spec := m.Spec(); spec.Name != "" {
		return q.StringFixed(spec.Places) // a meter's unit shows its places everywhere
	}
	return q.Round(3).String()
}

func invoiceParty(p billing.Party) partyView {
	return partyView{Name: p.Name, Address: p.Address, TaxID: p.TaxID, Department: p.Department}
}

// roundingNote closes every rendering: what the amounts are.
const roundingNote = "Each line is rounded once to the minor unit; the totals add up the rounded lines. Tier amounts are shown rounded, quantities to their unit's places."

// invoiceHTML is parsed once from a literal; Must cannot fail at run time.
var invoiceHTML = template.Must(template.New("invoice").Parse(invoiceHTMLText))

const invoiceHTMLText = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Invoice {{.Number}}</title>
<style>
@page { size: A4; margin: 15mm; }
* { box-sizing: border-box; }
body { font-family: Helvetica, Arial, sans-serif; font-size: 10pt; color: #111; margin: 0 auto; max-width: 180mm; padding: 10mm 0; }
h1 { font-size: 18pt; margin: 0 0 2mm; }
.banner { border: 2px solid #b00; color: #b00; font-weight: bold; font-size: 14pt; padding: 2mm 4mm; margin: 0 0 5mm; text-align: center; }
.parties { display: flex; justify-content: space-between; gap: 10mm; margin-bottom: 6mm; }
.party { flex: 1; }
.party h2 { font-size: 9pt; text-transform: uppercase; color: #555; margin: 0 0 1mm; }
.party p { margin: 0; }
.meta { border-collapse: collapse; margin-bottom: 6mm; }
.meta th { text-align: left; font-weight: normal; color: #555; padding: 0.5mm 4mm 0.5mm 0; }
.meta td { padding: 0.5mm 0; }
table.lines { width: 100%; border-collapse: collapse; }
table.lines th { text-align: left; border-bottom: 1px solid #111; padding: 1mm; font-size: 9pt; }
table.lines td { padding: 1mm; vertical-align: top; border-bottom: 1px solid #ddd; }
table.lines .num { text-align: right; white-space: nowrap; }
table.lines .unit { white-space: nowrap; }
table.lines tr.group th { border-bottom: none; padding-top: 4mm; font-size: 10pt; }
table.lines tr.tier td { border-bottom: none; color: #555; font-size: 8.5pt; padding-top: 0; }
table.lines tr.tier td.tierlabel { padding-left: 6mm; }
.note { color: #555; font-size: 8.5pt; }
table.totals { margin: 4mm 0 0 auto; border-collapse: collapse; }
table.totals td { padding: 1mm 0 1mm 8mm; }
table.totals td.num { text-align: right; white-space: nowrap; }
table.totals tr.total td { border-top: 2px solid #111; font-weight: bold; }
.notes { margin-top: 6mm; font-size: 9pt; }
.notes table { border-collapse: collapse; }
.notes th, .notes td { padding: 0.5mm 3mm 0.5mm 0; text-align: right; }
.notes th:first-child, .notes td:first-child { text-align: left; }
.appendix { page-break-before: always; break-before: page; margin-top: 10mm; font-size: 9pt; }
.appendix h2 { font-size: 11pt; }
.appendix table { border-collapse: collapse; }
.appendix th, .appendix td { padding: 0.5mm 4mm 0.5mm 0; text-align: left; }
.appendix .num { text-align: right; }
footer { margin-top: 10mm; border-top: 1px solid #ddd; padding-top: 2mm; color: #555; font-size: 8pt; }
thead { display: table-header-group; }
tr { page-break-inside: avoid; }
{{if .HasCredits}}table.totals tr.aftertax td { border-top: 1px solid #111; }
table.totals tr.prepaid td { color: #333; }
.notes.credits td.unit, .notes.credits th.unit { text-align: left; white-space: nowrap; }
.notes.credits td { vertical-align: top; }
.notes.credits td:not(:first-child) { white-space: nowrap; }
.notes.credits p.note { color: #555; font-size: 8.5pt; }
{{end}}</style>
</head>
<body>
{{with .Banner}}<div class="banner">{{.}}</div>
{{end}}<h1>Invoice {{.Number}}</h1>
<div class="parties">
<div class="party issuer">
<h2>From</h2>
<p><strong>{{.Issuer.Name}}</strong></p>
{{range .Issuer.Address}}<p>{{.}}</p>
{{end}}{{with .Issuer.TaxID}}<p>Tax ID: {{.}}</p>
{{end}}</div>
<div class="party customer">
<h2>Bill to</h2>
<p><strong>{{.Customer.Name}}</strong></p>
{{range .Customer.Address}}<p>{{.}}</p>
{{end}}{{with .Customer.TaxID}}<p>Tax ID: {{.}}</p>
{{end}}{{with .Customer.Department}}<p>Department: {{.}}</p>
{{end}}<p>Tenant: {{.Tenant}}</p>
</div>
</div>
<table class="meta">
<tr><th>Invoice number</th><td>{{.Number}}</td></tr>
{{with .Issued}}<tr><th>Issued</th><td>{{.}}</td></tr>
{{end}}<tr><th>Due</th><td>{{.Due}}</td></tr>
{{with .Terms}}<tr><th>Payment</th><td>{{.}}</td></tr>
{{end}}<tr><th>Period</th><td>{{.Period}}: {{.Start}} to {{.End}} ({{.Zone}})</td></tr>
<tr><th>Currency</th><td>{{.Currency}}</td></tr>
</table>
<table class="lines">
<thead><tr><th>No</th><th>Description</th><th class="num">Quantity</th><th>Unit</th><th class="num">Unit price</th><th class="num">Amount ({{.Currency}})</th></tr></thead>
{{range .Groups}}<tbody>
<tr class="group"><th colspan="6">{{.Title}}</th></tr>
{{range .Lines}}<tr class="line"><td>{{.No}}</td><td>{{with .Kind}}{{.}}: {{end}}{{.Description}}{{with .Note}}<br><span class="note">{{.}}</span>{{end}}</td><td class="num">{{.Quantity}}</td><td class="unit">{{.Unit}}</td><td class="num">{{.UnitPrice}}</td><td class="num amount">{{.Amount}}</td></tr>
{{range .Tiers}}<tr class="tier"><td></td><td class="tierlabel">{{.Label}}</td><td class="num">{{.Quantity}}</td><td></td><td class="num">{{.UnitPrice}}</td><td class="num">{{.Amount}}</td></tr>
{{end}}{{end}}</tbody>
{{end}}</table>
<table class="totals">
<tr class="subtotal"><td>{{.SubtotalLabel}}</td><td class="num">{{.Subtotal}} {{.Currency}}</td></tr>
{{range .Taxes}}<tr class="tax"><td>{{.Description}}</td><td class="num">{{.Amount}} {{$.Currency}}</td></tr>
{{end}}{{if .ShowTaxTotal}}<tr class="taxtotal"><td>Tax</td><td class="num">{{.TaxTotal}} {{.Currency}}</td></tr>
{{end}}{{if .Prepaid}}<tr class="aftertax"><td>Total after tax</td><td class="num">{{.AfterTax}} {{.Currency}}</td></tr>
{{range .Prepaid}}<tr class="prepaid"><td>{{.Description}}</td><td class="num">{{.Amount}} {{$.Currency}}</td></tr>
{{end}}{{end}}<tr class="total"><td>{{.TotalLabel}}</td><td class="num">{{.Total}} {{.Currency}}</td></tr>
</table>
{{if .Balances}}<div class="notes credits">
<p>Credit balances over the period:</p>
<table>
<tr><th>Grant</th><th class="unit">Unit</th><th>Before</th><th>Used</th><th>Ended</th><th>After</th></tr>
{{range .Balances}}<tr><td>{{.Description}}</td><td class="unit">{{.Unit}}</td><td>{{.Before}}</td><td>{{.Used}}</td><td>{{.Ended}}</td><td>{{.After}}</td></tr>
{{end}}</table>
<p class="note">{{.BalancesNote}}</p>
{{range .Expiring}}<p class="expiring">{{.}}</p>
{{end}}</div>
{{end}}{{if .Reservations}}<div class="notes">
<p>Reserved capacity (GPU-hours):</p>
<table>
<tr><th>SKU</th><th>Reserved</th><th>Covered</th><th>Unused</th><th>On demand</th><th>Burst</th></tr>
{{range .Reservations}}<tr><td>{{.SKU}}</td><td>{{.Reserved}}</td><td>{{.Covered}}</td><td>{{.Unused}}</td><td>{{.OnDemand}}</td><td>{{.Burst}}</td></tr>
{{end}}</table>
</div>
{{end}}{{with .Unpriced}}<div class="notes">
<p>{{.}}</p>
</div>
{{end}}<footer>
Invoice {{.ID}} &middot; price book {{.BookVersion}} &middot; inputs {{.InputsHash}}<br>
{{.RoundingNote}}
</footer>
{{if .UnpricedAppendix}}<section class="appendix">
<h2>Appendix: usage not priced (not billed)</h2>
<div class="scroll"><table>
<thead><tr><th>SKU</th><th>Usage</th><th class="num">Quantity</th><th>Unit</th></tr></thead>
<tbody>
{{range .UnpricedAppendix}}<tr><td>{{.SKU}}</td><td>{{.What}}</td><td class="num">{{.Quantity}}</td><td>{{.Unit}}</td></tr>
{{end}}</tbody>
</table></div>
</section>
{{end}}</body>
</html>
`
