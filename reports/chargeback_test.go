package reports_test

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/chargeback"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/gpumeter/gpumeter/reports"
)

const (
	cbH100    = "H100-SXM5-80GB"
	cbMIG     = "H100-SXM5-80GB/3g.40gb"
	cbA100    = "A100-SXM4-40GB"
	cbGPUHour = 3_600_000_000 // GPU-microseconds in one GPU-hour
	// cbRnD and cbCarol need escaping in HTML.
	cbRnD   = "R&D <ml>"
	cbCarol = "carol & co"
)

var (
	cbUSD    = pricing.Currency{Code: "USD", MinorUnits: 2, Rounding: pricing.HalfAwayFromZero}
	cbPeriod = chargeback.Period{Label: "2026-11", Start: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		End: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	cbModes = []chargeback.IdleMode{chargeback.IdleOwnRow, chargeback.IdleByUse, chargeback.IdleByWeight, chargeback.IdleEvenly}
)

func cbHour(day, h int) time.Time { return time.Date(2026, 11, day, h, 0, 0, 0, time.UTC) }

func cbCosts(kv ...string) map[pricing.Meter]decimal.Decimal {
	m := map[pricing.Meter]decimal.Decimal{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[pricing.Meter(kv[i])] = decimal.RequireFromString(kv[i+1])
	}
	return m
}

// chargebackInput is a small fleet over two days in two departments,
// priced at $2.50 per GPU-hour and $0.15 per kWh, carbon per site
// (eu-west 200 g/kWh, us-east 400, ap-south unknown):
//
//   - physics/alice holds an H100 in eu-west for an hour on each day; on
//     day 2 its energy was not measured;
//   - physics/bob holds a 3g.40gb MIG instance of the H100 next to it on
//     day 1 (3/7 of an hour); the other 4/7 are idle;
//   - R&D <ml>/carol & co holds an A100 in us-east for an hour on day 1, and
//     half an hour of one in ap-south on day 2, whose other half is idle.
func chargebackInput(mode chargeback.IdleMode) chargeback.Input {
	rows := []chargeback.Row{
		{Department: "physics", Tenant: "alice", SKU: cbH100, Site: "eu-west", Hour: cbHour(1, 10),
			GPUMicroseconds: cbGPUHour, SMActiveMicroseconds: 2_700_000_000, MemMiBSeconds: 81920 * 3600,
			EnergyMillijoules: 2_520_000_000, EnergySource: chargeback.EnergyMeasured,
			Cost: cbCosts("gpu_hours", "2.50", "energy_kwh", "0.105")},
		{Department: "physics", Tenant: "bob", SKU: cbMIG, Site: "eu-west", Hour: cbHour(1, 10),
			GPUMicroseconds: 1_542_857_143, SMActiveMicroseconds: 1_000_000_000, MemMiBSeconds: 40960 * 3600,
			EnergyMillijoules: 1_080_000_000, EnergySource: chargeback.EnergySplitBySlices,
			Cost: cbCosts("gpu_hours", "1.071428571", "energy_kwh", "0.045")},
		{SKU: cbH100, Site: "eu-west", Hour: cbHour(1, 10), GPUMicroseconds: 2_057_142_857,
			EnergyMillijoules: 360_000_000, EnergySource: chargeback.EnergySplitBySlices,
			Cost: cbCosts("gpu_hours", "1.428571429", "energy_kwh", "0.015")},
		{Department: cbRnD, Tenant: cbCarol, SKU: cbA100, Site: "us-east", Hour: cbHour(1, 10),
			GPUMicroseconds: cbGPUHour, SMActiveMicroseconds: 1_800_000_000, MemMiBSeconds: 24576 * 3600,
			EnergyMillijoules: 1_440_000_000, EnergySource: chargeback.EnergyMeasured,
			Cost: cbCosts("gpu_hours", "2.50", "energy_kwh", "0.06")},
		{Department: "physics", Tenant: "alice", SKU: cbH100, Site: "eu-west", Hour: cbHour(2, 3),
			GPUMicroseconds: cbGPUHour, SMActiveMicroseconds: cbGPUHour, Unmeasured: meter.UnmeasuredTime{meter.GroupEnergy: cbGPUHour},
			Cost: cbCosts("gpu_hours", "2.50")},
		{Department: cbRnD, Tenant: cbCarol, SKU: cbA100, Site: "ap-south", Hour: cbHour(2, 3),
			GPUMicroseconds: cbGPUHour / 2, SMActiveMicroseconds: cbGPUHour / 4,
			EnergyMillijoules: 720_000_000, EnergySource: chargeback.EnergyMeasured,
			Cost: cbCosts("gpu_hours", "1.25", "energy_kwh", "0.03")},
		{SKU: cbA100, Site: "ap-south", Hour: cbHour(2, 3), GPUMicroseconds: cbGPUHour / 2,
			Cost: cbCosts("gpu_hours", "1.25")},
	}
	return chargeback.Input{Period: cbPeriod, Currency: cbUSD, Rows: rows, Idle: mode,
		Weights: map[string]decimal.Decimal{"physics": decimal.NewFromInt(3), cbRnD: decimal.NewFromInt(1)},
		Carbon: &chargeback.CarbonSource{Sites: map[string]decimal.Decimal{
			"eu-west": decimal.NewFromInt(200), "us-east": decimal.NewFromInt(400)}}}
}

func chargebackReport(t *testing.T, mode chargeback.IdleMode) chargeback.Report {
	t.Helper()
	r, err := chargeback.Allocate(chargebackInput(mode))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The fixture has what the renderers must show: two departments, a MIG
// share, idle capacity, two days, carbon and energy notes.
func TestChargebackFixture(t *testing.T) {
	r := chargebackReport(t, chargeback.IdleOwnRow)
	if len(r.Departments) != 2 || r.Departments[0].Name != cbRnD || len(r.Departments[1].Tenants) != 2 {
		t.Fatalf("departments %+v", r.Departments)
	}
	if r.Idle == nil || r.Idle.Cost.IsZero() || !r.Fleet.Cost.Equal(decimal.RequireFromString("12.76")) {
		t.Errorf("idle %+v, fleet cost %s; want an idle row and 12.76", r.Idle, r.Fleet.Cost)
	}
	if len(r.Days) != 6 || len(r.Notes) < 3 || !r.Fleet.Energy.KgCO2e.Valid || r.Fleet.Energy.NoIntensityKWh.IsZero() {
		t.Errorf("days %v, notes %q, carbon %+v", r.Days, r.Notes, r.Fleet.Energy)
	}
}

func TestWriteChargebackJSONRoundTrips(t *testing.T) {
	for _, mode := range cbModes {
		t.Run(string(mode), func(t *testing.T) {
			r := chargebackReport(t, mode)
			var buf, again bytes.Buffer
			if err := reports.WriteChargebackJSON(&buf, r); err != nil {
				t.Fatal(err)
			}
			if err := reports.WriteChargebackJSON(&again, r); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), again.Bytes()) {
				t.Error("two encodings of one report differ")
			}
			var back chargeback.Report
			if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			var re bytes.Buffer
			if err := reports.WriteChargebackJSON(&re, back); err != nil {
				t.Fatal(err)
			}
			if re.String() != buf.String() {
				t.Errorf("read back and written again:\n%s\nwant:\n%s", re.String(), buf.String())
			}
			if !back.Fleet.Cost.Equal(r.Fleet.Cost) || back.Mode != mode || len(back.Days) != len(r.Days) ||
				!back.Period.End.Equal(r.Period.End) || back.Departments[0].Name != cbRnD {
				t.Errorf("read back %+v", back)
			}
			if !strings.HasPrefix(buf.String(), "{\n  \"period\": {") || !strings.HasSuffix(buf.String(), "}\n") {
				t.Errorf("not indented JSON:\n%s", buf.String())
			}
		})
	}
	if err := reports.WriteChargebackJSON(&failingWriter{n: 10}, chargebackReport(t, chargeback.IdleByUse)); !errors.Is(err, errFull) {
		t.Errorf("failing writer: error %v", err)
	}
}

