package reports_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/pricing"
	"github.com/gpumeter/gpumeter/reports"
)

var march = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// quote prices testdata's usage against its book (and contract) for March,
// as gpumeter quote does.
func quote(t *testing.T, contract bool, start time.Time) pricing.Result {
	t.Helper()
	book, err := pricing.ParseBook(readTestdata(t, "quote-book.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if book, err = pricing.WithMIGTable(book); err != nil {
		t.Fatal(err)
	}
	in := pricing.Input{Book: book, Start: start, End: start.AddDate(0, 1, 0)}
	if contract {
		if in.Contract, err = pricing.ParseContract(readTestdata(t, "quote-contract.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	if in.Usage, _, err = pricing.ParseUsageCSV(readTestdata(t, "quote-usage.csv")); err != nil {
		t.Fatal(err)
	}
	r, err := pricing.Price(in)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The golden files are what gpumeter quote printed before the renderer
// moved here: the bytes must not change.
func TestWriteQuote(t *testing.T) {
	for _, tc := range []struct {
		name     string
		contract bool
		golden   string
	}{
		{"a reservation, a burst with a tier and a flat fee, unpriced usage, a true-up", true, "quote-reserved.golden"},
		{"on demand: two tiers, no tenant, no coverage table", false, "quote-on-demand.golden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := reports.WriteQuote(&buf, quote(t, tc.contract, march)); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.golden, buf.Bytes())
		})
	}
}

func TestWriteQuoteShowsTimesInThePeriodsZone(t *testing.T) {
	berlin := time.FixedZone("CET", 3600)
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, berlin)
	r := quote(t, false, start)
	var buf bytes.Buffer
	if err := reports.WriteQuote(&buf, r); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.HasPrefix(out, "tenant (none), book quote-test, USD, 2026-03-01T00:00:00+01:00 to 2026-04-01T00:00:00+01:00\n\n") {
		t.Errorf("heading:\n%s", out)
	}
	// Usage lines span the period, shown in its zone, not in UTC.
	if !strings.Contains(out, "on_demand           2026-03-01 00:00  2026-04-01 00:00") || strings.Contains(out, "2026-02-28 23:00") {
		t.Errorf("times not in the period's zone:\n%s", out)
	}
}

func TestWriteQuoteReportsAWriteError(t *testing.T) {
	r := quote(t, true, march)
	var full bytes.Buffer
	if err := reports.WriteQuote(&full, r); err != nil {
		t.Fatal(err)
	}
	// Fail in the header, in the table, in the notes at the end.
	for _, n := range []int{0, 100, full.Len() - 5} {
		if err := reports.WriteQuote(&failingWriter{n: n}, r); !errors.Is(err, errFull) {
			t.Errorf("failing after %d of %d bytes: error %v", n, full.Len(), err)
		}
	}
}
