package reports

import (
	"fmt"
	"io"

	"codeberg.org/go-pdf/fpdf"
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/chargeback"
)

// Page geometry of the PDF chargeback report, in millimetres (A4
// landscape: 297 × 210).
const (
	cbMargin       = 12.0
	cbBottomMargin = 16.0 // leaves room for the footer
	cbWidth        = 297 - 2*cbMargin
	cbFontSize     = 7.0 // of the tables, before scaling to fit
	cbLineHeight   = 3.4
)

// cbTable is a table's columns: heads, widths in mm (scaled to the page
// width) and alignment, and the font scale that keeps it on the page.
type cbTable struct {
	heads  []string
	widths []float64
	aligns []string
	scale  float64
}

// newCBTable scales widths to the width between the margins: up when they
// leave room, down (with the font) when they do not fit.
func newCBTable(heads []string, widths []float64, aligns []string) *cbTable {
	sum := 0.0
	for _, w := range widths {
		sum += w
	}
	t := &cbTable{heads: heads, aligns: aligns, scale: min(1, cbWidth/sum)}
	for _, w := range widths {
		t.widths = append(t.widths, w*cbWidth/sum)
	}
	return t
}

// WriteChargeback writes the report as an A4 landscape PDF with the same
// content as WriteChargebackHTML: period and idle mode, the table by
// department and tenant with department subtotals, the idle row and the
// fleet total, a stacked bar chart of cost per department per day drawn
// with rectangles and lines, the energy and carbon table and the notes.
// Tables break onto further pages repeating their header, and every page
// has a footer with the period and page number. A report with many meters
// shrinks the table's font to fit the page.
//
// Every text is drawn in p's font, checked character by character first:
// a text the font cannot show (a department's or tenant's name, say)
// fails the render with a *GlyphError. The output is a pure function of r
// and the font: its creation and modification dates are r.Period.End, and
// the PDF is written only once it is complete.
func (p PDF) WriteChargeback(w io.Writer, r chargeback.Report) error {
	if err := checkChargeback(r); err != nil {
		return err
	}
	font, err := p.font()
	if err != nil {
		return fmt.Errorf("chargeback %s: render pdf: %w", r.Period.Label, err)
	}
	pdf := fpdf.New("L", "mm", "A4", "")
	doc := newPDFDoc(pdf, font)
	c := &pdfChargeback{pdf: pdf, doc: doc, tr: doc.text, v: newChargebackView(r), chart: newDayChart(r)}
	if u, ok := usageChartReport(r); ok {
		uc := newDayChart(u)
		c.usageChart = &uc
	}
	c.setup(r)
	c.render()
	if err := doc.output(w); err != nil {
		return fmt.Errorf("chargeback %s: render pdf: %w", r.Period.Label, err)
	}
	return nil
}

// pdfChargeback draws one chargeback view onto a document.
type pdfChargeback struct {
	pdf *fpdf.Fpdf
	doc *pdfDoc
	// tr checks that the font can show a text before it is drawn.
	tr    func(string) string
	v     chargebackView
	chart dayChart
	// usageChart is held vs used per day, when the report has UsageDays.
	usageChart *dayChart
	// table, when set, is repeated at the top of a new page.
	table *cbTable
}

func (c *pdfChargeback) setup(r chargeback.Report) {
	pdf := c.pdf
	c.doc.setup(pageSetup{
		title:   "Chargeback " + c.v.Label,
		created: r.Period.End, modified: r.Period.End,
		margin: cbMargin, bottom: cbBottomMargin,
		lineHeight: cbLineHeight, gap: 1,
		continued: func() {
			if c.table != nil {
				c.header(c.table)
			}
		},
		footer: func() {
			foot := fmt.Sprintf("Chargeback %s · %s to %s (UTC) · idle mode %s", c.v.Label, c.v.Start, c.v.End, c.v.Mode)
			pdf.CellFormat(cbWidth-30, 3.5, c.tr(foot), "T", 0, "L", false, 0, "")
			pdf.CellFormat(0, 3.5, fmt.Sprintf("Page %d/{nb}", pdf.PageNo()), "T", 1, "R", false, 0, "")
		},
	})
}