var cbMoney = regexp.MustCompile(`^\d+\.\d{2}$`)

func TestWriteChargebackCSV(t *testing.T) {
	for _, mode := range cbModes {
		t.Run(string(mode), func(t *testing.T) {
			r := chargebackReport(t, mode)
			var buf bytes.Buffer
			if err := reports.WriteChargebackCSV(&buf, r); err != nil {
				t.Fatal(err)
			}
			rows, err := csv.NewReader(bytes.NewReader(buf.Bytes())).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			header := strings.Join(rows[0], ",")
			want := "period,row,department,tenant,gpu_hours," +
				"gpu_hours[A100-SXM4-40GB],gpu_hours[H100-SXM5-80GB],gpu_hours[H100-SXM5-80GB/3g.40gb]," +
				"sm_active_hours,sm_unmeasured_gpu_hours,utilization,memory_gib_hours," +
				"energy_kwh,energy_kwh[measured],energy_kwh[split_by_slices],energy_unmeasured_gpu_hours," +
				"kg_co2e,no_intensity_kwh,cost[gpu_hours],cost[energy_kwh],idle_cost,cost,share_percent,currency"
			if header != want {
				t.Fatalf("header %s\nwant   %s", header, want)
			}
			col := map[string]int{}
			for i, c := range rows[0] {
				col[c] = i
			}
			idle := 0
			if mode == chargeback.IdleOwnRow {
				idle = 1
			}
			if len(rows) != 1+3+2+idle+1 {
				t.Fatalf("%d rows, want header, 3 tenants, 2 departments, %d idle, fleet", len(rows), idle)
			}
			var kinds []string
			for _, row := range rows[1:] {
				kinds = append(kinds, row[col["row"]])
			}
			wantKinds := "tenant tenant tenant department department " + strings.Repeat("idle ", idle) + "fleet"
			if got := strings.Join(kinds, " "); got != wantKinds {
				t.Fatalf("rows %s, want %s", got, wantKinds)
			}

			money := []string{"cost[gpu_hours]", "cost[energy_kwh]", "idle_cost", "cost", "share_percent"}
			dec := func(row []string, c string) decimal.Decimal {
				t.Helper()
				s := row[col[c]]
				if c != "share_percent" && !cbMoney.MatchString(s) {
					t.Errorf("%s %q: not an amount with 2 places", c, s)
				}
				d, err := decimal.NewFromString(s)
				if err != nil {
					t.Fatalf("%s: %v", c, err)
				}
				return d
			}
			var fleet []string
			tenants, depts := map[string]decimal.Decimal{}, map[string]decimal.Decimal{}
			for _, row := range rows[1:] {
				if row[col["period"]] != "2026-11" || row[col["currency"]] != "USD" {
					t.Errorf("row %v: period or currency", row)
				}
				switch row[col["row"]] {
				case "tenant":
					for _, c := range money {
						tenants[c] = tenants[c].Add(dec(row, c))
						depts[row[col["department"]]+" "+c] = depts[row[col["department"]]+" "+c].Add(dec(row, c))
					}
				case "department":
					if row[col["tenant"]] != "" {
						t.Errorf("department row with tenant %q", row[col["tenant"]])
					}
					for _, c := range money {
						if got, want := dec(row, c), depts[row[col["department"]]+" "+c]; !got.Equal(want) {
							t.Errorf("department %s: %s %s, its tenants add up to %s", row[col["department"]], c, got, want)
						}
					}
				case "idle":
					if row[col["department"]] != "" || row[col["tenant"]] != "" {
						t.Errorf("idle row %v", row)
					}
					// The idle row's cost is the fleet's idle cost; its meter
					// parts are the idle capacity's, not the tenants'.
					tenants["idle_cost"] = tenants["idle_cost"].Add(dec(row, "cost"))
					tenants["cost"] = tenants["cost"].Add(dec(row, "cost"))
					tenants["share_percent"] = tenants["share_percent"].Add(dec(row, "share_percent"))
				case "fleet":
					fleet = row
				}
			}
			// In every mode, the tenant rows (and the idle row) add up to the
			// fleet row exactly: per meter, idle share, cost and share.
			for _, c := range money {
				if got, want := tenants[c], dec(fleet, c); !got.Equal(want) {
					t.Errorf("%s: rows add up to %s, fleet row %s", c, got, want)
				}
			}
			if got := fleet[col["cost"]]; got != r.Fleet.Cost.StringFixed(2) || got != "12.76" {
				t.Errorf("fleet cost %s, report %s", got, r.Fleet.Cost)
			}
			if got := fleet[col["share_percent"]]; got != "100.00" {
				t.Errorf("fleet share %s", got)
			}
			// MIG in GPU-equivalents; carbon and missing intensity.
			bob := rows[3]
			if bob[col["tenant"]] != "bob" || bob[col["gpu_hours["+cbMIG+"]"]] != "0.428571429" ||
				bob[col["gpu_hours["+cbH100+"]"]] != "0" || bob[col["energy_kwh[split_by_slices]"]] != "0.3" ||
				bob[col["kg_co2e"]] != "0.060" {
				t.Errorf("bob %v", bob)
			}
			carol := rows[1]
			if carol[col["tenant"]] != cbCarol || carol[col["department"]] != cbRnD ||
				carol[col["no_intensity_kwh"]] != "0.2" || carol[col["kg_co2e"]] != "0.160" || carol[col["utilization"]] != "0.5000" {
				t.Errorf("carol %v", carol)
			}
			alice := rows[2]
			if alice[col["energy_unmeasured_gpu_hours"]] != "1" || alice[col["utilization"]] != "0.8750" {
				t.Errorf("alice %v", alice)
			}
			if mode == chargeback.IdleOwnRow {
				golden(t, "chargeback-own_row.csv", buf.Bytes())
			}
		})
	}
	if err := reports.WriteChargebackCSV(&failingWriter{n: 100}, chargebackReport(t, chargeback.IdleByUse)); !errors.Is(err, errFull) {
		t.Errorf("failing writer: error %v", err)
	}
}

