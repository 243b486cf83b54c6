package reports

import (
	"fmt"
	"io"
	"time"

	"codeberg.org/go-pdf/fpdf"

	"github.com/gpumeter/gpumeter/internal/billing"
)

// Page geometry of the PDF invoice, in millimetres (A4 portrait).
const (
	pdfMargin       = 15.0
	pdfBottomMargin = 20.0 // leaves room for the footer
	pdfLineHeight   = 4.2
)

// pdfColumns are the widths of the line table's columns: no, description,
// quantity, unit, unit price, amount. They add up to the 180 mm between
// the margins.
var pdfColumns = [6]float64{10, 84, 22, 20, 20, 24}

// pdfAligns aligns each column: text left, numbers right.
var pdfAligns = [6]string{"L", "L", "R", "L", "R", "R"}

// WriteInvoice writes the invoice as an A4 PDF with the same content as
// WriteInvoiceHTML: issuer and customer, number (or DRAFT, or a VOID
// banner), period, the lines grouped by SKU with tier breakdowns,
// subtotal, tax and total (with credits as the HTML has them), and on
// every page a footer with the price book
// version, the inputs hash and the page number. Long invoices break onto
// further pages, repeating the table header; a line is never split.
//
// Every text is drawn in p's font, checked character by character first:
// a text the font cannot show fails the render with a *GlyphError. The
// output is a pure function of inv and the font: the document's creation
// date is inv.CreatedAt and its modification date the latest of
// CreatedAt, FinalizedAt and VoidedAt (PeriodEnd when CreatedAt is zero,
// rather than the clock), and the PDF is written only once it is
// complete.
func (p PDF) WriteInvoice(w io.Writer, inv *billing.Invoice) error {
	font, err := p.font()
	if err != nil {
		return fmt.Errorf("invoice %s: render pdf: %w", inv.ID, err)
	}
	pdf := fpdf.New("P", "mm", "A4", "")
	doc := newPDFDoc(pdf, font)
	r := &pdfInvoice{pdf: pdf, doc: doc, tr: doc.text, v: newInvoiceView(inv)}
	r.setup(inv)
	r.render()
	if err := doc.output(w); err != nil {
		return fmt.Errorf("invoice %s: render pdf: %w", inv.ID, err)
	}
	return nil
}

// pdfInvoice draws one invoice view onto a document.
type pdfInvoice struct {
	pdf *fpdf.Fpdf
	doc *pdfDoc
	// tr checks that the font can show a text before it is drawn.
	tr func(string) string
	v  invoiceView
	// inTable makes a page break repeat the line table's header, and
	// group's title when the break falls inside a group.
	inTable bool
	group   string
}

func (r *pdfInvoice) setup(inv *billing.Invoice) {
	pdf := r.pdf
	created := inv.CreatedAt
	if created.IsZero() {
		created = inv.PeriodEnd
	}
	modified := created
	for _, t := range []*time.Time{inv.FinalizedAt, inv.VoidedAt} {
		if t != nil && t.After(modified) {
			modified = *t
		}
	}
	r.doc.setup(pageSetup{
		title:   "Invoice " + r.v.Number,
		created: created, modified: modified,
		margin: pdfMargin, bottom: pdfBottomMargin,
		lineHeight: pdfLineHeight, gap: 2,
		continued: func() {
			if r.inTable {
				r.tableHeader()
			}
			if r.inTable && r.group != "" {
				r.font("B", 9.5, 0)
				pdf.CellFormat(0, pdfLineHeight+1, r.tr(r.group+" (continued)"), "", 1, "L", false, 0, "")
			}
		},
		footer: func() {
			pdf.CellFormat(0, 3.5, r.tr(roundingNote), "T", 1, "L", false, 0, "")
			foot := r.tr(fmt.Sprintf("Invoice %s · price book %s · inputs %s", r.v.ID, r.v.BookVersion, r.v.InputsHash))
			page := fmt.Sprintf("Page %d/{nb}", pdf.PageNo())
			if pdf.GetStringWidth(foot) > 150 {
				// A long ID or hash gets the line to itself.
				pdf.CellFormat(0, 3.5, foot, "", 1, "L", false, 0, "")
				pdf.CellFormat(0, 3.5, page, "", 1, "R", false, 0, "")
				return
			}
			pdf.CellFormat(150, 3.5, foot, "", 0, "L", false, 0, "")
			pdf.CellFormat(0, 3.5, page, "", 1, "R", false, 0, "")
		},
	})
	pdf.SetAuthor(r.v.Issuer.Name, true)
}