// font sets the font (style "", "B" or "I"), size in points, and grey
// level of the text (0 black).
func (c *pdfChargeback) font(style string, size float64, grey int) { c.doc.setStyle(style, size, grey) }

func (c *pdfChargeback) render() {
	pdf, v := c.pdf, c.v
	pdf.AddPage()
	c.font("B", 16, 0)
	pdf.CellFormat(0, 8, c.tr("Chargeback "+v.Label), "", 1, "L", false, 0, "")
	pdf.Ln(1)
	energy := v.Fleet.KWh + " kWh"
	if v.Carbon {
		energy += ", " + v.Fleet.KgCO2e + " kgCO2e"
	} else {
		energy += " (no carbon intensities given)"
	}
	for _, m := range [][2]string{
		{"Period", fmt.Sprintf("%s: %s to %s (UTC)", v.Label, v.Start, v.End)},
		{"Currency", v.Currency},
		{"Idle capacity", v.Mode + ": " + v.ModeText},
		{"Fleet cost", v.Fleet.Cost + " " + v.Currency},
		{"Fleet GPU-hours", v.Fleet.GPUHours + " (utilization " + v.Fleet.Utilization + ")"},
		{"Fleet energy", energy},
	} {
		c.font("", 8.5, 85)
		pdf.CellFormat(30, 4, c.tr(m[0]), "", 0, "L", false, 0, "")
		c.font("", 8.5, 0)
		c.doc.multiCell(0, 4, m[1], "", "L")
	}
	pdf.Ln(3)

	c.heading("Cost by department and tenant")
	c.costTable()
	pdf.Ln(4)
	c.chartSection()
	pdf.Ln(4)
	c.energyTable()
	pdf.Ln(4)
	if len(v.Efficiency) > 0 {
		c.efficiencyTable()
		pdf.Ln(4)
	}
	if c.usageChart != nil && v.UsageChart != nil {
		c.drawDayChart("Held vs used per day", *c.usageChart, v.UsageChart.Caption+".")
		pdf.Ln(4)
	}
	c.heading("Notes")
	c.font("", 8, 0)
	notes := append(append([]string(nil), v.Notes...), v.Fixed...)
	if !v.Carbon {
		notes = append(notes, "No carbon intensities were given: kgCO2e is not computed (n/a), which is not zero carbon.")
	}
	for _, n := range notes {
		c.doc.multiCell(0, 3.8, "- "+n, "", "L")
	}
}

// heading prints a section title, on a new page when too little of this
// one is left for the section to start.
func (c *pdfChargeback) heading(s string) {
	c.ensure(20)
	c.font("B", 11, 0)
	c.pdf.CellFormat(0, 6, c.tr(s), "", 1, "L", false, 0, "")
}

func (c *pdfChargeback) costTable() {
	v := c.v
	heads := []string{"Department / tenant", "GPU-hours", "GPU-hours by SKU", "SM-active hours", "Utilization",
		"Memory GiB-hours", "Energy kWh", "kgCO2e"}
	widths := []float64{40, 17, 44, 16, 16, 17, 15, 15}
	for _, m := range v.Meters {
		heads = append(heads, m+" ("+v.Currency+")")
		widths = append(widths, 18)
	}
	heads = append(heads, "Idle share ("+v.Currency+")", "Total ("+v.Currency+")", "Share %")
	widths = append(widths, 17, 19, 12)
	aligns := make([]string, len(heads))
	for i := range aligns {
		aligns[i] = "R"
	}
	aligns[0], aligns[2] = "L", "L"
	t := newCBTable(heads, widths, aligns)

	c.ensure(4 * cbLineHeight)
	c.header(t)
	c.table = t
	for _, d := range v.Depts {
		// A department's name stays with its first row.
		first := d.Total
		if len(d.Tenants) > 0 {
			first = d.Tenants[0]
		}
		c.ensure(2*cbLineHeight + c.rowHeight(t, c.costCells(first, "   "), ""))
		c.font("B", 8*t.scale, 0)
		c.pdf.CellFormat(0, cbLineHeight+1, c.tr(d.Name), "", 1, "L", false, 0, "")
		for _, tn := range d.Tenants {
			c.row(t, c.costCells(tn, "   "), "", "")
		}
		c.row(t, c.costCells(d.Total, ""), "B", "")
	}
	if v.Idle != nil {
		c.row(t, c.costCells(*v.Idle, ""), "I", "")
	}
	c.row(t, c.costCells(v.Fleet, ""), "B", "T")
	c.table = nil
}