var (
	cbBar      = regexp.MustCompile(`<rect class="bar" x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)" fill="#[0-9a-f]{6}" data-series="([^"]*)" data-day="([\d-]+)"><title>([^<]*)</title></rect>`)
	cbDayLabel = regexp.MustCompile(`<text x="[\d.]+" y="256" text-anchor="middle">(\d\d-\d\d)</text>`)
	cbLegend   = regexp.MustCompile(`<g class="legend"><rect [^>]*/><text [^>]*>([^<]*)</text></g>`)
	cbTick     = regexp.MustCompile(`<text class="tick" x="[\d.]+" y="[\d.]+" dx="-4" dy="4" text-anchor="end">([\d.]+)</text>`)
	cbCost     = regexp.MustCompile(`<tr class="(tenant|subtotal|idle|fleet)"><td class="name">([^<]*)</td>.*<td class="num cost">([^<]*)</td>`)
)

func TestWriteChargebackHTML(t *testing.T) {
	for _, mode := range cbModes {
		t.Run(string(mode), func(t *testing.T) {
			r := chargebackReport(t, mode)
			var buf bytes.Buffer
			if err := reports.WriteChargebackHTML(&buf, r); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			// Every tenant, subtotal, idle and fleet row shows the report's cost.
			want := map[string]string{}
			for _, d := range r.Departments {
				for _, tn := range d.Tenants {
					want[html.EscapeString(tn.Name)] = tn.Cost.StringFixed(2)
				}
				want[html.EscapeString("Subtotal "+d.Name)] = d.Cost.StringFixed(2)
			}
			if r.Idle != nil {
				want["Idle capacity"] = r.Idle.Cost.StringFixed(2)
			}
			want["Fleet total"] = r.Fleet.Cost.StringFixed(2)
			got := map[string]string{}
			for _, m := range cbCost.FindAllStringSubmatch(out, -1) {
				got[m[2]] = m[3]
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("rows %v\nwant %v", got, want)
			}
			for _, s := range []string{
				`<tr class="dept"><th colspan="13">physics</th></tr>`,
				`<tr class="dept"><th colspan="13">R&amp;D &lt;ml&gt;</th></tr>`,
				`<td class="name">carol &amp; co</td>`, `<td class="name">alice</td>`, `<td class="name">bob</td>`,
				`<td class="fleet-cost">12.76 USD</td>`, "2026-11: 2026-11-01 00:00 to 2026-12-01 00:00 (UTC)",
				"<td>" + string(mode) + ": ", "H100-SXM5-80GB/3g.40gb 0.429", "GPU-hours cost (USD)", "Energy cost (USD)",
				"Split by MIG slices kWh", "<svg ",
			} {
				if !strings.Contains(out, s) {
					t.Errorf("no %q", s)
				}
			}
			for _, n := range r.Notes {
				if !strings.Contains(out, `<li class="note">`+html.EscapeString(n)+"</li>") {
					t.Errorf("no note %q", n)
				}
			}
			if strings.Contains(out, cbRnD) || strings.Contains(out, cbCarol) || strings.Contains(out, "<ml>") {
				t.Error("a name not escaped")
			}

			// One bar per (day, department) of r.Days, and the costliest day
			// reaches the top of the plot.
			bars := cbBar.FindAllStringSubmatch(out, -1)
			if len(bars) != len(r.Days) {
				t.Fatalf("%d bars, want %d", len(bars), len(r.Days))
			}
			heights := map[string]decimal.Decimal{}
			for i, b := range bars {
				dc := r.Days[i]
				series := cmp.Or(dc.Department, "Idle capacity")
				if b[3] != html.EscapeString(series) || b[4] != dc.Day.Format(time.DateOnly) {
					t.Errorf("bar %d is %s %s, want %s %s", i, b[3], b[4], series, dc.Day.Format(time.DateOnly))
				}
				if !strings.HasSuffix(b[5], ": "+dc.Cost.StringFixed(2)+" USD") {
					t.Errorf("bar %d title %q, want its cost %s", i, b[5], dc.Cost.StringFixed(2))
				}
				heights[b[4]] = heights[b[4]].Add(decimal.RequireFromString(b[2]))
			}
			tallest := decimal.Zero
			for _, h := range heights {
				tallest = decimal.Max(tallest, h)
			}
			// The y axis: grid lines and labels at 0 and equal 1-2-5 steps up
			// to the first at or above the costliest day, bars in
			// proportion to it.
			var ticks []decimal.Decimal
			for _, m := range cbTick.FindAllStringSubmatch(out, -1) {
				ticks = append(ticks, decimal.RequireFromString(m[1]))
			}
			costliest := decimal.Zero
			perDay := map[string]decimal.Decimal{}
			for _, dc := range r.Days {
				k := dc.Day.Format(time.DateOnly)
				perDay[k] = perDay[k].Add(dc.Cost)
				costliest = decimal.Max(costliest, perDay[k])
			}
			if len(ticks) < 3 || !ticks[0].IsZero() || ticks[len(ticks)-1].LessThan(costliest) ||
				ticks[len(ticks)-2].GreaterThanOrEqual(costliest) {
				t.Fatalf("ticks %v for a costliest day of %s", ticks, costliest)
			}
			for i := 2; i < len(ticks); i++ {
				if !ticks[i].Sub(ticks[i-1]).Equal(ticks[1]) {
					t.Errorf("ticks %v: unequal steps", ticks)
				}
			}
			high := costliest.Div(ticks[len(ticks)-1]).Mul(decimal.NewFromInt(220))
			if d := tallest.Sub(high).Abs(); d.GreaterThan(decimal.RequireFromString("0.05")) {
				t.Errorf("tallest day %s high, want %s of the plot's 220", tallest, high)
			}
			// The axis is every day of November, labelled every other day.
			var labels []string
			for _, m := range cbDayLabel.FindAllStringSubmatch(out, -1) {
				labels = append(labels, m[1])
			}
			if len(labels) != 15 || labels[0] != "11-01" || labels[14] != "11-29" {
				t.Errorf("day labels %v, want 11-01, 11-03 … 11-29", labels)
			}
			var legend []string
			for _, m := range cbLegend.FindAllStringSubmatch(out, -1) {
				legend = append(legend, m[1])
			}
			wantLegend := "R&amp;D &lt;ml&gt;|physics"
			if mode == chargeback.IdleOwnRow {
				wantLegend += "|Idle capacity"
			}
			if got := strings.Join(legend, "|"); got != wantLegend {
				t.Errorf("legend %s, want %s", got, wantLegend)
			}
			if mode == chargeback.IdleOwnRow {
				golden(t, "chargeback-own_row.html", buf.Bytes())
			}
		})
	}
	r := chargebackReport(t, chargeback.IdleByUse)
	for _, n := range []int{0, 1000} {
		if err := reports.WriteChargebackHTML(&failingWriter{n: n}, r); !errors.Is(err, errFull) {
			t.Errorf("failing after %d bytes: error %v", n, err)
		}
	}
}