// font sets the font (style "", "B" or "I"), size in points, and grey
// level of the text (0 black).
func (r *pdfInvoice) font(style string, size float64, grey int) { r.doc.setStyle(style, size, grey) }

func (r *pdfInvoice) render() {
	pdf, v := r.pdf, r.v
	pdf.AddPage()
	if v.Banner != "" {
		r.font("B", 14, 0)
		pdf.SetTextColor(176, 0, 0)
		pdf.SetDrawColor(176, 0, 0)
		pdf.SetLineWidth(0.6)
		r.wrapped(0, 8, v.Banner, "1", "C")
		pdf.SetDrawColor(0, 0, 0)
		pdf.SetLineWidth(0.2)
		pdf.Ln(4)
	}
	r.font("B", 18, 0)
	pdf.CellFormat(0, 9, r.tr("Invoice "+v.Number), "", 1, "L", false, 0, "")
	pdf.Ln(3)

	// Issuer on the left, customer on the right, from the same height.
	top := pdf.GetY()
	r.partyBlock(pdfMargin, "FROM", v.Issuer, nil)
	left := pdf.GetY()
	pdf.SetY(top)
	r.partyBlock(pdfMargin+95, "BILL TO", v.Customer, []string{"Tenant: " + v.Tenant})
	pdf.SetY(max(left, pdf.GetY()) + 4)

	meta := [][2]string{{"Invoice number", v.Number}}
	if v.Issued != "" {
		meta = append(meta, [2]string{"Issued", v.Issued})
	}
	meta = append(meta, [2]string{"Due", v.Due})
	if v.Terms != "" {
		meta = append(meta, [2]string{"Payment", v.Terms})
	}
	meta = append(meta,
		[2]string{"Period", fmt.Sprintf("%s: %s to %s (%s)", v.Period, v.Start, v.End, v.Zone)},
		[2]string{"Currency", v.Currency})
	for _, m := range meta {
		r.font("", 9, 85)
		pdf.CellFormat(30, pdfLineHeight, r.tr(m[0]), "", 0, "L", false, 0, "")
		r.font("", 9, 0)
		r.wrapped(0, pdfLineHeight, m[1], "", "L")
	}
	pdf.Ln(4)

	r.ensure(3 * pdfLineHeight)
	r.tableHeader()
	r.inTable = true
	for _, g := range v.Groups {
		// A group title stays with the group's first line.
		r.group = ""
		r.ensure(pdfLineHeight + 3 + r.lineHeight(g.Lines[0]))
		r.font("B", 9.5, 0)
		pdf.Ln(2)
		pdf.CellFormat(0, pdfLineHeight+1, r.tr(g.Title), "", 1, "L", false, 0, "")
		r.group = g.Title
		for _, l := range g.Lines {
			r.line(l)
		}
	}
	r.inTable, r.group = false, ""
	pdf.Ln(3)

	rows := [][2]string{{v.SubtotalLabel, v.Subtotal}}
	for _, t := range v.Taxes {
		rows = append(rows, [2]string{t.Description, t.Amount})
	}
	if v.ShowTaxTotal {
		rows = append(rows, [2]string{"Tax", v.TaxTotal})
	}
	if !v.HasCredits {
		r.ensure(float64(len(rows)+1) * (pdfLineHeight + 1))
		for _, row := range rows {
			r.totalRow(row[0], row[1], false)
		}
		r.totalRow(v.TotalLabel, v.Total, true)
	} else {
		r.creditTotals(rows)
	}

	if len(v.Balances) > 0 {
		r.creditBalances()
	}
	if len(v.Reservations) > 0 {
		pdf.Ln(5)
		r.ensure(3 * pdfLineHeight)
		r.font("", 8.5, 0)
		pdf.CellFormat(0, pdfLineHeight, "Reserved capacity (GPU-hours):", "", 1, "L", false, 0, "")
		widths := []float64{60, 24, 24, 24, 24, 24}
		r.font("B", 8, 0)
		r.cells(widths, []string{"SKU", "Reserved", "Covered", "Unused", "On demand", "Burst"})
		r.font("", 8, 0)
		for _, ru := range v.Reservations {
			r.ensure(pdfLineHeight)
			r.cells(widths, []string{ru.SKU, ru.Reserved, ru.Covered, ru.Unused, ru.OnDemand, ru.Burst})
		}
	}
	if v.Unpriced != "" {
		pdf.Ln(4)
		r.ensure(2 * pdfLineHeight)
		r.font("", 8.5, 0)
		r.wrapped(0, pdfLineHeight, v.Unpriced, "", "L")
	}
	if len(v.UnpricedAppendix) > 0 {
		pdf.AddPage()
		r.font("B", 11, 0)
		pdf.CellFormat(0, 7, "Appendix: usage not priced (not billed)", "", 1, "L", false, 0, "")
		widths, aligns := []float64{60, 50, 30, 5, 30}, []string{"L", "L", "R", "L", "L"}
		row := func(cells ...string) {
			for i, c := range cells {
				pdf.CellFormat(widths[i], pdfLineHeight, r.tr(c), "", 0, aligns[i], false, 0, "")
			}
			pdf.Ln(-1)
		}
		r.font("B", 8, 0)
		row("SKU", "Usage", "Quantity", "", "Unit")
		r.font("", 8, 0)
		for _, u := range v.UnpricedAppendix {
			r.ensure(pdfLineHeight)
			row(u.SKU, u.What, u.Quantity, "", u.Unit)
		}
	}
}

