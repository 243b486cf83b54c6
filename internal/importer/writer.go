package importer

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/gpumeter/gpumeter/collectors"
)

// Writer writes samples in the format Read reads, from the same column
// table: every column, quantities as exact decimals in the file's units. A
// file it writes imports back to the same samples (and ids).
type Writer struct {
	format Format
	cols   []column
	csv    *csv.Writer
	buf    *bufio.Writer
	rec    []string
	wrote  bool
}

// NewWriter writes samples to w in format. Call Flush when done.
func NewWriter(w io.Writer, format Format) (*Writer, error) {
	out := &Writer{format: format, cols: columns()}
	switch format {
	case FormatCSV:
		out.csv = csv.NewWriter(w)
	case FormatJSONL:
		out.buf = bufio.NewWriter(w)
	default:
		return nil, fmt.Errorf("unknown format %q (want csv or jsonl)", format)
	}
	out.rec = make([]string, len(out.cols))
	return out, nil
}

// Columns lists the column names in the order the writer writes them.
func (w *Writer) Columns() []string {
	names := make([]string, len(w.cols))
	for i, c := range w.cols {
		names[i] = c.name
	}
	return names
}

// Write writes samples.
func (w *Writer) Write(samples []collectors.Sample) error {
	if w.csv != nil && !w.wrote {
		if err := w.csv.Write(w.Columns()); err != nil {
			return fmt.Errorf("write csv header: %w", err)
		}
	}
	w.wrote = true
	for i := range samples {
		s := &samples[i]
		for j, c := range w.cols {
			w.rec[j] = c.get(s)
		}
		if w.csv != nil {
			if err := w.csv.Write(w.rec); err != nil {
				return fmt.Errorf("write csv: %w", err)
			}
			continue
		}
		if err := w.writeJSON(); err != nil {
			return fmt.Errorf("write jsonl: %w", err)
		}
	}
	return nil
}

// writeJSON writes one object: strings quoted, quantities as JSON numbers
// with their exact digits (the reader takes either).
func (w *Writer) writeJSON() error {
	var b strings.Builder
	b.WriteByte('{')
	for j, c := range w.cols {
		if j > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + c.name + `":`)
		if c.number {
			b.WriteString(w.rec[j])
			continue
		}
		q, err := json.Marshal(w.rec[j])
		if err != nil {
			return err
		}
		b.Write(q)
	}
	b.WriteString("}\n")
	_, err := w.buf.WriteString(b.String())
	return err
}

// Flush writes out what is buffered and reports a write error.
func (w *Writer) Flush() error {
	if w.csv != nil {
		if !w.wrote {
			// An empty file still names its columns.
			if err := w.csv.Write(w.Columns()); err != nil {
				return fmt.Errorf("write csv header: %w", err)
			}
			w.wrote = true
		}
		w.csv.Flush()
		return w.csv.Error()
	}
	return w.buf.Flush()
}