// cbIdleRow is the idle row in pdftotext's layout: its name, then figures.
var cbIdleRow = regexp.MustCompile(`(?m)^\s*Idle capacity\s+\d`)

func TestWriteChargebackPDF(t *testing.T) {
	for _, mode := range cbModes {
		t.Run(string(mode), func(t *testing.T) {
			r := chargebackReport(t, mode)
			var buf, again bytes.Buffer
			if err := reports.WriteChargebackPDF(&buf, r); err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(buf.Bytes(), []byte("%PDF-")) {
				t.Fatalf("not a PDF: %q", buf.Bytes()[:min(20, buf.Len())])
			}
			if err := reports.WriteChargebackPDF(&again, r); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), again.Bytes()) {
				t.Error("two renderings of one report differ")
			}
			if !bytes.Contains(buf.Bytes(), []byte("/CreationDate (D:20261201000000")) {
				t.Error("creation date is not the period's end")
			}
			text := pdfText(t, buf.Bytes())
			for _, s := range []string{
				"Chargeback 2026-11", "Fleet total", "12.76 USD", cbRnD, cbCarol, "physics", "alice", "bob",
				"Subtotal physics", "Subtotal " + cbRnD, "Cost per department per day", "Energy and carbon",
				"2026-11-01 00:00 to 2026-12-01 00:00 (UTC)", string(mode) + ": ", "11-01", "11-03", "11-29", "Page 1/",
			} {
				if !strings.Contains(text, s) {
					t.Errorf("no %q in\n%s", s, text)
				}
			}
			for _, n := range r.Notes {
				// Notes wrap; their first words are on one line.
				if first := strings.Join(strings.Fields(n)[:4], " "); !strings.Contains(text, first) {
					t.Errorf("no note %q", first)
				}
			}
			if !strings.Contains(text, r.Fleet.Cost.StringFixed(2)) {
				t.Errorf("no fleet cost %s", r.Fleet.Cost.StringFixed(2))
			}
			if shown := cbIdleRow.MatchString(text); shown != (mode == chargeback.IdleOwnRow) {
				t.Errorf("idle row shown: %v, in mode %s", shown, mode)
			}
		})
	}
	if err := reports.WriteChargebackPDF(&failingWriter{n: 100}, chargebackReport(t, chargeback.IdleByUse)); !errors.Is(err, errFull) {
		t.Errorf("failing writer: error %v", err)
	}
}