// costCells are a row's cells of the cost table, each a list of lines.
func (c *pdfChargeback) costCells(rv chargebackRowView, indent string) [][]string {
	cells := [][]string{{indent + rv.Name}, {rv.GPUHours}, rv.SKUs, {rv.SMActive}, {rv.Utilization},
		{rv.Memory}, {rv.KWh}, {rv.KgCO2e}}
	for _, m := range rv.Costs {
		cells = append(cells, []string{m})
	}
	return append(cells, []string{rv.IdleCost}, []string{rv.Cost}, []string{rv.Share})
}

func (c *pdfChargeback) energyTable() {
	v := c.v
	heads := []string{"Row", "Energy kWh"}
	widths := []float64{60, 22}
	for _, s := range v.Sources {
		heads = append(heads, s+" kWh")
		widths = append(widths, 30)
	}
	heads = append(heads, "GPU-hours without energy measurement", "kWh without carbon intensity", "kgCO2e")
	widths = append(widths, 40, 40, 24)
	aligns := make([]string, len(heads))
	for i := range aligns {
		aligns[i] = "R"
	}
	aligns[0] = "L"
	t := newCBTable(heads, widths, aligns)
	c.heading("Energy and carbon")
	c.header(t)
	c.table = t
	for i, rv := range v.EnergyRows {
		cells := [][]string{{rv.Name}, {rv.KWh}}
		for _, s := range rv.BySource {
			cells = append(cells, []string{s})
		}
		cells = append(cells, []string{rv.EnergyUnmeasured}, []string{rv.NoIntensity}, []string{rv.KgCO2e})
		style, border := "", ""
		if i == len(v.EnergyRows)-1 {
			style, border = "B", "T" // the fleet
		}
		c.row(t, cells, style, border)
	}
	c.table = nil
}

// efficiencyTable is the held-but-idle section.
func (c *pdfChargeback) efficiencyTable() {
	t := newCBTable([]string{"Department / tenant", "GPU-hours held", "Utilization", "GPU-hours unmeasured", "GPU-hours held but idle", "Idle share"},
		[]float64{60, 30, 26, 30, 34, 24}, []string{"L", "R", "R", "R", "R", "R"})
	c.heading("Efficiency: held-but-idle GPUs")
	c.header(t)
	c.table = t
	for _, e := range c.v.Efficiency {
		style := ""
		if e.Department {
			style = "B"
		}
		top := c.row(t, [][]string{{e.Name}, {e.Held}, {e.Utilization}, {e.Unmeasured}, {e.Idle}, {e.IdleShare}}, style, "")
		c.utilBar(t, cbMargin+t.widths[0]+t.widths[1], top, t.widths[2], e.UtilBar)
	}
	c.table = nil
	c.font("", 8, 0)
	c.doc.multiCell(0, 3.8, "Held but idle: measured SM activity under 5 % of the GPU time held for at least 30 minutes on end; unmeasured time is never idle. Shares are over the measured time.", "", "L")
}

// Colours of the utilization bar, as in the HTML report.
var (
	utilTrackColor = [3]int{230, 230, 230}
	utilBarColor   = [3]int{31, 119, 180}
)

