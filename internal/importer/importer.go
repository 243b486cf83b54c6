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
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// Format is an input file format.
type Format string

const (
	FormatCSV   Format = "csv"
	FormatJSONL Format = "jsonl"
	// FormatParsed is a File whose rows another parser made (File.Rows).
	FormatParsed Format = "parsed"
)

// FormatFromName guesses the format from a file name.
func FormatFromName(name string) (Format, error) {
	switch {
	case strings.HasSuffix(name, ".csv"):
		return FormatCSV, nil
	case strings.HasSuffix(name, ".jsonl"), strings.HasSuffix(name, ".ndjson"):
		return FormatJSONL, nil
	}
	return "", fault.Validationf("cannot tell the format of %q: name it .csv, .jsonl or .ndjson, or give its format", name)
}

// Problem is one bad field on one line of one file.
type Problem struct {
	File  string // empty when the problem came from Read
	Line  int    // 1-based line of the file (CSV: the header is line 1)
	Field string
	Msg   string
}

func prob(line int, field, msg string) Problem { return Problem{Line: line, Field: field, Msg: msg} }

func (p Problem) String() string {
	where := fmt.Sprintf("line %d", p.Line)
	if p.File != "" {
		where = fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	if p.Field == "" {
		return where + ": " + p.Msg
	}
	return where + ": " + p.Field + ": " + p.Msg
}

// ValidationError lists the problems found in a file (up to MaxProblems).
// errors.Is(err, fault.ErrValidation) holds for it.
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

// Is puts every ValidationError in the validation category.
func (e *ValidationError) Is(target error) bool { return target == fault.ErrValidation }

// InFile names path as the file of every problem that names none (a
// parser outside this package reports lines only) and returns e.
func (e *ValidationError) InFile(path string) *ValidationError {
	for i := range e.Problems {
		if e.Problems[i].File == "" {
			e.Problems[i].File = path
		}
	}
	return e
}

// column is one known input column: how it lands in a Sample and how a
// Sample's value is written back in the file's units.
type column struct {
	name   string
	set    func(s *collectors.Sample, v string) error
	get    func(s *collectors.Sample) string
	number bool // a quantity: written to JSON as a number
}

var errNegative = errors.New("negative quantity")

func columns() []column {
	str := func(name string, f func(*collectors.Sample) *string) column {
		return column{name,
			func(s *collectors.Sample, v string) error { *f(s) = v; return nil },
			func(s *collectors.Sample) string { return *f(s) }, false}
	}
	fixed := func(name string, scale int, f func(*collectors.Sample) *uint64) column {
		return column{name,
			func(s *collectors.Sample, v string) error {
				n, err := parseFixed(v, scale)
				if err != nil {
					return err
				}
				*f(s) = n
				return nil
			},
			func(s *collectors.Sample) string { return formatFixed(*f(s), scale) }, true}
	}
	tm := func(name string, f func(*collectors.Sample) *time.Time) column {
		return column{name,
			func(s *collectors.Sample, v string) error {
				t, err := time.Parse(time.RFC3339Nano, v)
				if err != nil {
					return fmt.Errorf("bad timestamp %q: want RFC 3339, e.g. 2026-11-01T10:00:00Z", v)
				}
				if t.Nanosecond() != 0 {
					// The store keeps whole seconds; a fraction would be cut
					// off, and a sub-second interval stored with start = end.
					return fmt.Errorf("timestamp %q has a fraction of a second: the store keeps whole seconds", v)
				}
				// The range is checked in finish, for parsed rows too.
				*f(s) = t.UTC()
				return nil
			},
			func(s *collectors.Sample) string { return f(s).UTC().Format(time.RFC3339) }, false}
	}
	cols := []column{
		{"sample_id", func(s *collectors.Sample, v string) error {
			if v == "" {
				return nil // derived, as when the column is absent
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil || n == 0 {
				return fmt.Errorf("bad sample_id %q: want a positive 64-bit integer, or leave it out", v)
			}
			s.ID = n
			return nil
		}, func(s *collectors.Sample) string { return strconv.FormatUint(s.ID, 10) }, false},
		str("host", func(s *collectors.Sample) *string { return &s.Host }),
		str("gpu_uuid", func(s *collectors.Sample) *string { return &s.GPUUUID }),
		str("gpu_model", func(s *collectors.Sample) *string { return &s.GPUModel }),
		str("mig_uuid", func(s *collectors.Sample) *string { return &s.MIGUUID }),
		str("mig_profile", func(s *collectors.Sample) *string { return &s.MIGProfile }),
		str("sku", func(s *collectors.Sample) *string { return &s.SKU }),
		str("tenant", func(s *collectors.Sample) *string { return &s.Tenant }),
		str("department", func(s *collectors.Sample) *string { return &s.Department }),
		str("workload", func(s *collectors.Sample) *string { return &s.Workload }),
		tm("start", func(s *collectors.Sample) *time.Time { return &s.Start }),
		tm("end", func(s *collectors.Sample) *time.Time { return &s.End }),
		{"unmeasured", func(s *collectors.Sample, v string) error {
			u, err := meter.ParseUnmeasured(v)
			if err != nil {
				return err
			}
			s.Unmeasured = u
			return nil
		}, func(s *collectors.Sample) string { return s.Unmeasured.String() }, false},
	}
	// The meters, in meter.ID order, before unmeasured.
	meters := make([]column, 0, meter.Count)
	for m, spec := range meter.Specs {
		meters = append(meters, fixed(spec.File, spec.Scale, func(s *collectors.Sample) *uint64 { return s.Ptr(meter.ID(m)) }))
	}
	return slices.Insert(cols, len(cols)-1, meters...)
}

// formatFixed writes n units of 10^-scale as a decimal, the inverse of
// parseFixed.
func formatFixed(n uint64, scale int) string {
	if scale == 0 {
		return strconv.FormatUint(n, 10)
	}
	d := strconv.FormatUint(n, 10)
	if len(d) <= scale {
		d = strings.Repeat("0", scale-len(d)+1) + d
	}
	return d[:len(d)-scale] + "." + d[len(d)-scale:]
}

// required columns; the rest default to empty or zero.
var required = []string{"host", "gpu_uuid", "gpu_model", "start", "end", "gpu_seconds"}

// parseFixed reads a non-negative decimal with at most scale fractional
// digits as an integer count of 10^-scale units, exactly.
func parseFixed(v string, scale int) (uint64, error) {
	if v == "" {
		// Not 0: an empty cell is as likely a missing measurement as no use.
		return 0, errors.New("empty: write 0, or, for a meter the source did not measure, 0 and the meter in the unmeasured column")
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

// MinTime and MaxTime bound the times an import takes: what every
// supported server's DateTime holds. The type is 32-bit seconds since
// 1970 (collectors.MinTime .. collectors.MaxTime, 2106-02-07T06:28:15Z),
// but ClickHouse 18.16's date tables end with 2105 (internal/store probes
// the server and refuses later times), and the API reads years up to 2105.
// A row past these would pass the checks of a dry run and then fail the
// import half way, so it is refused with the other bad rows.
var (
	MinTime = collectors.MinTime
	MaxTime = time.Date(2105, 12, 31, 23, 59, 59, 0, time.UTC)
)

// textFields are a sample's text columns, each checked by checkText.
func textFields(s *collectors.Sample) []struct{ name, v string } {
	return []struct{ name, v string }{{"host", s.Host}, {"gpu_uuid", s.GPUUUID}, {"gpu_model", s.GPUModel},
		{"mig_uuid", s.MIGUUID}, {"mig_profile", s.MIGProfile}, {"sku", s.SKU}, {"tenant", s.Tenant},
		{"department", s.Department}, {"workload", s.Workload}}
}

// checkText refuses text that is not valid UTF-8 or holds a control
// character (C0, DEL, C1): such a tenant or department would be stored as
// given, turn up in invoices, the API and terminals, and never match the
// name a key or config gives.
func checkText(v string) error {
	if !utf8.ValidString(v) {
		return errors.New("not valid UTF-8")
	}
	for i, r := range v {
		if unicode.IsControl(r) {
			return fmt.Errorf("control character %U at byte %d", r, i)
		}
	}
	return nil
}

// printable is a name from the file as an error may show it: quoted, with
// escapes, when it is not plain text.
func printable(name string) string {
	if checkText(name) != nil {
		return strconv.Quote(name)
	}
	return name
}

// finish checks cross-field rules and the physical limits of one row, and
// fills derived fields: the SKU and the sample id.
func finish(s *collectors.Sample, line int, add func(Problem)) {
	for _, f := range textFields(s) {
		if err := checkText(f.v); err != nil {
			add(prob(line, f.name, err.Error()))
		}
	}
	for _, f := range []struct {
		name string
		t    time.Time
	}{{"start", s.Start}, {"end", s.End}} {
		if !f.t.IsZero() && (f.t.Before(MinTime) || f.t.After(MaxTime)) {
			add(prob(line, f.name, fmt.Sprintf("%s is outside %s .. %s, the times every supported ClickHouse server stores",
				f.t.UTC().Format(time.RFC3339), MinTime.Format(time.RFC3339), MaxTime.Format(time.RFC3339))))
		}
	}
	if s.SKU == "" && s.GPUModel != "" {
		s.SKU = gpucatalog.SKU(s.GPUModel, s.MIGProfile)
	}
	if (s.MIGUUID == "") != (s.MIGProfile == "") {
		add(prob(line, "mig_profile", "mig_uuid and mig_profile go together"))
	}
	slices := 0
	if s.MIGProfile != "" {
		if m, known := gpucatalog.LookupModel(s.GPUModel); known {
			i, ok := m.ProfileIndex(s.MIGProfile)
			if !ok {
				add(prob(line, "mig_profile", fmt.Sprintf("%s has no MIG profile %q (it has %s)", s.GPUModel, s.MIGProfile, strings.Join(m.ProfileNames(), ", "))))
			} else {
				slices = m.Profiles[i].ComputeSlices
			}
		}
	}
	if !s.Start.IsZero() && !s.End.IsZero() {
		span := s.End.Sub(s.Start)
		switch {
		case span <= 0:
			add(prob(line, "end", "end before or equal to start"))
		case span > MaxInterval:
			add(prob(line, "end", fmt.Sprintf("interval of %s is longer than %d days: split it into shorter rows", span, MaxInterval/(24*time.Hour))))
		default:
			checkRates(s, span, slices, line, add)
		}
	}
	if s.SMActiveMicroseconds > s.GPUMicroseconds {
		add(prob(line, "sm_active_seconds", "more than gpu_seconds"))
	}
	if s.MemPeakBytes > meter.MaxMemoryBytes {
		add(prob(line, "mem_peak_bytes", fmt.Sprintf("more than any GPU's memory (%d bytes)", uint64(meter.MaxMemoryBytes))))
	}
	if s.Tenant == "" {
		// An empty tenant marks idle capacity: nothing ran on it.
		if s.Workload != "" {
			add(prob(line, "tenant", "missing on a row with a workload (only idle rows have no tenant)"))
		} else if s.SMActiveMicroseconds > 0 {
			add(prob(line, "tenant", "missing on a row with SM activity (only idle rows have no tenant)"))
		}
	}
	if s.Host != "" && s.GPUUUID != "" && !s.Start.IsZero() {
		// The id is always the row's hash, as the collector makes it: a
		// given id that disagrees would let one sample count under several
		// tenants or starts (rows collapse by tenant, start and id).
		dev := s.GPUUUID
		if s.MIGUUID != "" {
			dev = s.MIGUUID
		}
		id := collectors.SampleID(s.Host, dev, s.Tenant, s.Workload, s.Start)
		if s.ID != 0 && s.ID != id {
			add(prob(line, "sample_id", fmt.Sprintf("%d is not this row's id: host, device, tenant, workload and start give %d (leave the column out to derive it)", s.ID, id)))
		}
		s.ID = id
	}
}

// checkRates bounds each quantity of one row by what one GPU (or its MIG
// instance) can do in the row's interval.
func checkRates(s *collectors.Sample, span time.Duration, slices, line int, add func(Problem)) {
	if slices > 0 {
		if limit := maxInstanceMicros(span, slices); s.GPUMicroseconds > limit {
			add(prob(line, "gpu_seconds", fmt.Sprintf("more than the interval × %d/%d (%s), the share of the GPU a %s instance holds",
				slices, gpucatalog.ComputeSlices, fixed6(limit), s.MIGProfile)))
		}
	} else if uint64(span/time.Microsecond) < s.GPUMicroseconds {
		add(prob(line, "gpu_seconds", "more than the interval: a consumer holds at most the whole GPU"))
	}
	seconds := uint64(span / time.Second)
	for m, q := range s.Array() {
		if spec := meter.Specs[m]; meter.ID(m) != meter.GPU && spec.MaxPerSecond > 0 && !fitsRate(q, spec.MaxPerSecond, seconds) {
			add(prob(line, spec.File, fmt.Sprintf("more than one GPU can do in %s (at most %s a second): a wrapped or corrupt counter?", span, spec.MaxRateText())))
		}
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
	return fault.Validationf("unknown format %q (want csv or jsonl)", format)
}

type problems struct{ ValidationError }

func (p *problems) add(pr Problem) {
	if len(p.Problems) >= MaxProblems {
		p.Truncated = true
		return
	}
	p.Problems = append(p.Problems, pr)
}

// merge takes the problems of one file's read into p; any other error is
// returned, naming the file.
func (p *problems) merge(path string, err error) error {
	var ve *ValidationError
	if !errors.As(err, &ve) {
		if err != nil {
			return fmt.Errorf("import %s: %w", path, err)
		}
		return nil
	}
	for _, pr := range ve.Problems {
		pr.File = path
		p.add(pr)
	}
	p.Truncated = p.Truncated || ve.Truncated
	return nil
}

func (p *problems) err() error {
	if len(p.Problems) == 0 {
		return nil
	}
	e := p.ValidationError
	return &e
}

// MaxLineBytes caps one JSON Lines line and one CSV record, so that a
// corrupt file cannot make a reader hold a huge field in memory.
const MaxLineBytes = 4 << 20

var errRecordTooLong = fmt.Errorf("record longer than %d MiB", MaxLineBytes>>20)

// recordLimit fails a read once more than MaxLineBytes, plus what the CSV
// reader buffers ahead (4 KiB), have come in since the last complete record.
type recordLimit struct {
	r     io.Reader
	since int
	lines int // newlines seen, for the line of the failure
}

func (l *recordLimit) Read(p []byte) (int, error) {
	if l.since > MaxLineBytes+4<<10 {
		return 0, errRecordTooLong
	}
	n, err := l.r.Read(p)
	l.since += n
	l.lines += bytes.Count(p[:n], []byte{'\n'})
	return n, err
}

func readCSV(r io.Reader, emit func(int, collectors.Sample) error) error {
	lim := &recordLimit{r: r}
	cr := csv.NewReader(lim)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil // an empty file holds no rows, as an empty .jsonl
	}
	if err != nil {
		return &ValidationError{Problems: []Problem{prob(1, "", csvError(err))}}
	}
	lim.since = 0
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
			ps.add(prob(1, printable(h), "unknown column"))
		}
		if seen[h] {
			ps.add(prob(1, printable(h), "column twice"))
		}
		seen[h] = true
		cols[i] = c
	}
	for _, name := range required {
		if !seen[name] {
			ps.add(prob(1, name, "required column missing"))
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
		lim.since = 0
		if errors.Is(err, errRecordTooLong) {
			ps.add(prob(lim.lines+1, "", csvError(err)))
			return ps.err()
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				ps.add(prob(pe.Line, "", pe.Err.Error()))
				if errors.Is(pe.Err, csv.ErrFieldCount) {
					continue
				}
			} else {
				ps.add(prob(0, "", err.Error()))
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
				ps.add(prob(line, cols[i].name, err.Error()))
			}
		}
		requireFields(&s, line, &ps, before)
		finish(&s, line, ps.add)
		if len(ps.Problems) == before && !ps.Truncated {
			if err := emit(line, s); err != nil {
				return err
			}
		}
	}
	return ps.err()
}

func csvError(err error) string {
	if errors.Is(err, errRecordTooLong) {
		return err.Error() + " (the cap of a JSON Lines line too): a corrupt file?"
	}
	return err.Error()
}

// requireFields reports required fields left empty, except those whose
// value was already refused (reported since problem index before).
func requireFields(s *collectors.Sample, line int, ps *problems, before int) {
	for _, f := range []struct {
		name  string
		empty bool
	}{{"host", s.Host == ""}, {"gpu_uuid", s.GPUUUID == ""}, {"gpu_model", s.GPUModel == ""},
		{"start", s.Start.IsZero()}, {"end", s.End.IsZero()}} {
		if f.empty && !slices.ContainsFunc(ps.Problems[before:], func(p Problem) bool { return p.Field == f.name }) {
			ps.add(prob(line, f.name, "required"))
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
	sc.Buffer(make([]byte, 64*1024), MaxLineBytes)
	line := 0
	for sc.Scan() {
		line++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		fields, err := jsonObject(raw)
		if err != nil {
			var dup duplicateKeyError
			if errors.As(err, &dup) {
				ps.add(prob(line, printable(string(dup)), "given twice in one object"))
			} else {
				ps.add(prob(line, "", err.Error()))
			}
			continue
		}
		var s collectors.Sample
		before := len(ps.Problems)
		hasGPUSeconds := false
		for _, f := range fields {
			c, ok := known[f.key]
			if !ok {
				ps.add(prob(line, printable(f.key), "unknown column"))
				continue
			}
			hasGPUSeconds = hasGPUSeconds || f.key == "gpu_seconds"
			v, err := jsonScalar(f.val)
			if err != nil {
				ps.add(prob(line, f.key, err.Error()))
				continue
			}
			if err := c.set(&s, v); err != nil {
				ps.add(prob(line, f.key, err.Error()))
			}
		}
		requireFields(&s, line, &ps, before)
		if !hasGPUSeconds {
			ps.add(prob(line, "gpu_seconds", "required"))
		}
		finish(&s, line, ps.add)
		if len(ps.Problems) == before && !ps.Truncated {
			if err := emit(line, s); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		msg := err.Error()
		if errors.Is(err, bufio.ErrTooLong) {
			msg = fmt.Sprintf("line longer than %d MiB: a corrupt file?", MaxLineBytes>>20)
		}
		ps.add(prob(line+1, "", msg))
	}
	return ps.err()
}

type duplicateKeyError string

func (e duplicateKeyError) Error() string { return fmt.Sprintf("key %q given twice", string(e)) }

type jsonField struct {
	key string
	val json.RawMessage
}

// jsonObject splits one JSON object into its fields in order, refusing a
// key given twice (encoding/json would silently keep the last).
func jsonObject(raw []byte) ([]jsonField, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var out []jsonField
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not a JSON object: %v", err)
		}
		key, ok := t.(string)
		if !ok {
			return nil, errors.New("not a JSON object: want a key")
		}
		if seen[key] {
			return nil, duplicateKeyError(key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("not a JSON object: %s: %v", key, err)
		}
		out = append(out, jsonField{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("not a JSON object: more after the closing brace")
	}
	return out, nil
}

// jsonScalar turns a JSON string or number into its text; numbers keep
// their exact digits (no float conversion).
func jsonScalar(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if !utf8.Valid(raw) {
		// encoding/json would quietly make each bad byte U+FFFD.
		return "", errors.New("not valid UTF-8")
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

// Files names the files at paths for an import: each in format or, when
// format is "", in the format its name says (FormatFromName). Every path
// must exist.
func Files(format Format, paths []string) ([]File, error) {
	var files []File
	for _, p := range paths {
		f := format
		if f == "" {
			var err error
			if f, err = FormatFromName(p); err != nil {
				return nil, err
			}
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fault.Validation(err)
		}
		files = append(files, File{Path: p, Format: f})
	}
	return files, nil
}
