// Package importer reads usage samples from CSV and JSON Lines files: the
// backfill path for usage from other systems and for replays.
//
// The columns (CSV header names, JSON keys) are documented in
// docs/import.md. Quantities are read as exact decimals in human units
// (seconds, joules) and converted to the integer units of collectors.Sample;
// no float touches them.
package importer

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/migprofile"
)

// Format is an input file format.
type Format string

const (
	FormatCSV   Format = "csv"
	FormatJSONL Format = "jsonl"
)

// FormatFromName guesses the format from a file name.
func FormatFromName(name string) (Format, error) {
	switch {
	case strings.HasSuffix(name, ".csv"):
		return FormatCSV, nil
	case strings.HasSuffix(name, ".jsonl"), strings.HasSuffix(name, ".ndjson"):
		return FormatJSONL, nil
	}
	return "", fmt.Errorf("cannot tell the format of %q: name it .csv, .jsonl or .ndjson, or pass --format", name)
}

// Problem is one bad field on one line.
type Problem struct {
	Line  int // 1-based line of the file (CSV: the header is line 1)
	Field string
	Msg   string
}

func (p Problem) String() string {
	if p.Field == "" {
		return fmt.Sprintf("line %d: %s", p.Line, p.Msg)
	}
	return fmt.Sprintf("line %d: %s: %s", p.Line, p.Field, p.Msg)
}

// ValidationError lists the problems found in a file (up to MaxProblems).
type ValidationError struct {
	Problems  []Problem
	Truncated bool // more problems than were kept
}

// MaxProblems bounds what one ValidationError keeps.
const MaxProblems = 50

func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d invalid field(s)", len(e.Problems))
	if e.Truncated {
		b.WriteString(" (more not shown)")
	}
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// column is one known input column and how it lands in a Sample.
type column struct {
	name string
	set  func(s *collectors.Sample, v string) error
}

var errNegative = errors.New("negative quantity")

func columns() []column {
	str := func(f func(*collectors.Sample) *string) func(*collectors.Sample, string) error {
		return func(s *collectors.Sample, v string) error { *f(s) = v; return nil }
	}
	fixed := func(scale int, f func(*collectors.Sample) *uint64) func(*collectors.Sample, string) error {
		return func(s *collectors.Sample, v string) error {
			n, err := parseFixed(v, scale)
			if err != nil {
				return err
			}
			*f(s) = n
			return nil
		}
	}
	tm := func(f func(*collectors.Sample) *time.Time) func(*collectors.Sample, string) error {
		return func(s *collectors.Sample, v string) error {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return fmt.Errorf("bad timestamp %q: want RFC 3339, e.g. 2026-11-01T10:00:00Z", v)
			}
			if !collectors.InStorableRange(t) {
				return fmt.Errorf("timestamp %q out of range: 1970-01-01 to 2106-02-07", v)
			}
			*f(s) = t.UTC()
			return nil
		}
	}
	return []column{
		{"sample_id", func(s *collectors.Sample, v string) error {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil || n == 0 {
				return fmt.Errorf("bad sample_id %q: want a positive 64-bit integer, or leave it out", v)
			}
			s.ID = n
			return nil
		}},
		{"host", str(func(s *collectors.Sample) *string { return &s.Host })},
		{"gpu_uuid", str(func(s *collectors.Sample) *string { return &s.GPUUUID })},
		{"gpu_model", str(func(s *collectors.Sample) *string { return &s.GPUModel })},
		{"mig_uuid", str(func(s *collectors.Sample) *string { return &s.MIGUUID })},
		{"mig_profile", str(func(s *collectors.Sample) *string { return &s.MIGProfile })},
		{"sku", str(func(s *collectors.Sample) *string { return &s.SKU })},
		{"tenant", str(func(s *collectors.Sample) *string { return &s.Tenant })},
		{"department", str(func(s *collectors.Sample) *string { return &s.Department })},
		{"workload", str(func(s *collectors.Sample) *string { return &s.Workload })},
		{"start", tm(func(s *collectors.Sample) *time.Time { return &s.Start })},
		{"end", tm(func(s *collectors.Sample) *time.Time { return &s.End })},
		{"gpu_seconds", fixed(6, func(s *collectors.Sample) *uint64 { return &s.GPUMicroseconds })},
		{"sm_active_seconds", fixed(6, func(s *collectors.Sample) *uint64 { return &s.SMActiveMicroseconds })},
		{"mem_mib_seconds", fixed(0, func(s *collectors.Sample) *uint64 { return &s.MemMiBSeconds })},
		{"mem_peak_bytes", fixed(0, func(s *collectors.Sample) *uint64 { return &s.MemPeakBytes })},
		{"energy_joules", fixed(3, func(s *collectors.Sample) *uint64 { return &s.EnergyMillijoules })},
		{"pcie_tx_bytes", fixed(0, func(s *collectors.Sample) *uint64 { return &s.PCIeTxBytes })},
		{"pcie_rx_bytes", fixed(0, func(s *collectors.Sample) *uint64 { return &s.PCIeRxBytes })},
		{"nvlink_tx_bytes", fixed(0, func(s *collectors.Sample) *uint64 { return &s.NVLinkTxBytes })},
		{"nvlink_rx_bytes", fixed(0, func(s *collectors.Sample) *uint64 { return &s.NVLinkRxBytes })},
		{"unmeasured", func(s *collectors.Sample, v string) error {
			u, err := collectors.ParseUnmeasured(v)
			if err != nil {
				return err
			}
			s.Unmeasured = u
			return nil
		}},
	}
}

