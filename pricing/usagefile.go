package pricing

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// RowOrigin is where a usage row came from: line N of a CSV file
// (Where "line"), element N of a JSON array (Where "row", from 0), or,
// with N < 0, a value the caller names in Where (the CLI names its flag
// and value there; pricing never names a flag itself).
type RowOrigin struct {
	Where string
	N     int
}

// ParseUsageFile reads hourly usage rows from the contents of a usage
// file: JSON (ParseUsageJSON) when name ends in .json or the text starts
// with '[', else CSV (ParseUsageCSV). name is only looked at, never
// opened; "-" (standard input) is as good as any other.
func ParseUsageFile(name string, data []byte) ([]Usage, []RowOrigin, error) {
	if strings.EqualFold(filepath.Ext(name), ".json") || bytes.HasPrefix(bytes.TrimSpace(data), []byte("[")) {
		return ParseUsageJSON(data)
	}
	return ParseUsageCSV(data)
}

// hourlyRow is one object of a JSON usage file: an hourly row
// {"hour","sku","meter","quantity"}, or a UsageRecord; both share "sku".
type hourlyRow struct {
	record   UsageRecord
	hour     string
	meter    string
	quantity json.RawMessage // a number or a string, read as decimal text
	isRow    bool
}

func (r *hourlyRow) UnmarshalJSON(b []byte) error {
	fields, err := r.record.decode(b, map[string]bool{"hour": true, "meter": true, "quantity": true})
	if err != nil {
		return err
	}
	for k, p := range map[string]*string{"hour": &r.hour, "meter": &r.meter} {
		if v, ok := fields[k]; ok {
			r.isRow = true
			if err := json.Unmarshal(v, p); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	}
	if v, ok := fields["quantity"]; ok {
		r.isRow, r.quantity = true, v
	}
	return nil
}

// hourly turns one object into hourly rows: itself, or one per non-zero
// meter of a usage record.
func (r hourlyRow) hourly() ([]Usage, error) {
	if r.isRow {
		// A JSON number or a string holding one; the text is parsed as a
		// decimal, never through a float.
		var q string
		if err := json.Unmarshal(r.quantity, &q); err != nil {
			q = string(r.quantity)
		}
		row, err := parseUsageRow(r.hour, r.record.SKU, r.meter, q)
		return []Usage{row}, err
	}
	if r.record.Bucket == nil || r.record.SKU == "" {
		return nil, errors.New("a usage row needs an hour bucket and a sku: give usage records bucketed by hour and grouped by sku")
	}
	var out []Usage
	for i, m := range Meters() {
		q := r.record.Quantities[i]
		if q == "" || q == "0" {
			continue
		}
		row, err := parseUsageRow(r.record.Bucket.UTC().Format(time.RFC3339), r.record.SKU, string(m), q)
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, nil
}

// ParseUsageJSON reads an array whose objects are hourly rows
// {"hour", "sku", "meter", "quantity"} (quantity a number or a string,
// read as decimal text) or UsageRecords, the rows of `gpumeter usage
// --json --bucket hour --by sku` (each non-zero meter becomes an hourly
// row; rows of several hosts or workloads in one hour and SKU add up in
// the engine). Unknown keys are refused. Each row's origin is its array
// index; every bad object is reported, each problem once.
func ParseUsageJSON(data []byte) ([]Usage, []RowOrigin, error) {
	var raw []hourlyRow
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, nil, fault.Validationf("want a JSON array of {\"hour\", \"sku\", \"meter\", \"quantity\"}, or of usage records: %w", err)
	}
	rows := make([]Usage, 0, len(raw))
	origins := make([]RowOrigin, 0, len(raw))
	var ps RowProblems
	for i, r := range raw {
		hourly, err := r.hourly()
		if err != nil {
			ps.Add(RowOrigin{"row", i}, err.Error())
			continue
		}
		for _, row := range hourly {
			rows = append(rows, row)
			origins = append(origins, RowOrigin{"row", i})
		}
	}
	if err := ps.Err(); err != nil {
		return nil, nil, err
	}
	return rows, origins, nil
}

// ParseUsageCSV reads hourly rows from CSV with a header naming hour, sku,
// meter and quantity in any order (case and spaces aside; other columns are
// ignored). Each row's origin is its line; every bad row is reported, each
// problem once.
func ParseUsageCSV(data []byte) ([]Usage, []RowOrigin, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1 // checked per row below, with the row's line
	header, err := r.Read()
	if err != nil {
		return nil, nil, fault.Validationf("read CSV header: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.ToLower(strings.TrimSpace(h))] = i
	}
	for _, want := range []string{"hour", "sku", "meter", "quantity"} {
		if _, ok := col[want]; !ok {
			return nil, nil, fault.Validationf("CSV header lacks %q (want hour,sku,meter,quantity)", want)
		}
	}
	var rows []Usage
	var origins []RowOrigin
	var ps RowProblems
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// The reader cannot be trusted past broken quoting.
			ps.AddOther(fmt.Sprintf("read CSV: %v", err))
			break
		}
		line, _ := r.FieldPos(0)
		if len(rec) != len(header) {
			ps.Add(RowOrigin{"line", line}, fmt.Sprintf("%d fields, the header has %d", len(rec), len(header)))
			continue
		}
		row, err := parseUsageRow(rec[col["hour"]], rec[col["sku"]], rec[col["meter"]], rec[col["quantity"]])
		if err != nil {
			ps.Add(RowOrigin{"line", line}, err.Error())
			continue
		}
		rows = append(rows, row)
		origins = append(origins, RowOrigin{"line", line})
	}
	if err := ps.Err(); err != nil {
		return nil, nil, err
	}
	return rows, origins, nil
}