// utilBar draws a row's utilization bar in its cell (left x, top y, width
// w): a track across the cell's left part, the figure staying right of it,
// and a filled part pct percent of the track long. No bar where nothing
// was measured (pct empty): that is not 0 %.
func (c *pdfChargeback) utilBar(t *cbTable, x, y, w float64, pct string) {
	p, err := decimal.NewFromString(pct)
	if err != nil { // empty: nothing measured
		return
	}
	pdf := c.pdf
	h := 1.6 * t.scale
	track := w - 14*t.scale // the figure, "100.0 %", needs about 10 mm at 7 pt
	x, y = x+1.5*t.scale, y+0.3+(cbLineHeight*t.scale-h)/2
	pdf.SetFillColor(utilTrackColor[0], utilTrackColor[1], utilTrackColor[2])
	pdf.Rect(x, y, track, h, "F")
	pdf.SetFillColor(utilBarColor[0], utilBarColor[1], utilBarColor[2])
	// Geometry, not money: the percentage becomes millimetres here.
	pdf.Rect(x, y, track*p.InexactFloat64()/100, h, "F")
	pdf.SetFillColor(255, 255, 255)
}

// header prints a table's column heads, wrapped, over a rule.
func (c *pdfChargeback) header(t *cbTable) {
	pdf := c.pdf
	c.font("B", cbFontSize*t.scale, 0)
	lh := cbLineHeight * t.scale
	lines := make([][]string, len(t.heads))
	rows := 1
	for i, h := range t.heads {
		lines[i] = c.split(h, t.widths[i])
		rows = max(rows, len(lines[i]))
	}
	x, y := cbMargin, pdf.GetY()
	for i, ls := range lines {
		// Heads sit on the rule: a one-line head goes to the bottom.
		off := rows - len(ls)
		for j, s := range ls {
			pdf.SetXY(x, y+float64(off+j)*lh)
			pdf.CellFormat(t.widths[i], lh, s, "", 0, t.aligns[i], false, 0, "")
		}
		x += t.widths[i]
	}
	y += float64(rows)*lh + 0.5
	pdf.SetDrawColor(0, 0, 0)
	pdf.SetLineWidth(0.2)
	pdf.Line(cbMargin, y, cbMargin+cbWidth, y)
	pdf.SetXY(cbMargin, y+0.5)
}

// rowLines wraps each cell's lines to its column in the table's font.
func (c *pdfChargeback) rowLines(t *cbTable, cells [][]string, style string) [][]string {
	c.font(style, cbFontSize*t.scale, 0)
	out := make([][]string, len(cells))
	for i, cell := range cells {
		for _, l := range cell {
			out[i] = append(out[i], c.split(l, t.widths[i])...)
		}
	}
	return out
}

func (c *pdfChargeback) rowHeight(t *cbTable, cells [][]string, style string) float64 {
	rows := 1
	for _, ls := range c.rowLines(t, cells, style) {
		rows = max(rows, len(ls))
	}
	return float64(rows)*cbLineHeight*t.scale + 0.6
}

// row prints one row of the table in style ("", "B" or "I"), with a rule
// above it when border is "T", on a new page when it does not fit here;
// it returns the row's top, for what is drawn into its cells.
func (c *pdfChargeback) row(t *cbTable, cells [][]string, style, border string) (top float64) {
	pdf := c.pdf
	h := c.rowHeight(t, cells, style)
	c.ensure(h)
	lines := c.rowLines(t, cells, style)
	lh := cbLineHeight * t.scale
	x, y := cbMargin, pdf.GetY()
	top = y
	if border == "T" {
		pdf.SetDrawColor(0, 0, 0)
		pdf.SetLineWidth(0.4)
		pdf.Line(cbMargin, y, cbMargin+cbWidth, y)
		pdf.SetLineWidth(0.2)
	}
	for i, ls := range lines {
		for j, s := range ls {
			pdf.SetXY(x, y+0.3+float64(j)*lh)
			pdf.CellFormat(t.widths[i], lh, s, "", 0, t.aligns[i], false, 0, "")
		}
		x += t.widths[i]
	}
	y += h
	pdf.SetDrawColor(221, 221, 221)
	pdf.Line(cbMargin, y, cbMargin+cbWidth, y)
	pdf.SetDrawColor(0, 0, 0)
	pdf.SetXY(cbMargin, y)
	return top
}

// PDF chart geometry, in mm.
const (
	cbChartLeft   = cbMargin + 24 // room for the axis labels
	cbChartWidth  = cbWidth - 28
	cbChartHeight = 60.0
	cbLegendLine  = 4.5
)