// A large fleet breaks the PDF's table over pages: every tenant once, the
// table header on every page, the fleet total last; the chart has a bar
// per (day, department) of a month and the SVG too.
func TestWriteChargebackPDFBreaksPages(t *testing.T) {
	var rows []chargeback.Row
	for d := 0; d < 12; d++ {
		for tn := 0; tn < 6; tn++ {
			for day := 1; day <= 30; day++ {
				rows = append(rows, chargeback.Row{Department: fmt.Sprintf("dept-%02d", d), Tenant: fmt.Sprintf("tenant-%02d-%d", d, tn),
					SKU: cbA100, Hour: cbHour(day, 0), GPUMicroseconds: cbGPUHour,
					Cost: cbCosts("gpu_hours", fmt.Sprintf("%d.%02d", 1+d, tn+day))})
			}
		}
	}
	r, err := chargeback.Allocate(chargeback.Input{Period: cbPeriod, Currency: cbUSD, Rows: rows, Idle: chargeback.IdleByUse})
	if err != nil {
		t.Fatal(err)
	}
	pages := pdfPages(t, func(w io.Writer) error { return reports.WriteChargebackPDF(w, r) }, 3)
	text := strings.Join(pages, "\f")
	for d := 0; d < 12; d++ {
		for tn := 0; tn < 6; tn++ {
			name := fmt.Sprintf("tenant-%02d-%d", d, tn)
			if n := strings.Count(text, name); n != 2 { // the cost table and the energy table
				t.Errorf("%s printed %d times, want 2", name, n)
			}
		}
	}
	for i, p := range pages {
		if !strings.Contains(p, fmt.Sprintf("Page %d/%d", i+1, len(pages))) {
			t.Errorf("page %d: no page number:\n%s", i+1, p)
		}
	}
	if !strings.Contains(pages[1], "Department / tenant") {
		t.Errorf("page 2 does not repeat the table header:\n%s", pages[1])
	}
	if !strings.Contains(text, "Fleet total") || !strings.Contains(text, r.Fleet.Cost.StringFixed(2)) {
		t.Errorf("no fleet total %s", r.Fleet.Cost.StringFixed(2))
	}
	var page bytes.Buffer
	if err := reports.WriteChargebackHTML(&page, r); err != nil {
		t.Fatal(err)
	}
	if n := len(cbBar.FindAllString(page.String(), -1)); n != 12*30 || len(r.Days) != 12*30 {
		t.Errorf("%d bars for %d days, want 360", n, len(r.Days))
	}
}

