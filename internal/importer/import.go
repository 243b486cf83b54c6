package importer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// File is one input file.
type File struct {
	Path   string
	Format Format
	// Rows are the file's rows when another parser read it (Format
	// FormatParsed; e.g. sacct output, internal/sacct): each is checked
	// like a row of a CSV file, and problems name Path and the row's Line.
	Rows []Row
}

// Row is one sample parsed from line Line of a file in a format the
// importer does not read itself.
type Row struct {
	Line   int
	Sample collectors.Sample
}

// Store is what an import needs from storage; internal/store.Store is one.
type Store interface {
	InsertSamples(ctx context.Context, samples []collectors.Sample) error
	// ScanSamples calls fn for every stored sample (deduplicated) of the
	// given GPUs whose interval overlaps [from, to).
	ScanSamples(ctx context.Context, gpuUUIDs []string, from, to time.Time, fn func(collectors.Sample) error) error
}

// Progress is reported while files are read.
type Progress struct {
	File       string
	Phase      string // "validate" or "store"
	Bytes      int64
	TotalBytes int64
	Rows       int
}

// Options tune an import.
type Options struct {
	Format    Format         // of the file, for ImportFile
	BatchSize int            // rows per insert; default 50,000
	DryRun    bool           // validate only
	Replace   bool           // overwrite stored rows that have a file row's id but other data
	Progress  func(Progress) // called every ProgressEvery rows and at the end of each phase
}

// ProgressEvery is how often (in rows) Progress is called.
const ProgressEvery = 100_000

// Result says what an import did.
type Result struct {
	Rows      int // valid rows read, repeats included
	Stored    int // rows inserted
	Unchanged int // rows already stored with the same data: not inserted again
	Replaced  int // stored rows overwritten (Options.Replace)
	Repeats   int // rows repeating an earlier row of the import exactly
	Batches   int
}

// ImportFile is Import of one file in opts.Format.
func ImportFile(ctx context.Context, path string, opts Options, st Store) (Result, error) {
	return Import(ctx, []File{{Path: path, Format: opts.Format}}, opts, st)
}

// seenRow is what the import keeps of each distinct row between its read
// passes: where it is and a digest of its data.
type seenRow struct {
	file, line int
	digest     uint64
	unchanged  bool // already stored with the same data
}

// Import checks every file, then the files against what is stored, and
// stores nothing unless all of it is good:
//
//   - each row on its own (fields, physical limits, MIG profile share);
//   - ids: always derived from host, device, tenant, workload and start; a
//     row repeating an id with other data, in any file, is refused;
//   - stored rows with a file row's id must hold the same data, unless
//     opts.Replace;
//   - capacity: per GPU and per MIG instance, the file rows together with
//     the stored rows (idle included) fit in wall time and in the GPU's
//     physical rates.
//
// Then the files are read again and inserted in batches. Rows already
// stored unchanged are skipped, so an import run twice, or re-run after it
// was cut short, changes no total. st may be nil with DryRun: the files are
// then checked on their own.
func Import(ctx context.Context, files []File, opts Options, st Store) (Result, error) {
	if opts.BatchSize == 0 {
		opts.BatchSize = 50_000
	}
	if opts.BatchSize < 0 {
		return Result{}, fault.Validation(errors.New("batch size: must be positive"))
	}
	if st == nil && !opts.DryRun {
		return Result{}, errors.New("import: no store (only a dry run may go without)")
	}
	var (
		res      Result
		ps       problems
		seen     = map[uint64]seenRow{}
		capacity = newCapacityCheck()
		gpus     = map[string]bool{}
		from, to time.Time
	)
	for fi, f := range files {
		err := readFile(ctx, f, "validate", opts.Progress, func(line int, s collectors.Sample) error {
			res.Rows++
			d := digest(s)
			if prev, ok := seen[s.ID]; ok {
				if prev.digest != d {
					ps.add(Problem{f.Path, line, "sample_id", fmt.Sprintf(
						"same id as %s:%d (host, device, tenant, workload and start) but different data: add a workload column to tell them apart",
						files[prev.file].Path, prev.line)})
				} else {
					res.Repeats++
				}
				return nil
			}
			seen[s.ID] = seenRow{file: fi, line: line, digest: d}
			capacity.add(&s, rowRef{file: fi, line: line, id: s.ID})
			gpus[s.GPUUUID] = true
			if from.IsZero() || s.Start.Before(from) {
				from = s.Start
			}
			if s.End.After(to) {
				to = s.End
			}
			return nil
		})
		if err := ps.merge(f.Path, err); err != nil {
			return Result{}, err
		}
	}
	if err := ps.err(); err != nil {
		return Result{Rows: res.Rows}, err
	}

	if st != nil && len(gpus) > 0 {
		conflicts := map[uint64]collectors.Sample{}
		err := st.ScanSamples(ctx, slices.Sorted(maps.Keys(gpus)), from, to, func(s collectors.Sample) error {
			prev, ok := seen[s.ID]
			switch {
			case !ok:
				capacity.add(&s, rowRef{file: -1, id: s.ID})
			case prev.digest == digest(s):
				prev.unchanged = true
				seen[s.ID] = prev
				res.Unchanged++
			case opts.Replace:
				res.Replaced++
			case len(conflicts) < MaxProblems:
				conflicts[s.ID] = s
			default:
				ps.Truncated = true
			}
			return nil
		})
		if err != nil {
			return Result{Rows: res.Rows}, fmt.Errorf("import: read stored samples: %w", err)
		}
		if len(conflicts) > 0 {
			if err := describeConflicts(ctx, files, seen, conflicts, &ps); err != nil {
				return Result{Rows: res.Rows}, err
			}
			return Result{Rows: res.Rows}, ps.err()
		}
	}
	for _, o := range capacity.check(MaxProblems) {
		r := o.rows[0]
		ps.add(Problem{files[r.file].Path, r.line, meter.Specs[o.meter].File, o.describe(files)})
	}
	if err := ps.err(); err != nil {
		return Result{Rows: res.Rows}, err
	}
	if opts.DryRun {
		return res, nil
	}

	batch := make([]collectors.Sample, 0, min(opts.BatchSize, 1<<16))
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := st.InsertSamples(ctx, batch); err != nil {
			return fmt.Errorf("store rows %d..%d: %w (rows before were stored; re-running the import is safe)", res.Stored+1, res.Stored+len(batch), err)
		}
		res.Stored += len(batch)
		res.Batches++
		batch = batch[:0]
		return nil
	}
	for fi, f := range files {
		err := readFile(ctx, f, "store", opts.Progress, func(line int, s collectors.Sample) error {
			prev, ok := seen[s.ID]
			own := ok && prev.file == fi && prev.line == line
			if !ok || own && prev.digest != digest(s) {
				return fault.Conflictf("line %d: the file changed while it was imported", line)
			}
			if !own || prev.unchanged {
				return nil // a repeat, or stored already
			}
			batch = append(batch, s)
			if len(batch) >= opts.BatchSize {
				return flush()
			}
			return nil
		})
		if err == nil && fi == len(files)-1 {
			err = flush()
		}
		if err != nil {
			return res, fmt.Errorf("import %s: %w", f.Path, err)
		}
	}
	return res, nil
}

