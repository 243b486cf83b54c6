// Package output prints what a listing command lists, in the format its
// -o flag asks for: an aligned table (table; wide adds the columns marked
// wide), CSV, JSON or YAML. Every command prints through it, so all share
// one table style: upper-case headers, text left-aligned and numbers
// right-aligned, times in RFC 3339 with their zone, decimals fixed per
// unit (the caller formats numbers with Decimal, from the meter table's
// places where a quantity is a meter).
package output

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"
	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// Format is an output format.
type Format string

const (
	Table Format = "table"
	Wide  Format = "wide"
	JSON  Format = "json"
	YAML  Format = "yaml"
	CSV   Format = "csv"
)

// Formats lists every format, for help text.
func Formats() []Format { return []Format{Table, Wide, JSON, YAML, CSV} }

// Parse reads a format name; anything else is a validation error.
func Parse(s string) (Format, error) {
	for _, f := range Formats() {
		if string(f) == s {
			return f, nil
		}
	}
	names := make([]string, 0, len(Formats()))
	for _, f := range Formats() {
		names = append(names, string(f))
	}
	return "", fault.Validationf("output %q: want %s", s, strings.Join(names, ", "))
}

// Column is one column of a listing.
type Column struct {
	Name   string // header; printed upper-case in tables
	Number bool   // right-aligned in tables
	Wide   bool   // only in wide tables (CSV has every column)
}

// Listing is what a command lists: the rows of its table (cells already
// formatted) and the items JSON and YAML print (a slice of the command's
// own values, or any value that marshals to JSON).
type Listing struct {
	Columns []Column
	Rows    [][]string
	Items   any
}

// Write prints l in format f.
func Write(w io.Writer, f Format, l Listing) error {
	switch f {
	case JSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(l.Items)
	case YAML:
		return writeYAML(w, l.Items)
	case CSV:
		return writeCSV(w, l)
	case Table, Wide, "":
		return writeTable(w, l, f == Wide)
	}
	return fault.Validationf("output %q: unknown format", f)
}

func writeTable(w io.Writer, l Listing, wide bool) error {
	var cols []int
	for i, c := range l.Columns {
		if wide || !c.Wide {
			cols = append(cols, i)
		}
	}
	width := make([]int, len(l.Columns))
	for _, i := range cols {
		width[i] = utf8.RuneCountInString(l.Columns[i].Name)
	}
	for _, r := range l.Rows {
		for _, i := range cols {
			if i < len(r) {
				width[i] = max(width[i], utf8.RuneCountInString(r[i]))
			}
		}
	}
	var b strings.Builder
	line := func(cell func(i int) string) {
		var l2 strings.Builder
		for n, i := range cols {
			if n > 0 {
				l2.WriteString("  ")
			}
			v := cell(i)
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(v))
			if l.Columns[i].Number {
				l2.WriteString(pad + v)
			} else {
				l2.WriteString(v + pad)
			}
		}
		b.WriteString(strings.TrimRight(l2.String(), " ") + "\n") // no trailing blanks
	}
	line(func(i int) string { return strings.ToUpper(l.Columns[i].Name) })
	for _, r := range l.Rows {
		line(func(i int) string {
			if i < len(r) {
				return r[i]
			}
			return ""
		})
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeCSV(w io.Writer, l Listing) error {
	cw := csv.NewWriter(w)
	head := make([]string, len(l.Columns))
	for i, c := range l.Columns {
		head[i] = strings.ToLower(strings.ReplaceAll(c.Name, " ", "_"))
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	for _, r := range l.Rows {
		if err := cw.Write(r); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeYAML prints items as YAML with the keys JSON has, in the same
// order: the JSON text is read as YAML (which it is) into nodes, whose
// flow and quoting styles are dropped so they print as blocks.
func writeYAML(w io.Writer, items any) error {
	j, err := json.Marshal(items)
	if err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal(j, &n); err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	plain(&n)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	_, err = w.Write(b.Bytes())
	return err
}

func plain(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plain(c)
	}
}

// Time is t in RFC 3339 in its own zone; "" for the zero time.
func Time(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339)
}

// Decimal is d rounded to places and printed with exactly that many
// decimals, so a column of one unit lines up.
func Decimal(d decimal.Decimal, places int32) string { return d.StringFixed(places) }