// required columns; the rest default to empty or zero.
var required = []string{"host", "gpu_uuid", "gpu_model", "start", "end", "gpu_seconds"}

// parseFixed reads a non-negative decimal with at most scale fractional
// digits as an integer count of 10^-scale units, exactly.
func parseFixed(v string, scale int) (uint64, error) {
	if v == "" {
		return 0, nil
	}
	if strings.HasPrefix(v, "-") {
		return 0, fmt.Errorf("%w %s", errNegative, v)
	}
	intPart, frac, hasDot := strings.Cut(v, ".")
	if hasDot && len(frac) > scale {
		// Trailing zeros beyond the unit are harmless.
		trimmed := strings.TrimRight(frac[scale:], "0")
		if trimmed != "" {
			if scale == 0 {
				return 0, fmt.Errorf("bad quantity %q: want a whole number", v)
			}
			return 0, fmt.Errorf("bad quantity %q: at most %d decimal places", v, scale)
		}
		frac = frac[:scale]
	}
	if intPart == "" || !allDigits(intPart) || !allDigits(frac) {
		return 0, fmt.Errorf("bad quantity %q: want a non-negative decimal number", v)
	}
	digits := intPart + frac + strings.Repeat("0", scale-len(frac))
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad quantity %q: too large", v)
	}
	return n, nil
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// finish checks cross-field rules and fills derived fields.
func finish(s *collectors.Sample, line int, add func(Problem)) {
	if s.SKU == "" && s.GPUModel != "" {
		s.SKU = migprofile.SKU(s.GPUModel, s.MIGProfile)
	}
	if (s.MIGUUID == "") != (s.MIGProfile == "") {
		add(Problem{line, "mig_profile", "mig_uuid and mig_profile go together"})
	}
	if !s.Start.IsZero() && !s.End.IsZero() {
		if !s.End.After(s.Start) {
			add(Problem{line, "end", "end before or equal to start"})
		} else if span := uint64(s.End.Sub(s.Start) / time.Microsecond); s.GPUMicroseconds > span {
			add(Problem{line, "gpu_seconds", "more than the interval: a consumer holds at most the whole GPU"})
		}
	}
	if s.SMActiveMicroseconds > s.GPUMicroseconds {
		add(Problem{line, "sm_active_seconds", "more than gpu_seconds"})
	}
	if s.Tenant == "" {
		// An empty tenant marks idle capacity: nothing ran on it.
		if s.Workload != "" {
			add(Problem{line, "tenant", "missing on a row with a workload (only idle rows have no tenant)"})
		} else if s.SMActiveMicroseconds > 0 {
			add(Problem{line, "tenant", "missing on a row with SM activity (only idle rows have no tenant)"})
		}
	}
	if s.ID == 0 && s.Host != "" && !s.Start.IsZero() {
		dev := s.GPUUUID
		if s.MIGUUID != "" {
			dev = s.MIGUUID
		}
		s.ID = collectors.SampleID(s.Host, dev, s.Tenant, s.Workload, s.Start)
	}
}

// Read parses every row of r, calling emit for each valid sample in order,
// and returns a *ValidationError listing the problems found. emit is still
// called for the valid rows of a file with bad rows, so callers that must
// store nothing on error validate the whole file first (see Import).
func Read(r io.Reader, format Format, emit func(collectors.Sample) error) error {
	return readLines(r, format, func(_ int, s collectors.Sample) error { return emit(s) })
}