// The renderers print the report's minor units as they are: no places for
// JPY, and a report whose amounts are not whole minor units is refused,
// not rounded, with nothing written.
func TestChargebackRenderersPrintTheReportsMinorUnits(t *testing.T) {
	in := chargebackInput(chargeback.IdleByUse)
	in.Currency = pricing.Currency{Code: "JPY", MinorUnits: 0, Rounding: pricing.HalfEven}
	for i := range in.Rows {
		for m, c := range in.Rows[i].Cost {
			in.Rows[i].Cost[m] = c.Mul(decimal.NewFromInt(150))
		}
	}
	jpy, err := chargeback.Allocate(in)
	if err != nil {
		t.Fatal(err)
	}
	bad := chargebackReport(t, chargeback.IdleByUse)
	bad.Departments[1].Tenants[0].Costs[0].Cost = decimal.RequireFromString("1.005")

	renderers := map[string]func(*bytes.Buffer, chargeback.Report) error{
		"csv":  func(b *bytes.Buffer, r chargeback.Report) error { return reports.WriteChargebackCSV(b, r) },
		"html": func(b *bytes.Buffer, r chargeback.Report) error { return reports.WriteChargebackHTML(b, r) },
		"pdf": func(b *bytes.Buffer, r chargeback.Report) error {
			var pdf bytes.Buffer
			if err := reports.WriteChargebackPDF(&pdf, r); err != nil {
				b.Write(pdf.Bytes())
				return err
			}
			b.WriteString(pdfText(t, pdf.Bytes()))
			return nil
		},
	}
	for name, render := range renderers {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := render(&buf, jpy); err != nil {
				t.Fatal(err)
			}
			want := jpy.Fleet.Cost.StringFixed(0)
			if out := buf.String(); !strings.Contains(out, want) || strings.Contains(out, want+".") {
				t.Errorf("want the fleet cost %s without places:\n%s", want, out)
			}
			buf.Reset()
			if err := render(&buf, bad); err == nil || !strings.Contains(err.Error(), "not whole USD minor units") || buf.Len() != 0 {
				t.Errorf("a cost of 1.005 USD: error %v, wrote %d bytes", err, buf.Len())
			}
		})
	}
}