// partyBlock prints a heading, a party's name, address and ids, and extra
// lines in a column 85 mm wide starting at x.
func (r *pdfInvoice) partyBlock(x float64, heading string, p partyView, extra []string) {
	pdf := r.pdf
	const width = 85
	pdf.SetX(x)
	r.font("B", 8, 85)
	pdf.CellFormat(width, pdfLineHeight, heading, "", 2, "L", false, 0, "")
	r.font("B", 10, 0)
	r.column(x, width, p.Name)
	r.font("", 9, 0)
	lines := append([]string(nil), p.Address...)
	if p.TaxID != "" {
		lines = append(lines, "Tax ID: "+p.TaxID)
	}
	if p.Department != "" {
		lines = append(lines, "Department: "+p.Department)
	}
	for _, l := range append(lines, extra...) {
		r.column(x, width, l)
	}
}

// column prints text wrapped to width at x, leaving the cursor below it.
func (r *pdfInvoice) column(x, width float64, s string) {
	for _, l := range r.split(s, width) {
		r.pdf.SetX(x)
		r.pdf.CellFormat(width, pdfLineHeight, l, "", 2, "L", false, 0, "")
	}
}

// wrapped prints text across width (0: to the right margin), with a
// border around the whole block, and moves to the next line.
func (r *pdfInvoice) wrapped(width, h float64, s, border, align string) {
	r.doc.multiCell(width, h, s, border, align)
}

// split checks s and wraps it to width in the current font.
func (r *pdfInvoice) split(s string, width float64) []string {
	return r.doc.split(s, width)
}

func (r *pdfInvoice) tableHeader() {
	r.font("B", 8.5, 0)
	r.pdf.SetDrawColor(0, 0, 0)
	heads := []string{"No", "Description", "Quantity", "Unit", "Unit price", "Amount (" + r.v.Currency + ")"}
	for i, h := range heads {
		r.pdf.CellFormat(pdfColumns[i], pdfLineHeight+1, r.tr(h), "B", 0, pdfAligns[i], false, 0, "")
	}
	r.pdf.Ln(-1)
}

