// Package sacct turns Slurm accounting records (`sacct --parsable2`
// output) into usage samples: the backfill for sites and periods without
// collectors (docs/slurm.md). Parse reads the text (pure: the time zone
// is an argument); Samples maps GRES types to SKUs and accounts to
// tenants and cuts each job's GPUs into hourly samples, which
// internal/importer then checks and stores idempotently like any import.
package sacct

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/importer"
)

// Job is one line of sacct output: a job allocation, or a step of one.
type Job struct {
	Line      int
	Cluster   string
	JobID     string // as sacct prints it: "123", "123_4" (array task), "123+1" (het), "123.batch" (step)
	JobIDRaw  string // the numeric id ("4105", a step's "4105.batch"); empty when the column is absent
	Account   string
	User      string
	Partition string
	State     string // first word: "COMPLETED", "CANCELLED", …
	NodeList  string
	Start     time.Time // zero when sacct says Unknown or None
	End       time.Time // zero while the job runs
	Elapsed   time.Duration
	// GPUs allocated (AllocTRES), by GRES type in type order; Type ""
	// holds the GPUs counted without a type (gres/gpu beyond the typed
	// counts).
	GPUs []GRES
	// RequestedGPUs is ReqTRES's gres/gpu count; -1 without the column.
	RequestedGPUs int
}

// GRES is a count of GPUs of one type.
type GRES struct {
	Type  string
	Count int
}

// IsStep reports whether the line is a job step ("123.batch", "123.0")
// rather than the job's allocation, which holds its AllocTRES.
func (j Job) IsStep() bool { return strings.Contains(j.JobID, ".") }

// GPUCount is the number of GPUs allocated.
func (j Job) GPUCount() int {
	n := 0
	for _, g := range j.GPUs {
		n += g.Count
	}
	return n
}

// Columns Parse needs; Cluster is required unless the caller names the
// cluster (Options.Cluster).
var requiredColumns = []string{"JobID", "Account", "Start", "End", "AllocTRES"}

// Options tune Parse.
type Options struct {
	// Location is the zone of times printed without an offset (sacct
	// prints the local time of where it ran); nil refuses such times,
	// since guessing the zone would shift every job.
	Location *time.Location
	// Cluster names the cluster when the output has no Cluster column.
	Cluster string
}

// MaxLineBytes bounds one line.
const MaxLineBytes = 1 << 20

// Parse reads `sacct --parsable2` output: a header line naming the
// columns (any order; columns it does not use are ignored), then one
// job or step per line, fields separated by '|'. Every problem is
// reported, as an *importer.ValidationError naming line and column;
// lines with problems yield no Job.
func Parse(r io.Reader, opts Options) ([]Job, error) {
	loc := opts.Location
	var ps problems
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), MaxLineBytes)
	line := 0
	var col map[string]int
	var header []string
	var jobs []Job
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" {
			continue
		}
		if col == nil {
			header = strings.Split(strings.TrimPrefix(text, "\ufeff"), "|")
			col = map[string]int{}
			for i, h := range header {
				h = strings.TrimSpace(h)
				if _, dup := col[h]; dup {
					ps.add(line, h, "column twice")
				}
				col[h] = i
			}
			need := requiredColumns
			if opts.Cluster == "" {
				need = append(slices.Clone(need), "Cluster")
			}
			for _, c := range need {
				if _, ok := col[c]; !ok {
					ps.add(line, c, fmt.Sprintf("required column missing (sacct --parsable2 --format=%s)", Format))
				}
			}
			if _, ok := col["Elapsed"]; !ok {
				if _, ok := col["ElapsedRaw"]; !ok {
					ps.add(line, "Elapsed", "required column missing: Elapsed or ElapsedRaw")
				}
			}
			if len(ps.Problems) > 0 {
				return nil, ps.err()
			}
			continue
		}
		f := strings.Split(text, "|")
		if len(f) != len(header) {
			ps.add(line, "", fmt.Sprintf("%d fields, the header has %d (a '|' inside a field such as JobName? leave that column out)", len(f), len(header)))
			continue
		}
		get := func(name string) (string, bool) {
			i, ok := col[name]
			if !ok {
				return "", false
			}
			return strings.TrimSpace(f[i]), true
		}
		if j, ok := parseJob(line, get, opts, loc, &ps); ok {
			jobs = append(jobs, j)
		}
	}
	if err := sc.Err(); err != nil {
		msg := err.Error()
		if err == bufio.ErrTooLong {
			msg = fmt.Sprintf("line longer than %d MiB: not sacct output?", MaxLineBytes>>20)
		}
		ps.add(line+1, "", msg)
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	return jobs, nil
}

