package billing

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const cacheBook = `version: cache-test
currency:
  code: USD
  rounding: {minor_units: 2, mode: half_away_from_zero}
skus:
  H100-SXM5-80GB:
    meters:
      gpu_hours: {unit_price: "PRICE"}
`

func TestPricingCacheReadsOnceAndAgainOnChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "book.yaml")
	write := func(price string, mod time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(strings.Replace(cacheBook, "PRICE", price, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	write("2.50", t0)
	c := NewPricingCache()
	reads := 0
	c.readFile = func(p string) ([]byte, error) { reads++; return os.ReadFile(p) }
	cust := Customer{Tenant: "acme", Book: path}
	for range 3 {
		if _, _, err := c.Pricing(cust); err != nil {
			t.Fatal(err)
		}
	}
	if reads != 1 {
		t.Fatalf("%d reads for three requests of an unchanged book, want 1", reads)
	}
	write("3.00", t0.Add(time.Minute))
	b, _, err := c.Pricing(cust)
	if err != nil {
		t.Fatal(err)
	}
	if reads != 2 || !strings.Contains(b.Version(), "cache-test") {
		t.Fatalf("after an edit: %d reads, book %q", reads, b.Version())
	}
	write("not a price", t0.Add(2*time.Minute))
	if _, _, err := c.Pricing(cust); err == nil {
		t.Fatal("a broken book was served from the cache")
	}
	write("3.00", t0.Add(3*time.Minute))
	if _, _, err := c.Pricing(cust); err != nil {
		t.Fatalf("the fixed book: %v", err)
	}
}