// A report of an empty period renders: no rows, no chart.
func TestChargebackRenderersEmptyReport(t *testing.T) {
	r, err := chargeback.Allocate(chargeback.Input{Period: cbPeriod, Currency: cbUSD, Idle: chargeback.IdleOwnRow})
	if err != nil {
		t.Fatal(err)
	}
	var c, h, p bytes.Buffer
	if err := reports.WriteChargebackCSV(&c, r); err != nil {
		t.Fatal(err)
	}
	if rows, err := csv.NewReader(&c).ReadAll(); err != nil || len(rows) != 2 || rows[1][1] != "fleet" {
		t.Errorf("csv %v, %v: want a header and the fleet row", rows, err)
	}
	if err := reports.WriteChargebackHTML(&h, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.String(), "No usage in this period.") || strings.Contains(h.String(), "<svg") {
		t.Error("empty report: want no chart")
	}
	if err := reports.WriteChargebackPDF(&p, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(pdfText(t, p.Bytes()), "No usage in this period.") {
		t.Error("empty pdf: no 'No usage'")
	}
}

// The chart's y axis steps by 1, 2 or 5 times a power of ten, from 0 to
// the first step at or above the highest value.
func TestNiceTicks(t *testing.T) {
	for _, tc := range []struct{ max, want string }{
		{"0", "0 1"},
		{"797", "0 200 400 600 800"},
		{"800", "0 200 400 600 800"},
		{"1000", "0 200 400 600 800 1000"},
		{"12.76", "0 5 10 15"},
		{"3.2", "0 1 2 3 4"},
		{"0.37", "0 0.1 0.2 0.3 0.4"},
		{"0.0042", "0 0.001 0.002 0.003 0.004 0.005"},
		{"55000", "0 20000 40000 60000"},
	} {
		var got []string
		for _, d := range reports.NiceTicks(decimal.RequireFromString(tc.max)) {
			got = append(got, d.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("ticks up to %s: %s, want %s", tc.max, strings.Join(got, " "), tc.want)
		}
	}
}