// Format is the --format list docs/slurm.md asks for.
const Format = "Cluster,JobID,JobIDRaw,Account,User,Partition,Start,End,Elapsed,ElapsedRaw,AllocTRES,ReqTRES,State,NodeList"

func parseJob(line int, get func(string) (string, bool), opts Options, loc *time.Location, ps *problems) (Job, bool) {
	before := len(ps.Problems)
	j := Job{Line: line, RequestedGPUs: -1}
	j.Cluster, _ = get("Cluster")
	if j.Cluster == "" {
		j.Cluster = opts.Cluster
	}
	j.JobID, _ = get("JobID")
	j.JobIDRaw, _ = get("JobIDRaw")
	j.Account, _ = get("Account")
	j.User, _ = get("User")
	j.Partition, _ = get("Partition")
	j.NodeList, _ = get("NodeList")
	if st, ok := get("State"); ok {
		j.State, _, _ = strings.Cut(st, " ") // "CANCELLED by 0"
	}
	if j.JobID == "" {
		ps.add(line, "JobID", "empty")
	}
	if j.JobIDRaw != "" && !isID(j.JobIDRaw, true) {
		ps.add(line, "JobIDRaw", fmt.Sprintf("%q is not a job id", j.JobIDRaw))
	}
	if j.JobID != "" && !isID(j.JobID, false) {
		ps.add(line, "JobID", fmt.Sprintf("%q is not a job id (123, 123_4, 123+1, 123.batch)", j.JobID))
	}
	for _, c := range []struct {
		name string
		dst  *time.Time
	}{{"Start", &j.Start}, {"End", &j.End}} {
		v, _ := get(c.name)
		t, err := parseTime(v, loc)
		if err != nil {
			ps.noZone = ps.noZone || errors.Is(err, ErrNoTimeZone)
			ps.add(line, c.name, err.Error())
		}
		*c.dst = t
	}
	if raw, ok := get("ElapsedRaw"); ok && raw != "" {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < 0 || n > maxElapsedSeconds {
			ps.add(line, "ElapsedRaw", fmt.Sprintf("%q is not a number of seconds", raw))
		}
		j.Elapsed = time.Duration(n) * time.Second
	} else if v, ok := get("Elapsed"); ok {
		d, err := parseElapsed(v)
		if err != nil {
			ps.add(line, "Elapsed", err.Error())
		}
		j.Elapsed = d
	}
	alloc, _ := get("AllocTRES")
	gpus, err := parseGPUTRES(alloc)
	if err != nil {
		ps.add(line, "AllocTRES", err.Error())
	}
	j.GPUs = gpus
	if req, ok := get("ReqTRES"); ok {
		r, err := parseGPUTRES(req)
		if err != nil {
			ps.add(line, "ReqTRES", err.Error())
		}
		j.RequestedGPUs = 0
		for _, g := range r {
			j.RequestedGPUs += g.Count
		}
	}
	return j, len(ps.Problems) == before
}

// maxElapsedSeconds bounds a job's run time (about 30 years).
const maxElapsedSeconds = 1 << 30