// chartSection draws the stacked bars of cost per department per day,
// its axes and legend, from the same layout as the SVG chart.
func (c *pdfChargeback) chartSection() {
	c.drawDayChart("Cost per department per day", c.chart,
		c.v.Chart.Caption+". Each department's days add up to its total; a shared idle cost falls on the days the idle capacity cost something.")
}

// drawDayChart draws a day chart under heading: its bars, axes (top
// labelled at every tick), day labels, legend and caption.
func (c *pdfChargeback) drawDayChart(heading string, ch dayChart, caption string) {
	pdf := c.pdf
	need := 6 + cbChartHeight + 10 + float64(legendLines(len(ch.Series)))*cbLegendLine + 6
	c.ensure(need)
	c.heading(heading)
	if len(ch.Days) == 0 {
		c.font("", 8.5, 0)
		pdf.CellFormat(0, 5, "No usage in this period.", "", 1, "L", false, 0, "")
		return
	}
	top := pdf.GetY() + 2
	bottom := top + cbChartHeight
	pdf.SetLineWidth(0.2)
	c.font("", 7, 60)
	// A grid line and a label at each tick of the axis (0 to Max).
	for _, t := range ch.Ticks {
		y := bottom - t.Div(ch.Max).InexactFloat64()*cbChartHeight
		pdf.SetDrawColor(230, 230, 230)
		pdf.Line(cbChartLeft, y, cbChartLeft+cbChartWidth, y)
		pdf.SetXY(cbMargin, y-1.75)
		pdf.CellFormat(cbChartLeft-cbMargin-1, 3.5, c.tr(t.String()), "", 0, "R", false, 0, "")
	}
	pdf.SetDrawColor(0, 0, 0)
	pdf.Line(cbChartLeft, bottom, cbChartLeft+cbChartWidth, bottom)
	pdf.Line(cbChartLeft, top, cbChartLeft, bottom)

	// Geometry, not money: the fractions of the costliest day are turned
	// into millimetres here.
	slot := cbChartWidth / float64(len(ch.Days))
	width := 0.7 * slot
	for _, b := range ch.Bars {
		y0 := bottom - b.Bottom.InexactFloat64()*cbChartHeight
		y1 := bottom - b.Top.InexactFloat64()*cbChartHeight
		col := ch.Series[b.Series].Color
		pdf.SetFillColor(col[0], col[1], col[2])
		pdf.Rect(cbChartLeft+float64(b.Day)*slot+(slot-width)/2, y1, width, y0-y1, "F")
	}
	step := ch.dayLabelStep()
	c.font("", 7, 60)
	for i, d := range ch.Days {
		if i%step != 0 {
			continue
		}
		pdf.SetXY(cbChartLeft+float64(i)*slot, bottom+0.8)
		pdf.CellFormat(slot, 3.5, d.Format("01-02"), "", 0, "C", false, 0, "")
	}
	legendTop := bottom + 6
	column := cbChartWidth / legendColumns
	c.font("", 7.5, 0)
	for i, s := range ch.Series {
		x := cbChartLeft + float64(i%legendColumns)*column
		y := legendTop + float64(i/legendColumns)*cbLegendLine
		pdf.SetFillColor(s.Color[0], s.Color[1], s.Color[2])
		pdf.Rect(x, y+0.6, 3, 3, "F")
		pdf.SetXY(x+4.5, y)
		pdf.CellFormat(column-5, 4.2, c.tr(s.Name), "", 0, "L", false, 0, "")
	}
	pdf.SetFillColor(255, 255, 255)
	pdf.SetXY(cbMargin, legendTop+float64(legendLines(len(ch.Series)))*cbLegendLine+1)
	c.font("", 7.5, 85)
	c.doc.multiCell(0, 3.5, caption, "", "L")
}

// split checks s and wraps it to width in the current font.
func (c *pdfChargeback) split(s string, width float64) []string {
	return c.doc.split(s, width)
}

// ensure starts a new page unless h mm still fit above the bottom margin.
func (c *pdfChargeback) ensure(h float64) {
	_, pageHeight := c.pdf.GetPageSize()
	if c.pdf.GetY()+h > pageHeight-cbBottomMargin {
		c.pdf.AddPage()
	}
}