// lineCells are a line's cells in column order, the note aside.
func lineCells(l lineView) [6]string {
	text := l.Description
	if l.Kind != "" {
		text = l.Kind + ": " + text
	}
	return [6]string{fmt.Sprint(l.No), text, l.Quantity, l.Unit, l.UnitPrice, l.Amount}
}

// lineRows is how many text rows a line takes before its tiers: its
// tallest cell, counting the note printed (smaller) under the description.
func (r *pdfInvoice) lineRows(l lineView) (rows int, note []string) {
	cells := lineCells(l)
	r.font("", 7.5, 85)
	if l.Note != "" {
		note = r.split(l.Note, pdfColumns[1])
	}
	r.font("", 8.5, 0)
	rows = 1
	for i, c := range cells {
		n := len(r.split(c, pdfColumns[i]))
		if i == 1 {
			n += len(note)
		}
		rows = max(rows, n)
	}
	return rows, note
}

// lineHeight is the height of a line and its tiers.
func (r *pdfInvoice) lineHeight(l lineView) float64 {
	rows, _ := r.lineRows(l)
	return float64(rows+len(l.Tiers)) * pdfLineHeight
}

// line prints a line with its note and tier breakdown, on a new page when
// it does not fit on this one.
func (r *pdfInvoice) line(l lineView) {
	pdf := r.pdf
	r.ensure(r.lineHeight(l))
	rows, note := r.lineRows(l)
	x, y := pdfMargin, pdf.GetY()
	r.font("", 8.5, 0)
	for i, c := range lineCells(l) {
		text := r.split(c, pdfColumns[i])
		for j, s := range text {
			pdf.SetXY(x, y+float64(j)*pdfLineHeight)
			pdf.CellFormat(pdfColumns[i], pdfLineHeight, s, "", 0, pdfAligns[i], false, 0, "")
		}
		if i == 1 && len(note) > 0 {
			r.font("", 7.5, 85)
			for j, s := range note {
				pdf.SetXY(x, y+float64(len(text)+j)*pdfLineHeight)
				pdf.CellFormat(pdfColumns[i], pdfLineHeight, s, "", 0, "L", false, 0, "")
			}
			r.font("", 8.5, 0)
		}
		x += pdfColumns[i]
	}
	pdf.SetXY(pdfMargin, y+float64(rows)*pdfLineHeight)
	r.font("", 7.5, 85)
	for _, t := range l.Tiers {
		tier := [6]string{"", "    " + t.Label, t.Quantity, "", t.UnitPrice, t.Amount}
		for i, c := range tier {
			pdf.CellFormat(pdfColumns[i], pdfLineHeight, r.tr(c), "", 0, pdfAligns[i], false, 0, "")
		}
		pdf.Ln(-1)
	}
	pdf.SetDrawColor(221, 221, 221)
	pdf.Line(pdfMargin, pdf.GetY(), pdfMargin+180, pdf.GetY())
	pdf.SetDrawColor(0, 0, 0)
}

// totalRow prints a label and an amount with the currency, right-aligned
// against the right margin.
func (r *pdfInvoice) totalRow(label, amount string, total bool) {
	pdf := r.pdf
	style, border := "", ""
	if total {
		style, border = "B", "T"
	}
	r.font(style, 9.5, 0)
	pdf.SetX(pdfMargin + 60)
	pdf.CellFormat(84, pdfLineHeight+1, r.tr(label), border, 0, "R", false, 0, "")
	pdf.CellFormat(36, pdfLineHeight+1, r.tr(amount+" "+r.v.Currency), border, 1, "R", false, 0, "")
}

// cells prints one row of single-line cells, the first left-aligned and
// the rest right-aligned.
func (r *pdfInvoice) cells(widths []float64, cells []string) {
	for i, c := range cells {
		align := "R"
		if i == 0 {
			align = "L"
		}
		r.pdf.CellFormat(widths[i], pdfLineHeight, r.tr(c), "", 0, align, false, 0, "")
	}
	r.pdf.Ln(-1)
}