// isID accepts a job id as sacct prints it: digits, optionally
// "_<task>" or "_[<range>]" (array), "+<n>" (het component) and
// ".<step>" (a step name or number); raw ids are digits, with a step's
// suffix on a step's line.
func isID(s string, raw bool) bool {
	id, step, hasStep := strings.Cut(s, ".")
	if hasStep && (step == "" || strings.ContainsAny(step, " \t|")) {
		return false
	}
	if raw {
		return isDigits(id)
	}
	if i := strings.IndexAny(id, "_+"); i >= 0 {
		rest := id[i+1:]
		if id[i] == '_' && strings.HasPrefix(rest, "[") {
			return isDigits(id[:i]) && strings.HasSuffix(rest, "]") && len(rest) > 2
		}
		return isDigits(id[:i]) && isDigits(rest)
	}
	return isDigits(id)
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// parseTime reads sacct's times: ISO 8601 without offset (in loc), with
// an offset (SLURM_TIME_FORMAT=%Y-%m-%dT%H:%M:%S%z), or epoch seconds
// (SLURM_TIME_FORMAT=%s). Unknown, None and empty are the zero time. A
// nil loc refuses times without an offset.
func parseTime(v string, loc *time.Location) (time.Time, error) {
	switch v {
	case "", "Unknown", "None":
		return time.Time{}, nil
	}
	if isDigits(v) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > 1<<40 {
			return time.Time{}, fmt.Errorf("%q is out of range", v)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05Z0700", "2006-01-02T15:04:05Z07:00"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	if loc == nil {
		if _, err := time.Parse("2006-01-02T15:04:05", v); err == nil {
			return time.Time{}, fmt.Errorf("%q has %w: give the location (the zone sacct ran in), or run sacct with SLURM_TIME_FORMAT=%%Y-%%m-%%dT%%H:%%M:%%S%%z", v, ErrNoTimeZone)
		}
	}
	t, err := time.ParseInLocation("2006-01-02T15:04:05", v, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a time: want 2026-12-04T18:53:49 (in the location's zone), an offset, or epoch seconds", v)
	}
	return t.UTC(), nil
}

// parseElapsed reads "[DD-]HH:MM:SS", "MM:SS" or "SS" (what sacct prints
// for short jobs in some versions).
func parseElapsed(v string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not a run time: want [days-]hours:minutes:seconds", v)
	if v == "" {
		return 0, bad
	}
	var days int64
	if d, rest, ok := strings.Cut(v, "-"); ok {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil || !isDigits(d) || n > 100_000 {
			return 0, bad
		}
		days, v = n, rest
	}
	parts := strings.Split(v, ":")
	if len(parts) > 3 {
		return 0, bad
	}
	var secs int64
	for i, p := range parts {
		if !isDigits(p) || len(p) > 6 {
			return 0, bad
		}
		n, _ := strconv.ParseInt(p, 10, 64)
		if i > 0 && n >= 60 {
			return 0, bad
		}
		secs = secs*60 + n
	}
	return time.Duration(days*86400+secs) * time.Second, nil
}

// parseGPUTRES reads the GPU counts of a TRES list ("billing=2,cpu=2,
// gres/gpu:a100=1,gres/gpu=2,mem=8000M,node=1"): typed counts by type,
// and the untyped rest of gres/gpu as Type "". Other TRES are ignored.
func parseGPUTRES(v string) ([]GRES, error) {
	if v == "" || v == "(null)" {
		return nil, nil
	}
	total, haveTotal := 0, false
	typed := map[string]int{}
	for _, item := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not name=count", item)
		}
		name, ok := strings.CutPrefix(k, "gres/gpu")
		if !ok || (name != "" && name[0] != ':') {
			continue // cpu, mem, gres/gpumem, gres/mps, …
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 || n > 1<<20 || !isDigits(val) {
			return nil, fmt.Errorf("%s=%q: not a GPU count", k, val)
		}
		if name == "" {
			if haveTotal {
				return nil, fmt.Errorf("%s twice", k)
			}
			total, haveTotal = n, true
			continue
		}
		typ := name[1:]
		if typ == "" {
			return nil, fmt.Errorf("%q: empty GRES type", k)
		}
		if _, dup := typed[typ]; dup {
			return nil, fmt.Errorf("%s twice", k)
		}
		typed[typ] = n
	}
	sum := 0
	for _, n := range typed {
		sum += n
	}
	if !haveTotal {
		total = sum
	}
	if sum > total {
		return nil, fmt.Errorf("typed GPUs (%d) exceed gres/gpu=%d", sum, total)
	}
	var out []GRES
	for _, typ := range slices.Sorted(maps.Keys(typed)) {
		if typed[typ] > 0 {
			out = append(out, GRES{Type: typ, Count: typed[typ]})
		}
	}
	if total > sum {
		out = append(out, GRES{Type: "", Count: total - sum})
	}
	return out, nil
}

// problems collects importer.Problems (without a file name: the caller
// adds it).
type problems struct {
	importer.ValidationError
	noZone bool // a time without an offset was read without a location
}

// ErrNoTimeZone: sacct printed times without an offset and no location
// says which zone they are in. Parse's error matches it (errors.Is) when
// any time had none, so a caller can say how it takes a location.
var ErrNoTimeZone = errors.New("no time zone")

// noZoneError is a parse error some of whose problems are ErrNoTimeZone.
type noZoneError struct{ *importer.ValidationError }

func (e noZoneError) Unwrap() error        { return e.ValidationError }
func (e noZoneError) Is(target error) bool { return target == ErrNoTimeZone }

func (p *problems) add(line int, field, msg string) {
	if len(p.Problems) >= importer.MaxProblems {
		p.Truncated = true
		return
	}
	p.Problems = append(p.Problems, importer.Problem{Line: line, Field: field, Msg: msg})
}

func (p *problems) err() error {
	if len(p.Problems) == 0 {
		return nil
	}
	e := p.ValidationError
	if p.noZone {
		return noZoneError{&e}
	}
	return &e
}
