package importer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"sync/atomic"

	"github.com/gpumeter/gpumeter/collectors"
)

// Sink stores validated samples; internal/store.Store is one.
type Sink interface {
	InsertSamples(ctx context.Context, samples []collectors.Sample) error
}

// Progress is reported while a file is read.
type Progress struct {
	Phase      string // "validate" or "store"
	Bytes      int64
	TotalBytes int64
	Rows       int
}

// Options tune an import.
type Options struct {
	Format    Format
	BatchSize int            // rows per insert; default 50,000
	DryRun    bool           // validate only
	Progress  func(Progress) // called every ProgressEvery rows and at the end of each phase
}

// ProgressEvery is how often (in rows) Progress is called.
const ProgressEvery = 100_000

// Result says what an import did.
type Result struct {
	Rows    int
	Batches int
}

// ImportFile validates the whole file first and stores nothing if any row
// is bad; then it reads it again and inserts in batches. Samples keep
// deterministic ids (given or derived), so importing a file twice leaves
// every total unchanged, and an import cut short can simply be re-run.
func ImportFile(ctx context.Context, path string, opts Options, sink Sink) (Result, error) {
	if opts.BatchSize == 0 {
		opts.BatchSize = 50_000
	}
	if opts.BatchSize < 0 {
		return Result{}, errors.New("batch size: must be positive")
	}
	f, err := os.Open(path)
	if err != nil {
		return Result{}, fmt.Errorf("import %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Result{}, fmt.Errorf("import %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return Result{}, fmt.Errorf("import %s: not a regular file", path)
	}
	total := st.Size()

	rows := 0
	cr := &countingReader{r: f}
	report := func(phase string) {
		if opts.Progress != nil {
			opts.Progress(Progress{Phase: phase, Bytes: cr.n.Load(), TotalBytes: total, Rows: rows})
		}
	}
	// Two rows with one sample_id but different data would collapse into
	// one in ClickHouse and lose usage: typically rows told apart only by a
	// column the id does not hash (no workload column, say). Identical
	// repeats are fine: they are replays.
	type seenRow struct {
		line   int
		digest uint64
	}
	seen := map[uint64]seenRow{}
	var dups problems
	err = readLines(cr, opts.Format, func(line int, s collectors.Sample) error {
		rows++
		if rows%ProgressEvery == 0 {
			report("validate")
		}
		d := digest(s)
		if prev, ok := seen[s.ID]; ok && prev.digest != d {
			dups.add(Problem{line, "sample_id", fmt.Sprintf(
				"same id as line %d (host, device, tenant, workload and start) but different data: add a workload or sample_id column to tell them apart", prev.line)})
		} else if !ok {
			seen[s.ID] = seenRow{line, d}
		}
		return ctx.Err()
	})
	if err == nil {
		err = dups.err()
	}
	if err != nil {
		return Result{}, fmt.Errorf("import %s: %w", path, err)
	}
	report("validate")
	if opts.DryRun {
		return Result{Rows: rows}, nil
	}

	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Result{}, fmt.Errorf("import %s: rewind: %w", path, err)
	}
	cr = &countingReader{r: f}
	res := Result{}
	rows = 0
	batch := make([]collectors.Sample, 0, min(opts.BatchSize, 1<<16))
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := sink.InsertSamples(ctx, batch); err != nil {
			return fmt.Errorf("store rows %d..%d: %w (rows before were stored; re-running the import is safe)", res.Rows+1, res.Rows+len(batch), err)
		}
		res.Rows += len(batch)
		res.Batches++
		batch = batch[:0]
		return nil
	}
	err = Read(cr, opts.Format, func(s collectors.Sample) error {
		batch = append(batch, s)
		rows++
		if rows%ProgressEvery == 0 {
			report("store")
		}
		if len(batch) >= opts.BatchSize {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return res, fmt.Errorf("import %s: %w", path, err)
	}
	report("store")
	return res, nil
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
	for _, v := range []uint64{uint64(s.Start.UnixNano()), uint64(s.End.UnixNano()), s.GPUMicroseconds, s.SMActiveMicroseconds,
		s.MemMiBSeconds, s.MemPeakBytes, s.EnergyMillijoules, s.PCIeTxBytes, s.PCIeRxBytes, s.NVLinkTxBytes, s.NVLinkRxBytes,
		uint64(s.Unmeasured)} {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	return h.Sum64()
}
