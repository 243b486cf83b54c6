package reports

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/shopspring/decimal"
)

// WriteUsageJSON prints usage rows as the indented JSON array of `gpumeter
// usage --json` ("[]" for none), the input `gpumeter quote --usage` reads.
func WriteUsageJSON(w io.Writer, rows []pricing.UsageRecord) error {
	if rows == nil {
		rows = []pricing.UsageRecord{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rows)
}

// UsageTable is a usage summary to print as a table: the rows of one
// query, which of its columns it grouped by, and the total of all rows.
type UsageTable struct {
	// ByBucket adds a BUCKET column (each row's Bucket; a nil Bucket
	// prints as the zero time).
	ByBucket bool
	// ByTenant, ByDepartment, BySKU, ByHost and ByWorkload add those
	// columns, always in that order. An empty tenant is idle capacity, an
	// empty department or workload none.
	ByTenant, ByDepartment, BySKU, ByHost, ByWorkload bool
	Rows                                              []pricing.UsageRecord
	// Total is the sum of Rows, printed as a last TOTAL row when there is
	// more than one row. The caller sums exactly, in the stored integer
	// units, rather than adding the rounded decimals of Rows.
	Total pricing.UsageRecord
}

// WriteUsageTable prints the table right-aligned: the grouping columns,
// then samples and every priced meter, each to its meter table places.
func WriteUsageTable(w io.Writer, t UsageTable) error {
	ew := &errWriter{w: w}
	tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', tabwriter.AlignRight)
	var cols []string
	if t.ByBucket {
		cols = append(cols, "BUCKET")
	}
	for _, g := range t.groups(pricing.UsageRecord{}) {
		cols = append(cols, strings.ToUpper(g.name))
	}
	cols = append(cols, "SAMPLES")
	for _, m := range meter.PricedMeters {
		cols = append(cols, m.Header)
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
	for _, r := range t.Rows {
		var cells []string
		if t.ByBucket {
			var b time.Time
			if r.Bucket != nil {
				b = *r.Bucket
			}
			cells = append(cells, b.Format("2006-01-02 15:04"))
		}
		for _, g := range t.groups(r) {
			cells = append(cells, nameOr(g.value, g.blank))
		}
		cells = append(cells, meterCells(r)...)
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if len(t.Rows) > 1 {
		cells := make([]string, len(cols)-1-len(meter.PricedMeters))
		if len(cells) > 0 {
			cells[0] = "TOTAL"
		}
		fmt.Fprintln(tw, strings.Join(append(cells, meterCells(t.Total)...), "\t")+"\t")
	}
	tw.Flush()
	return ew.err
}

// meterCells are the samples and meter columns of a row.
func meterCells(r pricing.UsageRecord) []string {
	cells := []string{fmt.Sprint(r.Samples)}
	for i, m := range meter.PricedMeters {
		cells = append(cells, fixed(r.Quantities[i], m.Places))
	}
	return cells
}

// fixed rounds a record's decimal text to places for display; text that
// is no decimal (never written by usage) is shown as it is.
func fixed(s string, places int32) string {
	d, err := decimal.NewFromString(s)
	if err != nil {
		return s
	}
	return d.StringFixed(places)
}

func nameOr(s, empty string) string {
	if s == "" {
		return empty
	}
	return s
}

// group is one grouping column of a usage table and a row's value in it.
type group struct {
	name, value string
	blank       string // the table's text for an empty value
}

// groups are the grouping columns t shows, in order, with r's values (the
// zero record gives the names alone).
func (t UsageTable) groups(r pricing.UsageRecord) []group {
	var out []group
	for _, g := range []struct {
		on bool
		group
	}{
		{t.ByTenant, group{"tenant", r.Tenant, "(idle)"}}, {t.ByDepartment, group{"department", r.Department, "(none)"}},
		{t.BySKU, group{"sku", r.SKU, ""}}, {t.ByHost, group{"host", r.Host, "(none)"}}, {t.ByWorkload, group{"workload", r.Workload, "(none)"}},
	} {
		if g.on {
			out = append(out, g.group)
		}
	}
	return out
}