// readLines is Read with the line number of each sample.
func readLines(r io.Reader, format Format, emit func(line int, s collectors.Sample) error) error {
	switch format {
	case FormatCSV:
		return readCSV(r, emit)
	case FormatJSONL:
		return readJSONL(r, emit)
	}
	return fmt.Errorf("unknown format %q (want csv or jsonl)", format)
}

type problems struct{ ValidationError }

func (p *problems) add(pr Problem) {
	if len(p.Problems) >= MaxProblems {
		p.Truncated = true
		return
	}
	p.Problems = append(p.Problems, pr)
}

func (p *problems) err() error {
	if len(p.Problems) == 0 {
		return nil
	}
	e := p.ValidationError
	return &e
}

func readCSV(r io.Reader, emit func(int, collectors.Sample) error) error {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return &ValidationError{Problems: []Problem{{1, "", "empty file: want a header line"}}}
	}
	if err != nil {
		return &ValidationError{Problems: []Problem{{1, "", err.Error()}}}
	}
	known := map[string]column{}
	for _, c := range columns() {
		known[c.name] = c
	}
	var ps problems
	cols := make([]column, len(header))
	seen := map[string]bool{}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		c, ok := known[h]
		if !ok {
			ps.add(Problem{1, h, "unknown column"})
		}
		if seen[h] {
			ps.add(Problem{1, h, "column twice"})
		}
		seen[h] = true
		cols[i] = c
	}
	for _, name := range required {
		if !seen[name] {
			ps.add(Problem{1, name, "required column missing"})
		}
	}
	if err := ps.err(); err != nil {
		return err
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				ps.add(Problem{pe.Line, "", pe.Err.Error()})
				if errors.Is(pe.Err, csv.ErrFieldCount) {
					continue
				}
			} else {
				ps.add(Problem{0, "", err.Error()})
			}
			// A quoting error leaves the reader out of step: stop here.
			return ps.err()
		}
		// FieldPos is only valid for a record Read returned without error.
		line, _ := cr.FieldPos(0)
		var s collectors.Sample
		before := len(ps.Problems)
		for i, v := range rec {
			if err := cols[i].set(&s, strings.TrimSpace(v)); err != nil {
				ps.add(Problem{line, cols[i].name, err.Error()})
			}
		}
		requireFields(&s, line, ps.add)
		finish(&s, line, ps.add)
		if len(ps.Problems) == before && !ps.Truncated {
			if err := emit(line, s); err != nil {
				return err
			}
		}
	}
	return ps.err()
}

func requireFields(s *collectors.Sample, line int, add func(Problem)) {
	for _, f := range []struct {
		name  string
		empty bool
	}{{"host", s.Host == ""}, {"gpu_uuid", s.GPUUUID == ""}, {"gpu_model", s.GPUModel == ""},
		{"start", s.Start.IsZero()}, {"end", s.End.IsZero()}} {
		if f.empty {
			add(Problem{line, f.name, "required"})
		}
	}
}

func readJSONL(r io.Reader, emit func(int, collectors.Sample) error) error {
	known := map[string]column{}
	for _, c := range columns() {
		known[c.name] = c
	}
	var ps problems
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	line := 0
	for sc.Scan() {
		line++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			ps.add(Problem{line, "", "not a JSON object: " + err.Error()})
			continue
		}
		var s collectors.Sample
		before := len(ps.Problems)
		for key, val := range obj {
			c, ok := known[key]
			if !ok {
				ps.add(Problem{line, key, "unknown column"})
				continue
			}
			v, err := jsonScalar(val)
			if err != nil {
				ps.add(Problem{line, key, err.Error()})
				continue
			}
			if err := c.set(&s, v); err != nil {
				ps.add(Problem{line, key, err.Error()})
			}
		}
		requireFields(&s, line, ps.add)
		if _, ok := obj["gpu_seconds"]; !ok {
			ps.add(Problem{line, "gpu_seconds", "required"})
		}
		finish(&s, line, ps.add)
		if len(ps.Problems) == before && !ps.Truncated {
			if err := emit(line, s); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		ps.add(Problem{line + 1, "", err.Error()})
	}
	return ps.err()
}

// jsonScalar turns a JSON string or number into its text; numbers keep
// their exact digits (no float conversion).
func jsonScalar(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return strings.TrimSpace(s), nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", errors.New("want a string or a number")
	}
	s := n.String()
	if strings.ContainsAny(s, "eE") {
		return "", fmt.Errorf("bad quantity %s: write it without an exponent", s)
	}
	return s, nil
}
