package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestQuoteRejectsBookWeightThatDisagreesWithTable(t *testing.T) {
	data, err := os.ReadFile("../../pricing/books/gpu-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const good = "H100-SXM5-80GB/3g.40gb:\n    weight: 3/7"
	if !strings.Contains(string(data), good) {
		t.Fatalf("example book lost its H100 3g SKU with weight 3/7")
	}
	book := filepath.Join(t.TempDir(), "book.yaml")
	wrong := strings.Replace(string(data), good, "H100-SXM5-80GB/3g.40gb:\n    weight: 2/7", 1)
	if err := os.WriteFile(book, []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := gpumeter(t, "quote", "--book", book, "--quantity", "H100-SXM5-80GB:gpu_hours=10")
	if code != 2 || !strings.Contains(stderr, "weight") {
		t.Fatalf("exit %d, stderr %q: want 2 naming the weight", code, stderr)
	}
	code, out, stderr := gpumeter(t, "quote", "--book", "../../pricing/books/gpu-cloud.yaml", "--quantity", "H100-SXM5-80GB:gpu_hours=10")
	if code != 0 || out == "" {
		t.Fatalf("good book: exit %d, %q %q", code, out, stderr)
	}
}

// A MIG SKU the book spells otherwise than usage does would price nothing
// and take a guessed weight: refused, naming the entry.
func TestQuoteRejectsANonCanonicalMIGSKU(t *testing.T) {
	data, err := os.ReadFile("../../pricing/books/gpu-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"H100-SXM5-80GB/3G.40GB", "H100-SXM5-80GB/9g.99gb"} {
		book := filepath.Join(t.TempDir(), "book.yaml")
		if err := os.WriteFile(book, []byte(strings.Replace(string(data), "H100-SXM5-80GB/3g.40gb:", bad+":", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := gpumeter(t, "quote", "--book", book, "--quantity", "H100-SXM5-80GB:gpu_hours=10")
		if code != 2 || !strings.Contains(stderr, bad) {
			t.Errorf("%s: exit %d, stderr %q: want 2 naming the SKU", bad, code, stderr)
		}
	}
}

// usage --json rows and quote --usage input share one shape: the one can
// be handed to the other.
func TestUsageJSONPricesWithQuote(t *testing.T) {
	dsn := testDSN(t)
	dir := t.TempDir()
	samples := filepath.Join(dir, "s.csv")
	if err := os.WriteFile(samples, []byte("host,gpu_uuid,gpu_model,tenant,workload,start,end,gpu_seconds,energy_joules\n"+
		"h,G,H100-SXM5-80GB,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:30:00Z,1800,360000\n"+
		"h,G,H100-SXM5-80GB,acme,j,2026-11-01T11:00:00Z,2026-11-01T11:30:00Z,900,1000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := gpumeter(t, "import", "--quiet", "--clickhouse", dsn, samples); code != 0 {
		t.Fatalf("import: %d %s %s", code, out, stderr)
	}
	code, usage, stderr := gpumeter(t, "usage", "--clickhouse", dsn, "--from", "2026-11-01", "--to", "2026-11-02", "--bucket", "hour", "--by", "sku", "--json")
	if code != 0 {
		t.Fatalf("usage: %d %s", code, stderr)
	}
	usageFile := filepath.Join(dir, "usage.json")
	if err := os.WriteFile(usageFile, []byte(usage), 0o600); err != nil {
		t.Fatal(err)
	}
	code, fromUsage, stderr := gpumeter(t, "quote", "--book", "../../pricing/books/gpu-cloud.yaml", "--usage", usageFile, "--json")
	if code != 0 {
		t.Fatalf("quote --usage usage.json: %d %s\n%s", code, stderr, usage)
	}
	// The same usage written as hourly rows by hand prices the same.
	hourly := filepath.Join(dir, "hourly.csv")
	if err := os.WriteFile(hourly, []byte("hour,sku,meter,quantity\n"+
		"2026-11-01T10:00:00Z,H100-SXM5-80GB,gpu_hours,0.5\n2026-11-01T10:00:00Z,H100-SXM5-80GB,energy_kwh,0.1\n"+
		"2026-11-01T11:00:00Z,H100-SXM5-80GB,gpu_hours,0.25\n2026-11-01T11:00:00Z,H100-SXM5-80GB,energy_kwh,0.000277777777777778\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, byHand, stderr := gpumeter(t, "quote", "--book", "../../pricing/books/gpu-cloud.yaml", "--usage", hourly, "--json")
	if code != 0 || fromUsage != byHand {
		t.Fatalf("quote of usage --json differs from the same rows by hand (exit %d, %s):\n%s\n%s", code, stderr, fromUsage, byHand)
	}
}
