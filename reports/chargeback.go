package reports

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/chargeback"
	"github.com/gpumeter/gpumeter/pricing"
)

// Chargeback reports are rendered in four formats from one
// chargeback.Report. JSON is the report itself; CSV, HTML and PDF print
// its amounts as they are: each is already a whole number of the
// currency's minor units, so they are formatted with the currency's places
// and never rounded, summed or split again here. A report with an amount
// that is not whole minor units, or whose cost columns do not follow
// Report.Meters, is refused before anything is written (see
// checkChargeback); chargeback.Allocate never returns one.
//
// Quantities (hours, GiB-hours, kWh) are shown at fewer places in HTML
// and PDF, and exactly as the report holds them in CSV; kgCO2e is shown at
// chargeback.CarbonDisplayPlaces everywhere, as the report asks.

// WriteChargebackJSON writes the report as indented JSON with a trailing
// newline. The encoding is that of the report's JSON tags, so it is
// deterministic and reads back into a chargeback.Report: decimals are
// strings in their shortest form, a missing utilization or kgCO2e is null.
func WriteChargebackJSON(w io.Writer, r chargeback.Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("chargeback %s: encode json: %w", r.Period.Label, err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Row kinds of the CSV's row column.
const (
	chargebackRowTenant     = "tenant"
	chargebackRowDepartment = "department"
	chargebackRowIdle       = "idle"
	chargebackRowFleet      = "fleet"
)

// WriteChargebackCSV writes the report as CSV (RFC 4180, via
// encoding/csv), one row per tenant, then one per department, then the
// idle row (IdleOwnRow only) and the fleet total. The columns are
//
//	period, row, department, tenant,
//	gpu_hours, gpu_hours[SKU]…,
//	sm_active_hours, sm_unmeasured_gpu_hours, utilization, memory_gib_hours,
//	energy_kwh, energy_kwh[SOURCE]…, energy_unmeasured_gpu_hours,
//	kg_co2e, no_intensity_kwh,
//	cost[METER]…, idle_cost, cost, share_percent, currency
//
// where row is tenant, department, idle or fleet (a spreadsheet that sums
// a column should filter on it); department is empty on the idle and
// fleet rows, tenant on all but tenant rows. There is one gpu_hours[SKU]
// column per SKU held anywhere in the report, sorted by name ("0" where a
// row held none of it), one energy_kwh[SOURCE] column per energy source
// present (measured, split_by_slices, split_by_gpm, in that order) and one
// cost[METER] column per meter of r.Meters, in that order. GPU-hours are
// GPU-equivalent hours: a MIG instance counts its compute slices / 7.
//
// Quantities are printed exactly as the report holds them (up to
// chargeback.QuantityPlaces); utilization is a fraction at
// chargeback.UtilizationPlaces and empty when no SM activity was measured;
// kg_co2e is at chargeback.CarbonDisplayPlaces, and it and
// no_intensity_kwh are empty without a carbon source. Money (cost[METER],
// idle_cost, cost) is the report's minor-unit amounts with the currency's
// places ("12.73", "1273" for JPY); share_percent has
// chargeback.SharePlaces places.
//
// So in every idle mode the tenant rows' cost (with the idle row's) adds up
// exactly to the fleet row's, and each department row's money columns are
// its tenants' sums. The fleet row's usage columns cover all capacity, idle
// included, so they exceed the tenants' sums where capacity was idle; its
// cost[METER] are the tenants' direct costs and its idle_cost the cost of
// idle capacity, however it was shared.
func WriteChargebackCSV(w io.Writer, r chargeback.Report) error {
	if err := checkChargeback(r); err != nil {
		return err
	}
	skus, sources := chargebackSKUs(r), chargebackSources(r)
	header := []string{"period", "row", "department", "tenant", "gpu_hours"}
	for _, s := range skus {
		header = append(header, "gpu_hours["+s+"]")
	}
	header = append(header, "sm_active_hours", "sm_unmeasured_gpu_hours", "utilization", "memory_gib_hours", "energy_kwh")
	for _, s := range sources {
		header = append(header, "energy_kwh["+string(s)+"]")
	}
	header = append(header, "energy_unmeasured_gpu_hours", "kg_co2e", "no_intensity_kwh")
	for _, m := range r.Meters {
		header = append(header, "cost["+string(m)+"]")
	}
	header = append(header, "idle_cost", "cost", "share_percent", "currency")

	minor := r.Currency.MinorUnits
	row := func(kind, dept, tenant string, t chargeback.Totals) []string {
		rec := []string{r.Period.Label, kind, dept, tenant, t.GPUHours.String()}
		for _, s := range skus {
			rec = append(rec, skuHours(t, s).String())
		}
		util := ""
		if t.Utilization.Valid {
			util = t.Utilization.Decimal.StringFixed(chargeback.UtilizationPlaces)
		}
		rec = append(rec, t.SMActiveHours.String(), t.SMUnmeasuredGPUHours.String(), util,
			t.MemoryGiBHours.String(), t.Energy.KWh.String())
		for _, s := range sources {
			rec = append(rec, sourceKWh(t, s).String())
		}
		kg, noIntensity := "", ""
		if t.Energy.KgCO2e.Valid {
			kg = t.Energy.KgCO2e.Decimal.StringFixed(chargeback.CarbonDisplayPlaces)
			noIntensity = t.Energy.NoIntensityKWh.String()
		}
		rec = append(rec, t.Energy.UnmeasuredGPUHours.String(), kg, noIntensity)
		for _, c := range t.Costs {
			rec = append(rec, c.Cost.StringFixed(minor))
		}
		return append(rec, t.IdleCost.StringFixed(minor), t.Cost.StringFixed(minor),
			t.SharePercent.StringFixed(chargeback.SharePlaces), r.Currency.Code)
	}
	rows := [][]string{header}
	for _, d := range r.Departments {
		for _, t := range d.Tenants {
			rows = append(rows, row(chargebackRowTenant, d.Name, t.Name, t.Totals))
		}
	}
	for _, d := range r.Departments {
		rows = append(rows, row(chargebackRowDepartment, d.Name, "", d.Totals))
	}
	if r.Idle != nil {
		rows = append(rows, row(chargebackRowIdle, "", "", *r.Idle))
	}
	rows = append(rows, row(chargebackRowFleet, "", "", r.Fleet))
	if err := csv.NewWriter(w).WriteAll(rows); err != nil {
		return fmt.Errorf("chargeback %s: write csv: %w", r.Period.Label, err)
	}
	return nil
}

// checkChargeback refuses a report the renderers could only print by
// rounding: a currency with unusable places, an amount (meter cost, idle
// cost, cost, day cost) that is not a whole number of minor units, or cost
// columns that are not r.Meters in order.
func checkChargeback(r chargeback.Report) error {
	minor := r.Currency.MinorUnits
	if minor < 0 || minor > pricing.StoragePlaces {
		return fmt.Errorf("chargeback %s: currency %s has %d minor unit places (want 0 to %d)",
			r.Period.Label, r.Currency.Code, minor, pricing.StoragePlaces)
	}
	whole := func(d decimal.Decimal) bool { return d.Equal(d.Truncate(minor)) }
	bad := func(what, why string) error {
		return fmt.Errorf("chargeback %s: %s: %s", r.Period.Label, what, why)
	}
	check := func(what string, t chargeback.Totals) error {
		if len(t.Costs) != len(r.Meters) {
			return bad(what, fmt.Sprintf("%d meter costs for the report's %d meters", len(t.Costs), len(r.Meters)))
		}
		for i, c := range t.Costs {
			if c.Meter != r.Meters[i] {
				return bad(what, fmt.Sprintf("cost %d is for meter %q, want %q", i, c.Meter, r.Meters[i]))
			}
			if !whole(c.Cost) {
				return bad(what, fmt.Sprintf("%s cost %s is not whole %s minor units", c.Meter, c.Cost, r.Currency.Code))
			}
		}
		for _, a := range []struct {
			name string
			d    decimal.Decimal
		}{{"idle cost", t.IdleCost}, {"cost", t.Cost}} {
			if !whole(a.d) {
				return bad(what, fmt.Sprintf("%s %s is not whole %s minor units", a.name, a.d, r.Currency.Code))
			}
		}
		return nil
	}
	for _, d := range r.Departments {
		for _, t := range d.Tenants {
			if err := check(fmt.Sprintf("department %q tenant %q", d.Name, t.Name), t.Totals); err != nil {
				return err
			}
		}
		if err := check(fmt.Sprintf("department %q", d.Name), d.Totals); err != nil {
			return err
		}
	}
	if r.Idle != nil {
		if err := check("idle row", *r.Idle); err != nil {
			return err
		}
	}
	if err := check("fleet", r.Fleet); err != nil {
		return err
	}
	for _, dc := range r.Days {
		if !whole(dc.Cost) {
			return bad(fmt.Sprintf("day %s department %q", dc.Day.UTC().Format(time.DateOnly), dc.Department),
				fmt.Sprintf("cost %s is not whole %s minor units", dc.Cost, r.Currency.Code))
		}
	}
	return nil
}

// chargebackTotals are every row's totals: tenants, departments, the idle
// row and the fleet.
func chargebackTotals(r chargeback.Report) []chargeback.Totals {
	var out []chargeback.Totals
	for _, d := range r.Departments {
		for _, t := range d.Tenants {
			out = append(out, t.Totals)
		}
		out = append(out, d.Totals)
	}
	if r.Idle != nil {
		out = append(out, *r.Idle)
	}
	return append(out, r.Fleet)
}

// chargebackSKUs are the SKUs held in any row of r, sorted.
func chargebackSKUs(r chargeback.Report) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range chargebackTotals(r) {
		for _, s := range t.SKUs {
			if !seen[s.SKU] {
				seen[s.SKU] = true
				out = append(out, s.SKU)
			}
		}
	}
	sort.Strings(out)
	return out
}

// energySourceOrder is the order chargeback prints energy sources in.
var energySourceOrder = []chargeback.EnergySource{
	chargeback.EnergyMeasured, chargeback.EnergySplitBySlices, chargeback.EnergySplitByGPM,
}

// chargebackSources are the energy sources with energy in any row of r,
// known ones in chargeback's order, others after them by name.
func chargebackSources(r chargeback.Report) []chargeback.EnergySource {
	seen := map[chargeback.EnergySource]bool{}
	for _, t := range chargebackTotals(r) {
		for _, s := range t.Energy.BySource {
			seen[s.Source] = true
		}
	}
	var out, other []chargeback.EnergySource
	for _, s := range energySourceOrder {
		if seen[s] {
			out = append(out, s)
			delete(seen, s)
		}
	}
	for s := range seen {
		other = append(other, s)
	}
	sort.Slice(other, func(i, j int) bool { return other[i] < other[j] })
	return append(out, other...)
}

// skuHours are the GPU-hours t held on sku, zero when none.
func skuHours(t chargeback.Totals, sku string) decimal.Decimal {
	for _, s := range t.SKUs {
		if s.SKU == sku {
			return s.GPUHours
		}
	}
	return decimal.Zero
}

// sourceKWh is the energy t derived from source, zero when none.
func sourceKWh(t chargeback.Totals, source chargeback.EnergySource) decimal.Decimal {
	for _, s := range t.Energy.BySource {
		if s.Source == source {
			return s.KWh
		}
	}
	return decimal.Zero
}

// WriteChargebackHTML writes the report as one self-contained, printable
// HTML page (inline CSS, A4 landscape print margins, no scripts or
// external resources): the period and idle mode; a table of the fleet by
// department and tenant with GPU-hours (in all and by SKU), SM-active
// hours, utilization, memory, energy, kgCO2e, cost per meter, idle share,
// total and share of the fleet, a subtotal per department, the idle row
// (IdleOwnRow) and the fleet total; an inline SVG chart of cost per
// department per day (stacked bars, one per r.Days entry, with a legend);
// how each row's energy was derived and its carbon; and r.Notes. All text
// is escaped by html/template. The page is rendered completely before
// anything is written.
func WriteChargebackHTML(w io.Writer, r chargeback.Report) error {
	if err := checkChargeback(r); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := chargebackHTML.Execute(&buf, newChargebackView(r)); err != nil {
		return fmt.Errorf("chargeback %s: render html: %w", r.Period.Label, err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// chargebackView is the report as the HTML and PDF renderers print it:
// the same text for both, every amount already formatted.
type chargebackView struct {
	Label      string
	Start, End string // UTC
	Currency   string
	Mode       string
	ModeText   string
	Meters     []string // cost column heads ("GPU-hours cost"), in r.Meters order
	Sources    []string // energy source column heads
	Carbon     bool     // a carbon source was given
	Columns    int      // of the main table
	Depts      []chargebackDeptView
	Idle       *chargebackRowView
	Fleet      chargebackRowView
	Chart      chargebackSVG
	Notes      []string
	Fixed      []string // what the figures are, on every report
	EnergyRows []chargebackRowView
	// Efficiency is the held-but-idle section, empty when not asked for.
	Efficiency []chargebackEfficiencyView
	// UsageChart is held vs used GPU-hours per day, with Efficiency when
	// the report has UsageDays; nil otherwise.
	UsageChart *chargebackSVG
}

// chargebackEfficiencyView is one row of the efficiency section.
type chargebackEfficiencyView struct {
	Name, Held, Utilization, Unmeasured, Idle, IdleShare string
	// UtilBar is the utilization bar's length in percent ("25.0"),
	// empty when nothing was measured (no bar, not an empty one).
	UtilBar    string
	Department bool // a department's row, its tenants follow
}

// efficiencyViews formats the efficiency rows: GPU-hours at hoursPlaces,
// shares over the measured time (n/m when nothing was measured).
func efficiencyViews(rows []chargeback.EfficiencyRow) []chargebackEfficiencyView {
	hours := func(us int64) string {
		return decimal.NewFromInt(us).DivRound(decimal.NewFromInt(3_600_000_000), hoursPlaces+2).StringFixed(hoursPlaces)
	}
	pct := func(num, den int64) string {
		if den == 0 {
			return notMeasured
		}
		return decimal.NewFromInt(num).Mul(decimal.NewFromInt(100)).DivRound(decimal.NewFromInt(den), 1).StringFixed(1) + " %"
	}
	out := make([]chargebackEfficiencyView, 0, len(rows))
	for _, r := range rows {
		name := r.Department
		if r.Tenant != "" {
			name = r.Tenant
		}
		bar := ""
		if r.MeasuredGPUMicros > 0 {
			u := decimal.NewFromInt(r.SMActiveMicros).Mul(decimal.NewFromInt(100)).DivRound(decimal.NewFromInt(r.MeasuredGPUMicros), 1)
			bar = decimal.Min(decimal.Max(u, decimal.Zero), decimal.NewFromInt(100)).StringFixed(1)
		}
		out = append(out, chargebackEfficiencyView{Name: name, Held: hours(r.HeldGPUMicros), Utilization: pct(r.SMActiveMicros, r.MeasuredGPUMicros),
			Unmeasured: hours(r.UnmeasuredGPUMicros), Idle: hours(r.IdleGPUMicros), IdleShare: pct(r.IdleGPUMicros, r.MeasuredGPUMicros),
			UtilBar: bar, Department: r.Tenant == ""})
	}
	return out
}

type chargebackDeptView struct {
	Name    string
	Tenants []chargebackRowView
	Total   chargebackRowView
}

// chargebackRowView is one row of the table and of the energy table.
type chargebackRowView struct {
	Name        string
	GPUHours    string
	SKUs        []string // "H100-SXM5-80GB 2.000"
	SMActive    string
	Utilization string // percent, or "n/m" when not measured
	Memory      string
	KWh         string
	KgCO2e      string // "n/a" without a carbon source
	Costs       []string
	IdleCost    string
	Cost        string
	Share       string
	// The energy table: kWh per view Source, GPU-hours without an energy
	// measurement, kWh without a carbon intensity.
	BySource         []string
	EnergyUnmeasured string
	NoIntensity      string
}

// Display places of quantities in HTML and PDF.
const (
	hoursPlaces  = 3
	memoryPlaces = 1
	kwhPlaces    = 3
)

// Texts for figures that are missing, not zero.
const (
	notMeasured = "n/m"
	noCarbon    = "n/a"
)

// idleModeText says what the idle mode did.
func idleModeText(m chargeback.IdleMode) string {
	switch m {
	case chargeback.IdleOwnRow:
		return "idle capacity is its own row, charged to no department"
	case chargeback.IdleByUse:
		return "idle capacity cost is shared to tenants by GPU time held"
	case chargeback.IdleByWeight:
		return "idle capacity cost is shared to departments by weight, then to their tenants by GPU time held"
	case chargeback.IdleEvenly:
		return "idle capacity cost is shared evenly to departments, then to their tenants by GPU time held"
	}
	return string(m)
}

// meterLabel names a meter for a column head (the meter table's label).
func meterLabel(m pricing.Meter) string {
	if l := m.Spec().Label; l != "" {
		return l
	}
	return string(m)
}

// sourceLabel names an energy source for a column head.
func sourceLabel(s chargeback.EnergySource) string {
	switch s {
	case chargeback.EnergyMeasured:
		return "Measured"
	case chargeback.EnergySplitBySlices:
		return "Split by MIG slices"
	case chargeback.EnergySplitByGPM:
		return "Split by MIG GPM activity"
	}
	return string(s)
}

// Names of the idle row (also the idle capacity's series in the chart) and
// of the fleet row.
const (
	idleRowName  = "Idle capacity"
	fleetRowName = "Fleet total"
)

// chargebackFixedNotes explain what every chargeback report shows.
var chargebackFixedNotes = []string{
	"GPU-hours are GPU-equivalent hours held: a MIG instance counts its compute slices / 7, a time-sliced share its share.",
	"Utilization is SM-active time over the GPU time held with SM activity measured; n/m: not measured.",
	"The fleet total's usage covers all capacity, idle included; its meter costs are the tenants' direct costs and its idle share the cost of idle capacity.",
	"Every amount is in whole minor units: the fleet cost is rounded once and split by largest remainder, so the rows add up exactly to the fleet total.",
}

func newChargebackView(r chargeback.Report) chargebackView {
	minor := r.Currency.MinorUnits
	sources := chargebackSources(r)
	v := chargebackView{
		Label:    r.Period.Label,
		Start:    r.Period.Start.UTC().Format("2006-01-02 15:04"),
		End:      r.Period.End.UTC().Format("2006-01-02 15:04"),
		Currency: r.Currency.Code,
		Mode:     string(r.Mode),
		ModeText: idleModeText(r.Mode),
		Carbon:   r.Fleet.Energy.KgCO2e.Valid,
		Notes:    r.Notes,
		Fixed:    chargebackFixedNotes,
	}
	v.Efficiency = efficiencyViews(r.Efficiency)
	for _, m := range r.Meters {
		v.Meters = append(v.Meters, meterLabel(m)+" cost")
	}
	for _, s := range sources {
		v.Sources = append(v.Sources, sourceLabel(s))
	}
	// name, GPU-hours, by SKU, SM-active, utilization, memory, kWh, kgCO2e,
	// meters, idle share, total, share.
	v.Columns = 8 + len(v.Meters) + 3
	row := func(name string, t chargeback.Totals) chargebackRowView {
		rv := chargebackRowView{
			Name:             name,
			GPUHours:         t.GPUHours.StringFixed(hoursPlaces),
			SMActive:         t.SMActiveHours.StringFixed(hoursPlaces),
			Utilization:      notMeasured,
			Memory:           t.MemoryGiBHours.StringFixed(memoryPlaces),
			KWh:              t.Energy.KWh.StringFixed(kwhPlaces),
			KgCO2e:           noCarbon,
			IdleCost:         t.IdleCost.StringFixed(minor),
			Cost:             t.Cost.StringFixed(minor),
			Share:            t.SharePercent.StringFixed(chargeback.SharePlaces),
			EnergyUnmeasured: t.Energy.UnmeasuredGPUHours.StringFixed(hoursPlaces),
			NoIntensity:      noCarbon,
		}
		for _, s := range t.SKUs {
			rv.SKUs = append(rv.SKUs, s.SKU+" "+s.GPUHours.StringFixed(hoursPlaces))
		}
		if t.Utilization.Valid {
			rv.Utilization = t.Utilization.Decimal.Shift(2).StringFixed(chargeback.UtilizationPlaces-2) + " %"
		}
		if t.Energy.KgCO2e.Valid {
			rv.KgCO2e = t.Energy.KgCO2e.Decimal.StringFixed(chargeback.CarbonDisplayPlaces)
			rv.NoIntensity = t.Energy.NoIntensityKWh.StringFixed(kwhPlaces)
		}
		for _, c := range t.Costs {
			rv.Costs = append(rv.Costs, c.Cost.StringFixed(minor))
		}
		for _, s := range sources {
			rv.BySource = append(rv.BySource, sourceKWh(t, s).StringFixed(kwhPlaces))
		}
		return rv
	}
	for _, d := range r.Departments {
		dv := chargebackDeptView{Name: d.Name, Total: row("Subtotal "+d.Name, d.Totals)}
		for _, t := range d.Tenants {
			tv := row(t.Name, t.Totals)
			dv.Tenants = append(dv.Tenants, tv)
			ev := tv
			ev.Name = d.Name + " / " + t.Name
			v.EnergyRows = append(v.EnergyRows, ev)
		}
		v.Depts = append(v.Depts, dv)
	}
	if r.Idle != nil {
		iv := row(idleRowName, *r.Idle)
		v.Idle = &iv
		v.EnergyRows = append(v.EnergyRows, iv)
	}
	v.Fleet = row(fleetRowName, r.Fleet)
	v.EnergyRows = append(v.EnergyRows, v.Fleet)
	v.Chart = newChargebackSVG(r, newDayChart(r))
	if u, ok := usageChartReport(r); ok {
		svg := newChargebackSVG(u, newDayChart(u))
		svg.Caption = usageChartCaption
		v.UsageChart = &svg
	}
	return v
}

// dayChart is the cost per department per day, laid out as stacked bars
// over every UTC day of the period: a bar per r.Days entry, stacked in the
// order of the report's departments with idle capacity on top. Heights are fractions of the costliest day,
// computed in decimals from the day's running sum, so a day's bars meet
// exactly and the costliest day reaches 1.
type dayChart struct {
	Days   []time.Time
	Series []chartSeries
	Bars   []chartBar // in r.Days order
	// Max is the top of the axis: the highest of Ticks, at or above the
	// costliest day; bars are fractions of it.
	Max   decimal.Decimal
	Ticks []decimal.Decimal // the y axis's labels, from 0 in equal steps
	Minor int32
	Code  string
}

type chartSeries struct {
	Name  string
	Color [3]int
}

type chartBar struct {
	Day, Series int             // indexes into Days and Series
	Bottom, Top decimal.Decimal // fractions of Max, 0 to 1
	Cost        decimal.Decimal
}

// chartPalette colours the departments in turn; idleColor is idle capacity.
var (
	chartPalette = [][3]int{
		{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}, {148, 103, 189},
		{140, 86, 75}, {227, 119, 194}, {188, 189, 34}, {23, 190, 207}, {127, 127, 127},
	}
	idleColor = [3]int{200, 200, 200}
)

// seriesColor is the i-th department's colour: the palette, then the
// palette lighter each time round, so that departments keep apart.
func seriesColor(i int) [3]int {
	c := chartPalette[i%len(chartPalette)]
	round := i / len(chartPalette) % 4
	for k := range c {
		c[k] += (255 - c[k]) * round / (round + 2)
	}
	return c
}

// legendColumns is how many legend entries share a line, in SVG and PDF.
const legendColumns = 3

// chartFractionPlaces is the precision of bar heights: far below a pixel
// or a tenth of a millimetre.
const chartFractionPlaces = 6

func newDayChart(r chargeback.Report) dayChart {
	c := dayChart{Max: decimal.Zero, Minor: r.Currency.MinorUnits, Code: r.Currency.Code}
	series := map[string]int{}
	add := func(dept, name string, color [3]int) {
		series[dept] = len(c.Series)
		c.Series = append(c.Series, chartSeries{Name: name, Color: color})
	}
	for i, d := range r.Departments {
		add(d.Name, d.Name, seriesColor(i))
	}
	hasIdle := false
	for _, dc := range r.Days {
		if dc.Department == "" {
			hasIdle = true
		} else if _, ok := series[dc.Department]; !ok {
			// A day of a department the report does not list: shown anyway.
			add(dc.Department, dc.Department, seriesColor(len(c.Series)))
		}
	}
	if hasIdle {
		add("", idleRowName, idleColor)
	}

	// The axis has every UTC day of the period, so that a day without
	// cost shows as a gap, and any day of r.Days outside it.
	seen := map[int64]bool{}
	var keys []int64
	addDay := func(t time.Time) {
		if k := utcDay(t).Unix(); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if p := r.Period; p.End.After(p.Start) && p.End.Sub(p.Start) <= maxChartDays*24*time.Hour {
		for d := utcDay(p.Start); d.Before(p.End); d = d.AddDate(0, 0, 1) {
			addDay(d)
		}
	}
	for _, dc := range r.Days {
		addDay(dc.Day)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	days := map[int64]int{}
	for i, k := range keys {
		days[k] = i
		c.Days = append(c.Days, time.Unix(k, 0).UTC())
	}
	if len(r.Days) == 0 {
		c.Days = nil // nothing to chart
	}
	totals := make([]decimal.Decimal, len(c.Days))
	for _, dc := range r.Days {
		k := days[utcDay(dc.Day).Unix()]
		totals[k] = totals[k].Add(dc.Cost)
	}
	for _, t := range totals {
		if t.GreaterThan(c.Max) {
			c.Max = t
		}
	}
	c.Ticks = niceTicks(c.Max)
	c.Max = c.Ticks[len(c.Ticks)-1]
	// Stack each day's bars in series order.
	order := make([]int, len(r.Days))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		da, db := r.Days[order[a]], r.Days[order[b]]
		if !da.Day.Equal(db.Day) {
			return da.Day.Before(db.Day)
		}
		return series[da.Department] < series[db.Department]
	})
	c.Bars = make([]chartBar, len(r.Days))
	running := make([]decimal.Decimal, len(c.Days))
	frac := func(d decimal.Decimal) decimal.Decimal {
		if c.Max.IsZero() {
			return decimal.Zero
		}
		return d.DivRound(c.Max, chartFractionPlaces)
	}
	for _, i := range order {
		dc := r.Days[i]
		day := days[utcDay(dc.Day).Unix()]
		bottom := running[day]
		running[day] = bottom.Add(dc.Cost)
		c.Bars[i] = chartBar{Day: day, Series: series[dc.Department], Bottom: frac(bottom), Top: frac(running[day]), Cost: dc.Cost}
	}
	return c
}

// niceTicks are an axis's labels for values up to max: 0, then equal steps
// of 1, 2 or 5 times a power of ten (about five of them), the last at or
// above max. A max of 0 gives 0 and 1.
func niceTicks(max decimal.Decimal) []decimal.Decimal {
	if max.Sign() <= 0 {
		return []decimal.Decimal{decimal.Zero, decimal.NewFromInt(1)}
	}
	raw := max.Div(decimal.NewFromInt(5))
	// magnitude: the power of ten at or below raw.
	magnitude := decimal.New(1, int32(len(raw.Truncate(0).String())-1))
	if raw.LessThan(decimal.NewFromInt(1)) {
		magnitude = decimal.NewFromInt(1)
		for magnitude.GreaterThan(raw) {
			magnitude = magnitude.Shift(-1)
		}
	}
	step := magnitude.Mul(decimal.NewFromInt(10))
	for _, m := range []int64{1, 2, 5} {
		if c := magnitude.Mul(decimal.NewFromInt(m)); c.GreaterThanOrEqual(raw) {
			step = c
			break
		}
	}
	ticks := []decimal.Decimal{decimal.Zero}
	for t := decimal.Zero; t.LessThan(max); {
		t = t.Add(step)
		ticks = append(ticks, t)
	}
	return ticks
}

// The held-vs-used chart's series: tenants' SM-active time, the rest of
// what they held, and idle capacity (held by no one) on top.
const (
	usedSeries        = "SM-active"
	heldIdleSeries    = "Held, SM not active or not measured"
	usageChartCaption = "GPU-hours per day (UTC): held by tenants (SM-active, and the rest of what they held) and idle capacity"
)

// usageChartReport lays r.UsageDays out as a report whose days are the
// chart's stacked bars and whose "currency" is GPU-hours, so that the held
// vs used chart is drawn by the same code as the cost chart. False when r
// has no UsageDays.
func usageChartReport(r chargeback.Report) (chargeback.Report, bool) {
	if len(r.UsageDays) == 0 {
		return chargeback.Report{}, false
	}
	u := chargeback.Report{Period: r.Period, Currency: pricing.Currency{Code: "GPU-h", MinorUnits: 2},
		Departments: []chargeback.Department{{Name: usedSeries}, {Name: heldIdleSeries}}}
	hours := func(us uint64) decimal.Decimal {
		return decimal.NewFromUint64(us).DivRound(decimal.NewFromInt(3_600_000_000), 6)
	}
	for _, d := range r.UsageDays {
		used := min(d.SMActiveMicroseconds, d.HeldGPUMicroseconds)
		u.Days = append(u.Days,
			chargeback.DayCost{Day: d.Day, Department: usedSeries, Cost: hours(used)},
			chargeback.DayCost{Day: d.Day, Department: heldIdleSeries, Cost: hours(d.HeldGPUMicroseconds - used)},
			chargeback.DayCost{Day: d.Day, Department: "", Cost: hours(d.IdleGPUMicroseconds)})
	}
	return u, true
}

// maxChartDays bounds the chart's axis: a longer period shows only the
// days with cost.
const maxChartDays = 400

// utcDay is the UTC midnight starting t's UTC day.
func utcDay(t time.Time) time.Time {
	u := t.UTC()
	return time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC)
}

// dayLabelStep is every how many days the axis is labelled, so that labels
// do not overlap: all of them up to 16 days.
func (c dayChart) dayLabelStep() int {
	return max(1, (len(c.Days)+15)/16)
}

// barTitle says what a bar shows.
func (c dayChart) barTitle(b chartBar) string {
	return fmt.Sprintf("%s, %s: %s %s", c.Series[b.Series].Name, c.Days[b.Day].Format(time.DateOnly),
		b.Cost.StringFixed(c.Minor), c.Code)
}

// chargebackSVG is the chart in SVG user units, every number formatted.
type chargebackSVG struct {
	Width, Height int
	Empty         bool
	PlotLeft      int
	PlotTop       int
	PlotRight     int
	PlotBottom    int
	Ticks         []svgText // the y axis's labels, with a grid line each
	Bars          []svgBar
	Labels        []svgText
	Legend        []svgLegend
	Caption       string
}

type svgBar struct {
	X, Y, W, H string
	Fill       string
	Title      string
	Series     string
	Day        string
}

type svgText struct {
	X, Y string
	Text string
}

type svgLegend struct {
	X, Y, TextX, TextY int
	Fill               string
	Name               string
}

// SVG geometry.
const (
	svgWidth      = 900
	svgPlotLeft   = 80
	svgPlotRight  = 880
	svgPlotTop    = 20
	svgPlotHeight = 220
	svgLegendLine = 18
	// svgLegendColumn is the width of a legend entry.
	svgLegendColumn = (svgPlotRight - svgPlotLeft) / legendColumns
)

// legendLines is how many lines a legend of n entries takes.
func legendLines(n int) int { return (n + legendColumns - 1) / legendColumns }

func newChargebackSVG(r chargeback.Report, c dayChart) chargebackSVG {
	s := chargebackSVG{
		Width:      svgWidth,
		PlotLeft:   svgPlotLeft,
		PlotTop:    svgPlotTop,
		PlotRight:  svgPlotRight,
		PlotBottom: svgPlotTop + svgPlotHeight,
		Empty:      len(c.Days) == 0,
		Caption:    "Cost per department per day (UTC), " + r.Currency.Code,
	}
	legendTop := s.PlotBottom + 40
	s.Height = legendTop + svgLegendLine*legendLines(len(c.Series)) + 10
	if s.Empty {
		return s
	}
	slot := decimal.NewFromInt(svgPlotRight - svgPlotLeft).Div(decimal.NewFromInt(int64(len(c.Days))))
	width := slot.Mul(decimal.New(7, -1)).Round(2) // bars fill 70 % of their slot
	plotH := decimal.NewFromInt(svgPlotHeight)
	bottom := decimal.NewFromInt(int64(s.PlotBottom))
	for _, b := range c.Bars {
		x := decimal.NewFromInt(svgPlotLeft).Add(slot.Mul(decimal.NewFromInt(int64(b.Day)))).Add(slot.Sub(width).Div(decimal.NewFromInt(2)))
		top := bottom.Sub(b.Top.Mul(plotH)).Round(2)
		low := bottom.Sub(b.Bottom.Mul(plotH)).Round(2)
		s.Bars = append(s.Bars, svgBar{
			X: x.Round(2).String(), Y: top.String(), W: width.String(), H: low.Sub(top).String(),
			Fill:   rgbHex(c.Series[b.Series].Color),
			Title:  c.barTitle(b),
			Series: c.Series[b.Series].Name,
			Day:    c.Days[b.Day].Format(time.DateOnly),
		})
	}
	for _, t := range c.Ticks {
		y := bottom.Sub(t.DivRound(c.Max, chartFractionPlaces).Mul(plotH)).Round(2)
		s.Ticks = append(s.Ticks, svgText{Y: y.String(), Text: t.String()})
	}
	step := c.dayLabelStep()
	for i, d := range c.Days {
		if i%step != 0 {
			continue
		}
		x := decimal.NewFromInt(svgPlotLeft).Add(slot.Mul(decimal.NewFromInt(int64(i)))).Add(slot.Div(decimal.NewFromInt(2)))
		s.Labels = append(s.Labels, svgText{X: x.Round(2).String(), Y: strconv.Itoa(s.PlotBottom + 16), Text: d.Format("01-02")})
	}
	for i, se := range c.Series {
		x, y := svgPlotLeft+i%legendColumns*svgLegendColumn, legendTop+i/legendColumns*svgLegendLine
		s.Legend = append(s.Legend, svgLegend{X: x, Y: y, TextX: x + 18, TextY: y + 10,
			Fill: rgbHex(se.Color), Name: se.Name})
	}
	return s
}

func rgbHex(c [3]int) string { return fmt.Sprintf("#%02x%02x%02x", c[0], c[1], c[2]) }

// chargebackHTML is parsed once from a literal; Must cannot fail at run time.
var chargebackHTML = template.Must(template.New("chargeback").Parse(chargebackHTMLText))

const chargebackHTMLText = `{{define "cells"}}<td class="num gpu">{{.GPUHours}}</td><td class="skus">{{range $i, $s := .SKUs}}{{if $i}}<br>{{end}}<span class="sku">{{$s}}</span>{{end}}</td><td class="num">{{.SMActive}}</td><td class="num">{{.Utilization}}</td><td class="num">{{.Memory}}</td><td class="num">{{.KWh}}</td><td class="num">{{.KgCO2e}}</td>{{range .Costs}}<td class="num meter">{{.}}</td>{{end}}<td class="num idle">{{.IdleCost}}</td><td class="num cost">{{.Cost}}</td><td class="num share">{{.Share}}</td>{{end}}{{define "svg"}}<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="{{.Caption}}">
{{range .Ticks}}<line class="grid" x1="{{$.PlotLeft}}" y1="{{.Y}}" x2="{{$.PlotRight}}" y2="{{.Y}}" stroke="#e6e6e6" stroke-width="1"/><text class="tick" x="{{$.PlotLeft}}" y="{{.Y}}" dx="-4" dy="4" text-anchor="end">{{.Text}}</text>
{{end}}<line x1="{{.PlotLeft}}" y1="{{.PlotBottom}}" x2="{{.PlotRight}}" y2="{{.PlotBottom}}" stroke="#111" stroke-width="1"/>
<line x1="{{.PlotLeft}}" y1="{{.PlotTop}}" x2="{{.PlotLeft}}" y2="{{.PlotBottom}}" stroke="#111" stroke-width="1"/>
{{range .Bars}}<rect class="bar" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="{{.Fill}}" data-series="{{.Series}}" data-day="{{.Day}}"><title>{{.Title}}</title></rect>
{{end}}{{range .Labels}}<text x="{{.X}}" y="{{.Y}}" text-anchor="middle">{{.Text}}</text>
{{end}}{{range .Legend}}<g class="legend"><rect x="{{.X}}" y="{{.Y}}" width="12" height="12" fill="{{.Fill}}"/><text x="{{.TextX}}" y="{{.TextY}}">{{.Name}}</text></g>
{{end}}</svg>
{{end}}<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Chargeback {{.Label}}</title>
<style>
@page { size: A4 landscape; margin: 12mm; }
* { box-sizing: border-box; }
body { font-family: Helvetica, Arial, sans-serif; font-size: 9pt; color: #111; margin: 0 auto; max-width: 273mm; padding: 8mm 0; }
h1 { font-size: 16pt; margin: 0 0 3mm; }
h2 { font-size: 11pt; margin: 6mm 0 2mm; }
.meta { border-collapse: collapse; margin-bottom: 5mm; }
.meta th { text-align: left; font-weight: normal; color: #555; padding: 0.5mm 4mm 0.5mm 0; }
.meta td { padding: 0.5mm 0; }
table.chargeback, table.energy { width: 100%; border-collapse: collapse; }
table.chargeback th, table.energy th { text-align: left; border-bottom: 1px solid #111; padding: 1mm; font-size: 8pt; vertical-align: bottom; }
table.chargeback td, table.energy td { padding: 0.8mm 1mm; vertical-align: top; border-bottom: 1px solid #ddd; }
.num { text-align: right; white-space: nowrap; }
th.num { text-align: right; }
td.skus { font-size: 7.5pt; color: #333; white-space: nowrap; }
.scroll { overflow-x: auto; max-width: 100%; }
.meta td { overflow-wrap: anywhere; }
tr.dept th { border-bottom: none; padding-top: 3mm; font-size: 9.5pt; }
tr.tenant td.name { padding-left: 4mm; }
tr.subtotal td { font-weight: bold; border-bottom: 1px solid #888; }
tr.idle td { font-style: italic; }
tr.fleet td { font-weight: bold; border-top: 2px solid #111; border-bottom: none; }
figure { margin: 0; }
figcaption { font-size: 8.5pt; color: #555; }
svg { width: 100%; height: auto; max-width: 900px; }
svg.util { width: 14mm; height: 1.6mm; margin-left: 1.5mm; vertical-align: middle; }
svg text { font-family: Helvetica, Arial, sans-serif; font-size: 10px; fill: #333; }
.notes { font-size: 8.5pt; }
.notes li { margin-bottom: 1mm; }
thead { display: table-header-group; }
tr { page-break-inside: avoid; }
figure, .energy-section { page-break-inside: avoid; }
</style>
</head>
<body>
<h1>Chargeback {{.Label}}</h1>
<table class="meta">
<tr><th>Period</th><td>{{.Label}}: {{.Start}} to {{.End}} (UTC)</td></tr>
<tr><th>Currency</th><td>{{.Currency}}</td></tr>
<tr><th>Idle capacity</th><td>{{.Mode}}: {{.ModeText}}</td></tr>
<tr><th>Fleet cost</th><td class="fleet-cost">{{.Fleet.Cost}} {{.Currency}}</td></tr>
<tr><th>Fleet GPU-hours</th><td>{{.Fleet.GPUHours}} (utilization {{.Fleet.Utilization}})</td></tr>
<tr><th>Fleet energy</th><td>{{.Fleet.KWh}} kWh{{if .Carbon}}, {{.Fleet.KgCO2e}} kgCO2e{{else}} (no carbon intensities given){{end}}</td></tr>
</table>
<h2>Cost by department and tenant</h2>
<div class="scroll"><table class="chargeback">
<thead><tr><th>Department / tenant</th><th class="num">GPU-hours</th><th>GPU-hours by SKU</th><th class="num">SM-active hours</th><th class="num">Utilization</th><th class="num">Memory GiB-hours</th><th class="num">Energy kWh</th><th class="num">kgCO2e</th>{{range .Meters}}<th class="num">{{.}} ({{$.Currency}})</th>{{end}}<th class="num">Idle share ({{.Currency}})</th><th class="num">Total ({{.Currency}})</th><th class="num">Share %</th></tr></thead>
{{range .Depts}}<tbody class="department">
<tr class="dept"><th colspan="{{$.Columns}}">{{.Name}}</th></tr>
{{range .Tenants}}<tr class="tenant"><td class="name">{{.Name}}</td>{{template "cells" .}}</tr>
{{end}}<tr class="subtotal"><td class="name">{{.Total.Name}}</td>{{template "cells" .Total}}</tr>
</tbody>
{{end}}{{with .Idle}}<tbody class="idle">
<tr class="idle"><td class="name">{{.Name}}</td>{{template "cells" .}}</tr>
</tbody>
{{end}}<tfoot>
<tr class="fleet"><td class="name">{{.Fleet.Name}}</td>{{template "cells" .Fleet}}</tr>
</tfoot>
</table></div>
<h2>Cost per department per day</h2>
<figure>
{{with .Chart}}{{if .Empty}}<p>No usage in this period.</p>
{{else}}{{template "svg" .}}{{end}}<figcaption>{{.Caption}}. Each department's days add up to its total; a shared idle cost falls on the days the idle capacity cost something.</figcaption>
{{end}}</figure>
<div class="energy-section">
<h2>Energy and carbon</h2>
<div class="scroll"><table class="energy">
<thead><tr><th>Row</th><th class="num">Energy kWh</th>{{range .Sources}}<th class="num">{{.}} kWh</th>{{end}}<th class="num">GPU-hours without energy measurement</th><th class="num">kWh without carbon intensity</th><th class="num">kgCO2e</th></tr></thead>
<tbody>
{{range .EnergyRows}}<tr><td>{{.Name}}</td><td class="num">{{.KWh}}</td>{{range .BySource}}<td class="num">{{.}}</td>{{end}}<td class="num">{{.EnergyUnmeasured}}</td><td class="num">{{.NoIntensity}}</td><td class="num">{{.KgCO2e}}</td></tr>
{{end}}</tbody>
</table></div>
</div>
{{if .Efficiency}}<div class="efficiency-section">
<h2>Efficiency: held-but-idle GPUs</h2>
<div class="scroll"><table class="efficiency">
<thead><tr><th>Department / tenant</th><th class="num">GPU-hours held</th><th class="num">Utilization</th><th class="num">GPU-hours unmeasured</th><th class="num">GPU-hours held but idle</th><th class="num">Idle share</th></tr></thead>
<tbody>
{{range .Efficiency}}<tr{{if .Department}} class="subtotal"{{end}}><td class="name">{{.Name}}</td><td class="num">{{.Held}}</td><td class="num">{{.Utilization}}{{if .UtilBar}}<svg class="util" viewBox="0 0 100 6" role="img" aria-label="utilization {{.Utilization}}"><rect width="100" height="6" fill="#e6e6e6"/><rect class="util-bar" width="{{.UtilBar}}" height="6" fill="#1f77b4"/></svg>{{end}}</td><td class="num">{{.Unmeasured}}</td><td class="num idle-hours">{{.Idle}}</td><td class="num">{{.IdleShare}}</td></tr>
{{end}}</tbody>
</table></div>
<p>Held but idle: measured SM activity under 5 % of the GPU time held for at least 30 minutes on end; unmeasured time is never idle. Utilization and idle share are over the measured time (docs/insights.md).</p>
{{with .UsageChart}}<h2>Held vs used per day</h2>
<figure class="usage-chart">
{{template "svg" .}}<figcaption>{{.Caption}}.</figcaption>
</figure>
{{end}}</div>
{{end}}<h2>Notes</h2>
<ul class="notes">
{{range .Notes}}<li class="note">{{.}}</li>
{{end}}{{range .Fixed}}<li>{{.}}</li>
{{end}}{{if not .Carbon}}<li>No carbon intensities were given: kgCO2e is not computed (n/a), which is not zero carbon.</li>
{{end}}</ul>
</body>
</html>
`