// describeConflicts reads the files once more for the rows whose id is
// stored with other data, and names the first field that differs.
func describeConflicts(ctx context.Context, files []File, seen map[uint64]seenRow, stored map[uint64]collectors.Sample, ps *problems) error {
	cols := columns()
	for fi, f := range files {
		err := readFile(ctx, f, "", nil, func(line int, s collectors.Sample) error {
			old, ok := stored[s.ID]
			if !ok || seen[s.ID].file != fi || seen[s.ID].line != line {
				return nil
			}
			field, msg := "sample_id", "stored with other data"
			for _, c := range cols {
				if a, b := c.get(&old), c.get(&s); a != b {
					field, msg = c.name, fmt.Sprintf("stored as %q, here %q", a, b)
					break
				}
			}
			ps.add(Problem{f.Path, line, field, fmt.Sprintf("this row (sample_id %d) is already stored with other data: %s; import with replace to overwrite the stored row", s.ID, msg)})
			return nil
		})
		if err != nil {
			return fmt.Errorf("import %s: %w", f.Path, err)
		}
	}
	return nil
}

// readFile reads one file, reporting progress under phase.
func readFile(ctx context.Context, f File, phase string, progress func(Progress), emit func(line int, s collectors.Sample) error) error {
	if f.Format == FormatParsed {
		return readRows(ctx, f, phase, progress, emit)
	}
	fh, err := os.Open(f.Path)
	if err != nil {
		return err
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fault.Validation(errors.New("not a regular file"))
	}
	cr := &countingReader{r: fh}
	rows := 0
	report := func() {
		if progress != nil && phase != "" {
			progress(Progress{File: f.Path, Phase: phase, Bytes: cr.n.Load(), TotalBytes: info.Size(), Rows: rows})
		}
	}
	err = readLines(cr, f.Format, func(line int, s collectors.Sample) error {
		if rows++; rows%ProgressEvery == 0 {
			report()
		}
		if err := emit(line, s); err != nil {
			return err
		}
		return ctx.Err()
	})
	if err == nil {
		report()
	}
	return err
}

// readRows checks and emits the rows of a parsed file, as readCSV does
// those of a CSV file: every row through finish (ids, SKU, physical
// limits), problems collected, valid rows emitted.
func readRows(ctx context.Context, f File, phase string, progress func(Progress), emit func(line int, s collectors.Sample) error) error {
	var ps problems
	report := func(rows int) {
		if progress != nil && phase != "" {
			progress(Progress{File: f.Path, Phase: phase, Bytes: int64(rows), TotalBytes: int64(len(f.Rows)), Rows: rows})
		}
	}
	for i, r := range f.Rows {
		if (i+1)%ProgressEvery == 0 {
			report(i + 1)
		}
		s := r.Sample
		before := len(ps.Problems)
		requireFields(&s, r.Line, &ps, before)
		finish(&s, r.Line, ps.add)
		if len(ps.Problems) > before || ps.Truncated {
			continue
		}
		if err := emit(r.Line, s); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if err := ps.err(); err != nil {
		return err
	}
	report(len(f.Rows))
	return nil
}

type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// digest hashes everything a sample carries, to tell a replayed row from a
// different row with the same id.
func digest(s collectors.Sample) uint64 {
	h := fnv.New64a()
	for _, v := range []string{s.Host, s.GPUUUID, s.GPUModel, s.MIGUUID, s.MIGProfile, s.SKU, s.Tenant, s.Department, s.Workload} {
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	var b [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	put(uint64(s.Start.Unix()))
	put(uint64(s.End.Unix()))
	put(uint64(s.Unmeasured))
	for _, v := range s.Array() {
		put(v)
	}
	return h.Sum64()
}
