package reports_test

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"html"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/debiantest"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/gpumeter/gpumeter/reports"
)

const customerName = `Müller & Söhne <script>alert(1)</script>`

// priceInvoicePeriod prices usage for period against testdata's book (and
// contract), as the billing run does.
func priceInvoicePeriod(t *testing.T, p billing.Period, contract bool, usage []pricing.Usage) pricing.Result {
	t.Helper()
	book, err := pricing.ParseBook(readTestdata(t, "quote-book.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	in := pricing.Input{Tenant: "acme", Book: book, Start: p.Start, End: p.End, Usage: usage}
	if contract {
		if in.Contract, err = pricing.ParseContract(readTestdata(t, "quote-contract.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	r, err := pricing.Price(in)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func use(hour time.Time, meter pricing.Meter, qty string) pricing.Usage {
	return pricing.Usage{Hour: hour.UTC(), SKU: "H100-SXM5-80GB", Meter: meter, Quantity: decimal.RequireFromString(qty)}
}

// invoices builds acme's March 2026 invoice (Europe/Berlin, 19 % tax) as
// a draft and finalized: a reservation fee, covered usage, a burst over
// three tiers (the first with a flat fee), energy on demand, a true-up,
// unpriced PCIe traffic, and corrections of February's invoice GM-000007
// (more GPU-hours: an adjustment; less energy and so a smaller true-up:
// credits).
func invoices(t *testing.T) (draft, final *billing.Invoice) {
	t.Helper()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	issuer := billing.Issuer{ID: "gm", Name: "GPU Metering GmbH", Address: []string{"Hauptstraße 1", "10115 Berlin"},
		TaxID: "DE123456789", NumberPrefix: "GM-", PaymentTerms: billing.PaymentTerms{Days: ptr(14), Note: "Bank transfer to IBAN DE89 3704 0044 0532 0130 00"}}
	customer := billing.Customer{Tenant: "acme", Department: "research", Name: customerName,
		Address: []string{"Königsallee 7", "40212 Düsseldorf"}, TaxID: "DE987654321", Currency: "USD",
		TimeZone: "Europe/Berlin", TaxRate: decimal.RequireFromString("19")}

	feb, err := billing.MonthlyPeriod("2026-02", berlin)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := billing.BuildInvoice(billing.Draft{ID: "acme/2026-02/1", Issuer: issuer, Customer: customer, Period: feb,
		Priced: priceInvoicePeriod(t, feb, false, []pricing.Usage{
			use(feb.Start, pricing.GPUHours, "3"), use(feb.Start, pricing.Meter("energy_kwh"), "10")}),
		InputsHash: "feb-inputs", Now: feb.End.Add(48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	orig.Status, orig.Number, orig.Seq = billing.StatusFinalized, "GM-000007", 7
	repriced := priceInvoicePeriod(t, feb, false, []pricing.Usage{
		use(feb.Start, pricing.GPUHours, "4"), use(feb.Start, pricing.Meter("energy_kwh"), "4")})
	corrections := billing.Correct(orig, billing.BilledFor(orig, nil), repriced)

	mar, err := billing.MonthlyPeriod("2026-03", berlin)
	if err != nil {
		t.Fatal(err)
	}
	h := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	priced := priceInvoicePeriod(t, mar, true, []pricing.Usage{
		use(h, pricing.GPUHours, "6"),
		use(h.Add(time.Hour), pricing.GPUHours, "2.5"),
		use(h.Add(time.Hour), pricing.Meter("pcie_gib"), "2.5"),
		use(h.Add(2*time.Hour), pricing.Meter("energy_kwh"), "1.25"),
		use(h.Add(30*time.Hour), pricing.GPUHours, "16"),
	})
	draft, err = billing.BuildInvoice(billing.Draft{ID: "acme/2026-03/1", Issuer: issuer, Customer: customer, Period: mar,
		Priced: priced, CorrectionLines: corrections,
		Corrections: []billing.Correction{{InvoiceID: orig.ID, Number: orig.Number, Period: "2026-02", InputsHash: "feb-inputs-2"}},
		BookDigest:  "sha256:book", InputsHash: "sha256:0f3a9c", RollupVersion: 12,
		Now: time.Date(2026, 4, 2, 3, 4, 5, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	f := *draft
	finalized := time.Date(2026, 4, 3, 8, 0, 0, 0, time.UTC)
	f.Status, f.Number, f.Seq, f.SequenceKey, f.FinalizedAt = billing.StatusFinalized, "GM-000042", 42, "gm", &finalized
	f.DueDate = "2026-04-17"
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	return draft, &f
}

// The fixture must hold what the renderers are tested on; otherwise the
// checks below pass over nothing.
func TestInvoiceFixtureHasEveryKindOfLine(t *testing.T) {
	draft, _ := invoices(t)
	kinds := map[pricing.Kind]int{}
	maxTiers := 0
	for _, l := range draft.Lines {
		kinds[l.Kind]++
		maxTiers = max(maxTiers, len(l.Tiers))
		if (l.Kind == billing.KindAdjustment || l.Kind == billing.KindCredit) && (l.AdjustsPeriod != "2026-02" || l.AdjustsInvoice != "GM-000007") {
			t.Errorf("line %d corrects %q on %q, want 2026-02 on GM-000007", l.No, l.AdjustsPeriod, l.AdjustsInvoice)
		}
	}
	for _, k := range []pricing.Kind{pricing.KindOnDemand, pricing.KindReserved, pricing.KindBurst, pricing.KindReservationFee,
		pricing.KindTrueUp, billing.KindAdjustment, billing.KindCredit, billing.KindTax} {
		if kinds[k] == 0 {
			t.Errorf("no %s line in %v", k, kinds)
		}
	}
	if maxTiers < 3 {
		t.Errorf("no line with three tiers (most: %d)", maxTiers)
	}
	if draft.TaxMinor == 0 || len(draft.Unpriced) == 0 || len(draft.Reservations) == 0 {
		t.Errorf("tax %d, unpriced %v, reservations %v: want all", draft.TaxMinor, draft.Unpriced, draft.Reservations)
	}
	if err := draft.Validate(); err != nil {
		t.Error(err)
	}
}

func TestWriteInvoiceJSONWritesTheStoredBytes(t *testing.T) {
	_, inv := invoices(t)
	doc, err := inv.Document()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := reports.WriteInvoiceJSON(&buf, doc); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), doc) {
		t.Errorf("got\n%s\nwant the document\n%s", buf.Bytes(), doc)
	}
	buf.Reset()
	if err := reports.WriteInvoiceJSON(&buf, doc[:len(doc)-1]); err == nil || buf.Len() != 0 {
		t.Errorf("truncated document: error %v, wrote %d bytes", err, buf.Len())
	}
	if err := reports.WriteInvoiceJSON(&failingWriter{n: 10}, doc); !errors.Is(err, errFull) {
		t.Errorf("failing writer: error %v", err)
	}
}

func TestWriteInvoiceCSV(t *testing.T) {
	draft, final := invoices(t)
	for _, inv := range []*billing.Invoice{draft, final} {
		t.Run(string(inv.Status), func(t *testing.T) {
			var buf bytes.Buffer
			if err := reports.WriteInvoiceCSV(&buf, inv); err != nil {
				t.Fatal(err)
			}
			rows, err := csv.NewReader(bytes.NewReader(buf.Bytes())).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			header := strings.Join(rows[0], ",")
			if want := "invoice_number,invoice_id,tenant,period,line_no,kind,sku,meter,description,from,to,quantity," +
				"unit,unit_price,amount_exact,amount,currency,adjusts_period,adjusts_invoice,due_date,payment_terms"; header != want {
				t.Fatalf("header %s\nwant   %s", header, want)
			}
			if len(rows) != 1+len(inv.Lines)+3 {
				t.Fatalf("%d rows, want header + %d lines + 3 totals", len(rows), len(inv.Lines))
			}
			col := map[string]int{}
			for i, c := range rows[0] {
				col[c] = i
			}
			// The lines' rounded amounts, read back, add up to the stored
			// subtotal: the CSV is usable on its own.
			var sub decimal.Decimal
			for i, l := range inv.Lines {
				r := rows[1+i]
				if r[col["invoice_number"]] != inv.Number || r[col["invoice_id"]] != inv.ID || r[col["period"]] != "2026-03" {
					t.Errorf("line %d: invoice columns %v", l.No, r[:4])
				}
				if r[col["line_no"]] != strconv.Itoa(l.No) || r[col["kind"]] != string(l.Kind) || r[col["sku"]] != l.SKU {
					t.Errorf("line %d: no/kind/sku %s/%s/%s", l.No, r[col["line_no"]], r[col["kind"]], r[col["sku"]])
				}
				if got, want := r[col["amount"]], billing.FormatMinor(l.AmountMinor, 2); got != want {
					t.Errorf("line %d: amount %s, want %s", l.No, got, want)
				}
				if got, want := r[col["amount_exact"]], l.Amount.StringFixed(pricing.StoragePlaces); got != want {
					t.Errorf("line %d: amount_exact %s, want %s", l.No, got, want)
				}
				if r[col["adjusts_invoice"]] != l.AdjustsInvoice || r[col["adjusts_period"]] != l.AdjustsPeriod {
					t.Errorf("line %d: adjusts %s %s", l.No, r[col["adjusts_period"]], r[col["adjusts_invoice"]])
				}
				if l.Kind != billing.KindTax {
					sub = sub.Add(decimal.RequireFromString(r[col["amount"]]))
				}
			}
			totals := rows[1+len(inv.Lines):]
			for i, want := range []struct {
				kind  string
				minor int64
			}{{"subtotal", inv.SubtotalMinor}, {"tax_total", inv.TaxMinor}, {"total", inv.TotalMinor}} {
				r := totals[i]
				if r[col["kind"]] != want.kind || r[col["line_no"]] != "" ||
					r[col["amount"]] != billing.FormatMinor(want.minor, 2) || r[col["currency"]] != "USD" {
					t.Errorf("%s row %v, want amount %s USD", want.kind, r, billing.FormatMinor(want.minor, 2))
				}
			}
			if got := sub.StringFixed(2); got != billing.FormatMinor(inv.SubtotalMinor, 2) {
				t.Errorf("line amounts add up to %s, subtotal row %s", got, billing.FormatMinor(inv.SubtotalMinor, 2))
			}
			if inv.Status == billing.StatusFinalized {
				golden(t, "invoice-finalized.csv", buf.Bytes())
			}
		})
	}
	if err := reports.WriteInvoiceCSV(&failingWriter{n: 100}, final); !errors.Is(err, errFull) {
		t.Errorf("failing writer: error %v", err)
	}
}

var (
	htmlLineRow  = regexp.MustCompile(`<tr class="line"><td>(\d+)</td>.*<td class="num amount">([^<]*)</td></tr>`)
	htmlTaxRow   = regexp.MustCompile(`<tr class="tax"><td>(Tax [^<]*)</td><td class="num">([^<]*) USD</td></tr>`)
	htmlTotalRow = regexp.MustCompile(`<tr class="(subtotal|taxtotal|total)"><td>[^<]*</td><td class="num">([^<]*) USD</td></tr>`)
)

func TestWriteInvoiceHTML(t *testing.T) {
	draft, final := invoices(t)
	void := *final
	voided := time.Date(2026, 4, 20, 9, 0, 0, 0, time.UTC)
	void.Status, void.VoidedAt, void.VoidReason = billing.StatusVoid, &voided, "billed to the wrong department"
	for _, tc := range []struct {
		name    string
		inv     *billing.Invoice
		heading string
		banner  string
	}{
		{"draft: DRAFT for the number", draft, "<h1>Invoice DRAFT</h1>", `<div class="banner">DRAFT</div>`},
		{"finalized: the number, no banner", final, "<h1>Invoice GM-000042</h1>", ""},
		{"void: the number and the reason", &void, "<h1>Invoice GM-000042</h1>", `<div class="banner">VOID: billed to the wrong department</div>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := reports.WriteInvoiceHTML(&buf, tc.inv); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			if !strings.Contains(out, tc.heading) {
				t.Errorf("no %s", tc.heading)
			}
			if got := strings.Contains(out, `class="banner"`); got != (tc.banner != "") || !strings.Contains(out, tc.banner) {
				t.Errorf("banner: want %q", tc.banner)
			}
			inv := tc.inv
			amounts := map[string]string{}
			for _, m := range htmlLineRow.FindAllStringSubmatch(out, -1) {
				amounts[m[1]] = m[2]
			}
			// The tax row names no line number (it would name itself).
			for _, m := range htmlTaxRow.FindAllStringSubmatch(out, -1) {
				for _, l := range inv.Lines {
					if l.Kind == billing.KindTax && l.Description == html.UnescapeString(m[1]) {
						amounts[strconv.Itoa(l.No)] = m[2]
					}
				}
			}
			if len(amounts) != len(inv.Lines) {
				t.Errorf("%d lines shown, want %d", len(amounts), len(inv.Lines))
			}
			for _, l := range inv.Lines {
				if got, want := amounts[strconv.Itoa(l.No)], inv.Money(l.AmountMinor); got != want {
					t.Errorf("line %d (%s): amount %q, want %q", l.No, l.Kind, got, want)
				}
			}
			totals := map[string]string{}
			for _, m := range htmlTotalRow.FindAllStringSubmatch(out, -1) {
				totals[m[1]] = m[2]
			}
			// One tax line: it shows the tax, with no second tax row.
			want := map[string]string{"subtotal": inv.Money(inv.SubtotalMinor), "total": inv.Money(inv.TotalMinor)}
			if fmt.Sprint(totals) != fmt.Sprint(want) {
				t.Errorf("totals %v, want %v", totals, want)
			}
			// Escaped, not markup.
			if !strings.Contains(out, "Müller &amp; Söhne &lt;script&gt;alert(1)&lt;/script&gt;") {
				t.Error("customer name not escaped")
			}
			text := html.UnescapeString(out)
			for _, s := range []string{
				"GPU Metering GmbH", "Hauptstraße 1", "Tax ID: DE123456789", "Königsallee 7", "Tax ID: DE987654321",
				"Department: research", "Tenant: acme",
				// Local midnights, not 2026-02-28 23:00 UTC.
				"2026-03: 2026-03-01 00:00 to 2026-04-01 00:00 (Europe/Berlin)",
				"<th colspan=\"6\">H100-SXM5-80GB</th>", "<th colspan=\"6\">Other charges</th>",
				"<th colspan=\"6\">Corrections to earlier periods</th>",
				"For period 2026-02, invoice GM-000007 (On demand)", "Commitment true-up", "Reservation fee", "Burst",
				"Covered by the reservation fee", "Tier 3", "10.50 + 4.50 flat",
				"Tax 19% on",
				// Unpriced usage: one line, the rows in the appendix.
				"Not billed: usage the price book does not price (1 meter on 1 SKU), listed in the appendix.", "Appendix: usage not priced (not billed)",
				`<tr><td>H100-SXM5-80GB</td><td>PCIe traffic</td><td class="num">2.50</td><td>GiB</td></tr>`,
				// Units and descriptions for people, tiers rounded.
				`<td class="unit">GPU-hours</td>`, "<td>On demand: energy<", "Reservation fee: 4 GPU-equivalents of H100-SXM5-80GB at 1.80 USD per GPU-hour",
				"<th>Payment</th><td>Bank transfer to IBAN DE89 3704 0044 0532 0130 00</td>",
				"price book quote-test", "inputs sha256:0f3a9c",
			} {
				if !strings.Contains(text, s) {
					t.Errorf("no %q", s)
				}
			}
			if strings.Contains(out, "<script") || strings.Contains(out, "2026-02-28 23:00") {
				t.Error("unescaped name or a time in UTC")
			}
			for _, s := range []string{"exact ", "(line ", "reservations[", "gpu_hours", "energy_kwh", "on demand on demand"} {
				if strings.Contains(strings.ToLower(text), strings.ToLower(s)) {
					t.Errorf("shows %q", s)
				}
			}
			due := "<th>Due</th><td>14 days after issue</td>"
			if inv.Status != billing.StatusDraft {
				due = "<th>Due</th><td>2026-04-17</td>"
			}
			if !strings.Contains(out, due) {
				t.Errorf("no %s", due)
			}
			if inv == final {
				if !strings.Contains(out, "<th>Issued</th><td>2026-04-03</td>") {
					t.Error("no issue date")
				}
				golden(t, "invoice-finalized.html", buf.Bytes())
			}
		})
	}
	var full bytes.Buffer
	if err := reports.WriteInvoiceHTML(&full, final); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, full.Len() - 5} {
		if err := reports.WriteInvoiceHTML(&failingWriter{n: n}, final); !errors.Is(err, errFull) {
			t.Errorf("failing after %d bytes: error %v", n, err)
		}
	}
}

// A currency that rounds ties to even stores 12.345 as 12.34; a renderer
// that rounded the exact amount itself (half away from zero) would print
// 12.35. Every format must print the stored 12.34.
func TestInvoiceRenderersPrintTheStoredMinorUnits(t *testing.T) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	inv := &billing.Invoice{
		ID: "t/2026-03/1", Status: billing.StatusDraft, Tenant: "t", PeriodLabel: "2026-03",
		PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0), TimeZone: "UTC",
		Currency: pricing.Currency{Code: "EUR", MinorUnits: 2, Rounding: pricing.HalfEven},
		Lines: []billing.Line{{No: 1, Kind: pricing.KindOnDemand, SKU: "A100", Meter: pricing.GPUHours,
			Description: "A100 gpu_hours", From: start, To: start.AddDate(0, 1, 0), Quantity: decimal.RequireFromString("2.469"),
			Unit: "gpu_hours", Amount: decimal.RequireFromString("12.345"), AmountMinor: 1234}},
		SubtotalMinor: 1234, TotalMinor: 1234, CreatedAt: start.AddDate(0, 1, 1),
	}
	if err := inv.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, render := range map[string]func(*bytes.Buffer) error{
		"csv":  func(b *bytes.Buffer) error { return reports.WriteInvoiceCSV(b, inv) },
		"html": func(b *bytes.Buffer) error { return reports.WriteInvoiceHTML(b, inv) },
		"pdf": func(b *bytes.Buffer) error {
			var pdf bytes.Buffer
			if err := reports.WriteInvoicePDF(&pdf, inv); err != nil {
				return err
			}
			b.WriteString(pdfText(t, pdf.Bytes()))
			return nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := render(&buf); err != nil {
				t.Fatal(err)
			}
			if out := buf.String(); !strings.Contains(out, "12.34") || strings.Contains(out, "12.35") {
				t.Errorf("want 12.34, never 12.35:\n%s", out)
			}
		})
	}
}

func TestWriteInvoicePDF(t *testing.T) {
	draft, final := invoices(t)
	for _, inv := range []*billing.Invoice{draft, final} {
		t.Run(string(inv.Status), func(t *testing.T) {
			var buf bytes.Buffer
			if err := reports.WriteInvoicePDF(&buf, inv); err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(buf.Bytes(), []byte("%PDF-")) {
				t.Fatalf("not a PDF: %q", buf.Bytes()[:min(20, buf.Len())])
			}
			var again bytes.Buffer
			if err := reports.WriteInvoicePDF(&again, inv); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), again.Bytes()) {
				t.Error("two renderings of one invoice differ")
			}
			text := pdfText(t, buf.Bytes())
			number := "GM-000042"
			if inv.Status == billing.StatusDraft {
				number = "DRAFT"
			}
			for _, s := range []string{
				"Invoice " + number, "Total", inv.Money(inv.TotalMinor) + " USD", inv.Money(inv.SubtotalMinor) + " USD",
				"Müller & Söhne <script>", "Hauptstraße 1", "Düsseldorf", "Tenant: acme",
				"2026-03-01 00:00 to 2026-04-01 00:00 (Europe/Berlin)", "Corrections to earlier periods",
				"GM-000007", "Tier 3", "price book quote-test", "sha256:0f3a9c", "Page 1/2", "Page 2/2",
				"Appendix: usage not priced (not billed)", "PCIe traffic", "Due", "Bank transfer to IBAN DE89",
			} {
				if !strings.Contains(text, s) {
					t.Errorf("no %q in\n%s", s, text)
				}
			}
			for _, l := range inv.Lines {
				if !strings.Contains(text, inv.Money(l.AmountMinor)) {
					t.Errorf("line %d: no amount %s", l.No, inv.Money(l.AmountMinor))
				}
			}
		})
	}
	if err := reports.WriteInvoicePDF(&failingWriter{n: 100}, final); !errors.Is(err, errFull) {
		t.Errorf("failing writer: error %v", err)
	}
}

// A long invoice breaks onto more pages; every line is printed once, the
// table header and the current group's title repeat, and the totals come
// last.
func TestWriteInvoicePDFBreaksPages(t *testing.T) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	inv := &billing.Invoice{
		ID: "big/2026-03/1", Number: "GM-000100", Status: billing.StatusFinalized, Tenant: "big", PeriodLabel: "2026-03",
		PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0), TimeZone: "UTC",
		Currency: pricing.Currency{Code: "EUR", MinorUnits: 2, Rounding: pricing.HalfAwayFromZero},
		Issuer:   billing.Party{Name: "Issuer"}, Customer: billing.Party{Name: "Customer Łódź"},
		CreatedAt: start.AddDate(0, 1, 1),
	}
	for i := 1; i <= 150; i++ {
		minor := int64(100000 + i)
		inv.Lines = append(inv.Lines, billing.Line{No: i, Kind: pricing.KindOnDemand, SKU: fmt.Sprintf("SKU-%d", i%7),
			Meter: pricing.GPUHours, Description: fmt.Sprintf("line-%03d %s", i, strings.Repeat("long description ", i%4)),
			From: inv.PeriodStart, To: inv.PeriodEnd, Quantity: decimal.NewFromInt(int64(i)), Unit: "gpu_hours",
			Amount: decimal.New(minor, -2), AmountMinor: minor})
		inv.SubtotalMinor += minor
	}
	inv.TotalMinor = inv.SubtotalMinor
	if err := inv.Validate(); err != nil {
		t.Fatal(err)
	}
	pages := pdfPages(t, func(w io.Writer) error { return reports.WriteInvoicePDF(w, inv) }, 3)
	text := strings.Join(pages, "\f")
	for i := 1; i <= 150; i++ {
		if n := strings.Count(text, fmt.Sprintf("line-%03d", i)); n != 1 {
			t.Errorf("line-%03d printed %d times", i, n)
		}
	}
	for i, p := range pages {
		if !strings.Contains(p, "Description") || !strings.Contains(p, fmt.Sprintf("Page %d/%d", i+1, len(pages))) {
			t.Errorf("page %d: no table header or page number:\n%s", i+1, p)
		}
	}
	// A group that goes on over a page break is named again.
	if !regexp.MustCompile(`(?m)^\s*SKU-\d \(continued\)$`).MatchString(strings.Join(pages[1:], "\f")) {
		t.Errorf("no group continued on a later page:\n%s", pages[1])
	}
	last := pages[len(pages)-1]
	if !strings.Contains(last, "Total") || !strings.Contains(last, inv.Money(inv.TotalMinor)+" EUR") {
		t.Errorf("last page has no total %s:\n%s", inv.Money(inv.TotalMinor), last)
	}
	// The embedded font has Polish letters: the name prints as it is.
	if !strings.Contains(pages[0], "Customer Łódź") {
		t.Errorf("customer name:\n%s", pages[0])
	}
}

// pdfText is pdftotext's text of pdf, pages separated by form feeds.
// pdfPages renders a PDF with write and returns its text page by page,
// failing unless it has at least atLeast pages.
func pdfPages(t *testing.T, write func(io.Writer) error, atLeast int) []string {
	t.Helper()
	var pdf bytes.Buffer
	if err := write(&pdf); err != nil {
		t.Fatal(err)
	}
	pages := strings.Split(strings.TrimSuffix(pdfText(t, pdf.Bytes()), "\f"), "\f")
	if len(pages) < atLeast {
		t.Fatalf("%d pages, want at least %d", len(pages), atLeast)
	}
	return pages
}

func pdfText(t *testing.T, pdf []byte) string {
	t.Helper()
	bin := pdftotext(t)
	path := filepath.Join(t.TempDir(), "invoice.pdf")
	if err := os.WriteFile(path, pdf, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-layout", "-enc", "UTF-8", path, "-").CombinedOutput()
	if err != nil {
		t.Fatalf("pdftotext: %v\n%s", err, out)
	}
	return string(out)
}

// pdftotext finds Debian's pdftotext (poppler-utils), installing it when
// it is missing: the PDF check is part of make test, never skipped.
func pdftotext(t *testing.T) string {
	t.Helper()
	return debiantest.Tool(t, "poppler-utils", "pdftotext")
}

func ptr[T any](v T) *T { return &v }
