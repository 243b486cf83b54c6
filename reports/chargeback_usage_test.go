package reports_test

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/chargeback"
	"github.com/gpumeter/gpumeter/reports"
)

// With UsageDays (chargeback --efficiency), the HTML and PDF show held vs
// used GPU-hours per day: per day an SM-active bar, the rest of what
// tenants held on it and idle capacity on top, heights in proportion.
func TestChargebackHeldVsUsedChart(t *testing.T) {
	in := chargebackInput(chargeback.IdleOwnRow)
	r, err := chargeback.Allocate(in)
	if err != nil {
		t.Fatal(err)
	}
	var plain bytes.Buffer
	if err := reports.WriteChargebackHTML(&plain, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "Held vs used per day") {
		t.Fatal("the chart is drawn without UsageDays")
	}
	r.Efficiency = []chargeback.EfficiencyRow{
		{Department: "physics", HeldGPUMicros: 4, MeasuredGPUMicros: 4, SMActiveMicros: 1},
		{Department: "physics", Tenant: "blind", HeldGPUMicros: 4, UnmeasuredGPUMicros: 4},
	}
	r.UsageDays = chargeback.DailyUsage(in.Rows)
	if len(r.UsageDays) != 2 {
		t.Fatalf("fixture: %d usage days, want its two", len(r.UsageDays))
	}
	var html bytes.Buffer
	if err := reports.WriteChargebackHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	page := html.String()
	i := strings.Index(page, "Held vs used per day")
	if i < 0 {
		t.Fatalf("no held-vs-used chart:\n%s", page)
	}
	// Utilization per row as a bar: 25 % long for physics, none for the
	// tenant nothing was measured for.
	if n := strings.Count(page, `class="util-bar"`); n != 1 || !strings.Contains(page, `<rect class="util-bar" width="25.0"`) {
		t.Errorf("%d utilization bars, want one of width 25.0", n)
	}
	chart := page[i:]
	bar := regexp.MustCompile(`<rect class="bar" x="[^"]+" y="([^"]+)" width="[^"]+" height="([^"]+)" fill="[^"]+" data-series="([^"]+)" data-day="([^"]+)">`)
	heights := map[string]map[string]float64{} // day → series → height
	for _, m := range bar.FindAllStringSubmatch(chart, -1) {
		h, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		if heights[m[4]] == nil {
			heights[m[4]] = map[string]float64{}
		}
		heights[m[4]][m[3]] = h
	}
	t.Logf("bar heights by day and series: %v", heights)
	if len(heights) != 2 {
		t.Fatalf("bars on %d days, want 2: %v", len(heights), heights)
	}
	// Heights in proportion to the GPU-hours: compare each day's ratios.
	for _, d := range r.UsageDays {
		day := d.Day.Format("2006-01-02")
		got := heights[day]
		used := float64(min(d.SMActiveMicroseconds, d.HeldGPUMicroseconds))
		rest := float64(d.HeldGPUMicroseconds) - used
		idle := float64(d.IdleGPUMicroseconds)
		if used > 0 && rest > 0 {
			if want, ratio := rest/used, got["Held, SM not active or not measured"]/got["SM-active"]; ratio < want*0.99 || ratio > want*1.01 {
				t.Errorf("%s: held-rest/used bar ratio %.3f, want %.3f (%v)", day, ratio, want, got)
			}
		}
		if idle > 0 && used > 0 {
			if want, ratio := idle/used, got["Idle capacity"]/got["SM-active"]; ratio < want*0.99 || ratio > want*1.01 {
				t.Errorf("%s: idle/used bar ratio %.3f, want %.3f (%v)", day, ratio, want, got)
			}
		}
	}
	var pdf bytes.Buffer
	if err := reports.WriteChargebackPDF(&pdf, r); err != nil {
		t.Fatal(err)
	}
	if text := pdfText(t, pdf.Bytes()); !strings.Contains(text, "Held vs used per day") || !strings.Contains(text, "SM-active") {
		t.Errorf("PDF lacks the held-vs-used chart:\n%s", text)
	}
}
