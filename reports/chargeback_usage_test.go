package reports_test

import (
	"bytes"
	"compress/zlib"
	"io"
	"math"
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

// The PDF draws the HTML's utilization bar in each measured row's cell: a
// grey track and a blue part whose length is the utilization's share of
// it (an empty one at 0 %), and nothing for a row nothing was measured
// for. Read from the PDF's own drawing operators.
func TestChargebackPDFUtilizationBars(t *testing.T) {
	r, err := chargeback.Allocate(chargebackInput(chargeback.IdleOwnRow))
	if err != nil {
		t.Fatal(err)
	}
	r.Efficiency = []chargeback.EfficiencyRow{
		{Department: "physics", HeldGPUMicros: 16, MeasuredGPUMicros: 12, UnmeasuredGPUMicros: 4, SMActiveMicros: 3},
		{Department: "physics", Tenant: "alice", HeldGPUMicros: 4, MeasuredGPUMicros: 4, SMActiveMicros: 3},
		{Department: "physics", Tenant: "blind", HeldGPUMicros: 4, UnmeasuredGPUMicros: 4},
		{Department: "physics", Tenant: "bob", HeldGPUMicros: 8, MeasuredGPUMicros: 8},
		{Department: "chemistry", HeldGPUMicros: 4, MeasuredGPUMicros: 4, SMActiveMicros: 4},
	}
	want := []float64{0.25, 0.75, 0, 1} // blind has none
	var pdf bytes.Buffer
	if err := reports.WriteChargebackPDF(&pdf, r); err != nil {
		t.Fatal(err)
	}
	tracks, bars := pdfUtilBars(t, pdf.Bytes())
	if len(tracks) != len(want) || len(bars) != len(want) {
		t.Fatalf("%d tracks and %d bars, want %d of each (none for the unmeasured row)", len(tracks), len(bars), len(want))
	}
	for i, b := range bars {
		tr := tracks[i]
		// fpdf writes points to two places: allow a hundredth.
		if math.Abs(b.x-tr.x) > 0.01 || math.Abs(b.y-tr.y) > 0.01 || math.Abs(b.h-tr.h) > 0.01 || tr.w < 20 {
			t.Errorf("bar %d %+v does not start in its track %+v", i, b, tr)
		}
		if got := b.w / tr.w; math.Abs(got-want[i]) > 0.02/tr.w {
			t.Errorf("bar %d is %.4f of its track, want %.2f", i, got, want[i])
		}
		if i > 0 && b.y >= bars[i-1].y { // PDF y grows upwards: each row lower
			t.Errorf("bar %d at y %.2f is not below the one before (%.2f)", i, b.y, bars[i-1].y)
		}
	}
	if text := pdfText(t, pdf.Bytes()); !strings.Contains(text, "25.0 %") || !strings.Contains(text, "75.0 %") {
		t.Errorf("the utilization figures are gone beside the bars:\n%s", text)
	}
}

type pdfRect struct{ x, y, w, h float64 }

// pdfUtilBars inflates the PDF's content streams and returns the
// utilization tracks and bars drawn, in order: a rect filled in the
// track's grey (#e6e6e6, "0.902 g" as fpdf writes it) directly followed by
// one filled in the bar's blue (#1f77b4, "0.122 0.467 0.706 rg"). The
// cost chart's first department shares that blue, hence the pairing.
func pdfUtilBars(t *testing.T, pdf []byte) (tracks, bars []pdfRect) {
	t.Helper()
	stream := regexp.MustCompile(`(?s)stream\r?\n(.*?)\r?\nendstream`)
	rect := `(-?[\d.]+) (-?[\d.]+) (-?[\d.]+) (-?[\d.]+) re f`
	pair := regexp.MustCompile(`0\.902 g\n` + rect + `\n0\.122 0\.467 0\.706 rg\n` + rect + `\n`)
	grey := regexp.MustCompile(`0\.902 g\n` + rect)
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	greys := 0
	for _, m := range stream.FindAllSubmatch(pdf, -1) {
		zr, err := zlib.NewReader(bytes.NewReader(m[1]))
		if err != nil {
			continue // not a deflated stream
		}
		content, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("inflate a content stream: %v", err)
		}
		greys += len(grey.FindAll(content, -1))
		for _, p := range pair.FindAllStringSubmatch(string(content), -1) {
			tracks = append(tracks, pdfRect{num(p[1]), num(p[2]), num(p[3]), num(p[4])})
			bars = append(bars, pdfRect{num(p[5]), num(p[6]), num(p[7]), num(p[8])})
		}
	}
	if greys != len(tracks) {
		t.Fatalf("%d grey rects, %d of them tracks followed by a bar", greys, len(tracks))
	}
	return tracks, bars
}
