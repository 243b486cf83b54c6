package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/image/font/gofont/goregular"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// PDFs are drawn in the config's reports.pdf_font. A tenant the font
// cannot show fails the render, naming the tenant and the font (the
// configured file when there is one) and writing nothing; a month the font
// covers renders; a file that is no font is a config error (exit 2) before
// anything is read.
func TestPDFCommandsUseReportsPDFFont(t *testing.T) {
	dsn := testDSN(t)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("internal.yaml", []byte(chargebackCLIBook))
	font := write("go.ttf", goregular.TTF)
	write("bad.ttf", []byte("this is a note, not a TrueType font"))
	book := "chargeback:\n  book: internal.yaml\n"
	plain := write("plain.yaml", []byte(book))
	withFont := write("font.yaml", []byte(book+"reports:\n  pdf_font: go.ttf\n"))
	badFont := write("bad.yaml", []byte(book+"reports:\n  pdf_font: bad.ttf\n"))

	// September: names the Go fonts show; October: a Japanese tenant.
	var samples []collectors.Sample
	for _, s := range []struct {
		tenant, dept string
		month        time.Month
	}{{"Ωmega-Łódź", "Физика", time.September}, {"東京ラボ", "research", time.October}} {
		x := collectors.Sample{Host: "h", GPUUUID: "GPU-0", GPUModel: "A100-SXM4-80GB", SKU: "A100-SXM4-80GB",
			Tenant: s.tenant, Department: s.dept, Workload: "w", Start: time.Date(2026, s.month, 1, 0, 0, 0, 0, time.UTC),
			Values: meter.Values{GPUMicroseconds: 3_600_000_000}}
		x.End = x.Start.Add(time.Hour)
		x.ID = collectors.SampleID(x.Host, x.GPUUUID, x.Tenant, x.Workload, x.Start)
		samples = append(samples, x)
	}
	if err := harness.OpenStore(t, dsn).InsertSamples(context.Background(), samples); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := gpumeter(t, "--clickhouse", dsn, "rollup", "--scheduled"); code != 0 {
		t.Fatalf("rollup: %s", stderr)
	}

	chargeback := func(cfg, period string) (int, string, string) {
		return gpumeter(t, "--clickhouse", dsn, "--config", cfg, "chargeback", "--period", period, "--format", "pdf")
	}
	for _, cfg := range []string{plain, withFont} {
		if code, out, stderr := chargeback(cfg, "2026-09"); code != 0 || !strings.HasPrefix(out, "%PDF-") {
			t.Errorf("%s, 2026-09: exit %d: %s", filepath.Base(cfg), code, stderr)
		}
	}
	for cfg, fontName := range map[string]string{plain: "Go (embedded)", withFont: font} {
		code, out, stderr := chargeback(cfg, "2026-10")
		if code != 1 || out != "" || !strings.Contains(stderr, "東京ラボ") || !strings.Contains(stderr, "font "+fontName+" has no glyph") ||
			!strings.Contains(stderr, "reports.pdf_font") {
			t.Errorf("%s, 2026-10: exit %d, %d bytes out: %s", filepath.Base(cfg), code, len(out), stderr)
		}
	}
	for name, args := range map[string][]string{
		"chargeback":     {"chargeback", "--period", "2026-09", "--format", "pdf"},
		"invoice render": {"invoice", "render", "GM-000001", "--format", "pdf", "--out", filepath.Join(dir, "x.pdf")},
	} {
		code, _, stderr := gpumeter(t, append([]string{"--clickhouse", dsn, "--config", badFont}, args...)...)
		if code != 2 || !strings.Contains(stderr, "reports.pdf_font") || !strings.Contains(stderr, "bad.ttf") {
			t.Errorf("%s with a bad font: exit %d: %s", name, code, stderr)
		}
	}
}