// parseUsageRow reads one hourly row from its texts. Whether the hour is
// whole, inside the period and the SKU known is the engine's to check
// (Input.Validate), against the period and book.
func parseUsageRow(hour, sku, meter, quantity string) (Usage, error) {
	h, err := ParseTime(hour)
	if err != nil {
		return Usage{}, fmt.Errorf("hour: %w", err)
	}
	m, err := ParseMeter(strings.TrimSpace(meter))
	if err != nil {
		return Usage{}, err
	}
	q, err := ParseQuantity(quantity)
	if err != nil {
		return Usage{}, fmt.Errorf("quantity: %w", err)
	}
	return Usage{Hour: h, SKU: strings.TrimSpace(sku), Meter: m, Quantity: q}, nil
}

// The most different problems one error lists, and the places it names
// for one problem before "and N more".
const (
	maxRowProblems = 10
	shownPlaces    = 3
)

// RowProblems collects what is wrong with usage rows so that a problem
// found on many rows is reported once, with where it is:
// `lines 3, 4, 5 and 17 more: unknown meter "gpu_hourz" (...)`. At most
// ten different problems are listed, then "and N more problems". The zero
// value is empty and ready to use.
type RowProblems struct {
	keys   []rowProblemKey
	places map[rowProblemKey]*placeList
	other  []string // problems of no one row
	more   int      // problems past maxRowProblems different ones
}

type rowProblemKey struct{ where, msg string }

type placeList struct {
	first []int // the first shownPlaces+1 row numbers
	n     int   // rows with the problem
}

// Add records msg as a problem of the row at o.
func (ps *RowProblems) Add(o RowOrigin, msg string) {
	k := rowProblemKey{o.Where, msg}
	pl, ok := ps.places[k]
	if !ok {
		if len(ps.keys)+len(ps.other) >= maxRowProblems {
			ps.more++
			return
		}
		if ps.places == nil {
			ps.places = map[rowProblemKey]*placeList{}
		}
		pl = &placeList{}
		ps.places[k] = pl
		ps.keys = append(ps.keys, k)
	}
	pl.n++
	if len(pl.first) <= shownPlaces {
		pl.first = append(pl.first, o.N)
	}
}

// AddOther records a problem of no one row.
func (ps *RowProblems) AddOther(msg string) {
	if len(ps.keys)+len(ps.other) >= maxRowProblems {
		ps.more++
		return
	}
	ps.other = append(ps.other, msg)
}

// AddMore counts n problems that are not listed, such as those an error
// already summed up as "and n more problems".
func (ps *RowProblems) AddMore(n int) { ps.more += n }

// Err returns the problems as one error, or nil when none was added.
func (ps *RowProblems) Err() error {
	if len(ps.keys)+len(ps.other)+ps.more == 0 {
		return nil
	}
	var parts []string
	for _, k := range ps.keys {
		parts = append(parts, ps.places[k].describe(k.where)+": "+k.msg)
	}
	parts = append(parts, ps.other...)
	if ps.more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more problems", ps.more))
	}
	return fault.Validation(errors.New(strings.Join(parts, "; ")))
}

// describe names the places: "line 3", "lines 3 and 4", "lines 3, 4, 5
// and 17 more", or a flag once however many rows it made.
func (pl *placeList) describe(where string) string {
	if pl.first[0] < 0 {
		return where
	}
	num := func(ns []int) string {
		s := make([]string, len(ns))
		for i, n := range ns {
			s[i] = strconv.Itoa(n)
		}
		return strings.Join(s, ", ")
	}
	switch {
	case pl.n == 1:
		return fmt.Sprintf("%s %d", where, pl.first[0])
	case pl.n <= shownPlaces+1:
		return fmt.Sprintf("%ss %s and %d", where, num(pl.first[:pl.n-1]), pl.first[pl.n-1])
	default:
		return fmt.Sprintf("%ss %s and %d more", where, num(pl.first[:shownPlaces]), pl.n-shownPlaces)
	}
}

// ExplainRows rewrites the problems an input's ValidationError (from
// Price) has with usage rows, usage[N].field, as problems of the places
// the rows came from, origins[N], each problem once with its places
// (RowProblems); problems of no row are kept as they are. rows is false,
// and err is returned unchanged, when err is no input error or names no
// row.
func ExplainRows(err error, origins []RowOrigin) (_ error, rows bool) {
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.What != "input" {
		return err, false
	}
	var ps RowProblems
	for _, p := range ve.Listed() {
		if i, field, ok := usageRowPath(p.Path); ok && i < len(origins) {
			msg := p.Message
			if field != "" {
				msg = field + ": " + msg
			}
			ps.Add(origins[i], msg)
			rows = true
			continue
		}
		ps.AddOther(p.String())
	}
	ps.AddMore(ve.Dropped)
	if !rows {
		return err, false
	}
	return ps.Err(), true
}

// usageRowPath splits a path such as usage[12].sku into 12 and "sku".
func usageRowPath(p string) (int, string, bool) {
	rest, ok := strings.CutPrefix(p, "usage[")
	if !ok {
		return 0, "", false
	}
	num, field, ok := strings.Cut(rest, "]")
	if !ok {
		return 0, "", false
	}
	i, err := strconv.Atoi(num)
	if err != nil || i < 0 {
		return 0, "", false
	}
	return i, strings.TrimPrefix(field, "."), true
}