// ensure starts a new page unless h mm still fit above the bottom margin.
func (r *pdfInvoice) ensure(h float64) {
	_, pageHeight := r.pdf.GetPageSize()
	if r.pdf.GetY()+h > pageHeight-pdfBottomMargin {
		r.pdf.AddPage()
	}
}

// creditTotals prints the totals of an invoice with credits: rows (the
// subtotal and tax), the total after tax and the prepaid credit lines
// paying it when there are any, and the amount due. Labels take the width
// left of the amounts, since a prepaid line names its grant.
func (r *pdfInvoice) creditTotals(rows [][2]string) {
	v := r.v
	if len(v.Prepaid) > 0 {
		rows = append(rows, [2]string{totalAfterTax, v.AfterTax})
		for _, p := range v.Prepaid {
			rows = append(rows, [2]string{p.Description, p.Amount})
		}
	}
	r.ensure(float64(len(rows)+1) * (pdfLineHeight + 1))
	for _, row := range rows {
		r.wideTotalRow(row[0], row[1], row[0] == totalAfterTax)
	}
	r.totalRow(v.TotalLabel, v.Total, true)
}

// wideTotalRow prints a total's label, right-aligned in the width left of
// the amount (wrapped if it needs more), and the amount on its last row;
// ruled draws a rule above the row, as above a total.
func (r *pdfInvoice) wideTotalRow(label, amount string, ruled bool) {
	pdf := r.pdf
	r.font("", 9.5, 0)
	if ruled {
		pdf.Line(pdfMargin+60, pdf.GetY(), pdfMargin+180, pdf.GetY())
	}
	rows := r.split(label, 144)
	for i, l := range rows {
		pdf.SetX(pdfMargin)
		pdf.CellFormat(144, pdfLineHeight+1, l, "", 0, "R", false, 0, "")
		cell := ""
		if i == len(rows)-1 {
			cell = r.tr(amount + " " + r.v.Currency)
		}
		pdf.CellFormat(36, pdfLineHeight+1, cell, "", 1, "R", false, 0, "")
	}
}

// creditBalances prints the grants' accounts over the period, what Ended
// means, and the credit that expires in the next period.
func (r *pdfInvoice) creditBalances() {
	pdf, v := r.pdf, r.v
	widths := [6]float64{80, 20, 20, 20, 20, 20}
	aligns := [6]string{"L", "L", "R", "R", "R", "R"}
	row := func(cells [6]string) {
		var split [6][]string
		n := 1
		for i, c := range cells {
			split[i] = r.split(c, widths[i])
			n = max(n, len(split[i]))
		}
		r.ensure(float64(n) * pdfLineHeight)
		x, y := pdfMargin, pdf.GetY()
		for i := range cells {
			for j, s := range split[i] {
				pdf.SetXY(x, y+float64(j)*pdfLineHeight)
				pdf.CellFormat(widths[i], pdfLineHeight, s, "", 0, aligns[i], false, 0, "")
			}
			x += widths[i]
		}
		pdf.SetXY(pdfMargin, y+float64(n)*pdfLineHeight)
	}
	pdf.Ln(5)
	r.ensure(4 * pdfLineHeight)
	r.font("B", 9.5, 0)
	pdf.CellFormat(0, pdfLineHeight+1, r.tr(creditBalancesHead), "", 1, "L", false, 0, "")
	r.font("B", 8, 0)
	row([6]string{"Grant", "Unit", "Before", "Used", "Ended", "After"})
	r.font("", 8, 0)
	for _, b := range v.Balances {
		row([6]string{b.Description, b.Unit, b.Before, b.Used, b.Ended, b.After})
	}
	r.font("", 7.5, 85)
	r.wrapped(0, pdfLineHeight, v.BalancesNote, "", "L")
	r.font("", 8.5, 0)
	for _, e := range v.Expiring {
		r.ensure(pdfLineHeight)
		r.wrapped(0, pdfLineHeight, e, "", "L")
	}
}
