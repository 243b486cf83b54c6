package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

// sampleColumns is the explicit column list of every usage_samples INSERT;
// inserted_at is left to its DEFAULT.
var sampleColumns = "sample_id, host, gpu_uuid, gpu_model, mig_uuid, mig_profile, sku, " +
	"tenant, department, workload, start, end, " + meterColumns("") + ", unmeasured"

// meterColumns lists the meters' columns in collectors.Meter order, each
// wrapped in its aggregate when agg is set ("sum": sum(col), or max(col)
// for a peak).
func meterColumns(agg string) string {
	cols := make([]string, collectors.NumMeters)
	for i, m := range collectors.MeterSpecs {
		switch {
		case agg == "":
			cols[i] = m.Column
		case m.Peak:
			cols[i] = "max(" + m.Column + ")"
		default:
			cols[i] = agg + "(" + m.Column + ")"
		}
	}
	return strings.Join(cols, ", ")
}

// MaxInsertRows caps one INSERT; larger calls are split.
const MaxInsertRows = 100_000

// blockRows is the size of the data blocks one INSERT is streamed in.
const blockRows = 10_000

// InsertSamples writes samples in batches over the native protocol. Every
// sample is validated first; one bad sample rejects the call and nothing is
// sent. Inserting a sample twice is harmless: reads deduplicate by sample_id.
func (s *Store) InsertSamples(ctx context.Context, samples []collectors.Sample) error {
	for i := range samples {
		if err := samples[i].Validate(); err != nil {
			return fmt.Errorf("insert samples: sample %d (id %d): %w", i, samples[i].ID, err)
		}
	}
	for lo := 0; lo < len(samples); lo += MaxInsertRows {
		hi := min(lo+MaxInsertRows, len(samples))
		if err := s.insertBatch(ctx, samples[lo:hi]); err != nil {
			return fmt.Errorf("insert samples %d..%d of %d: %w", lo, hi, len(samples), err)
		}
	}
	return nil
}

func (s *Store) insertBatch(ctx context.Context, samples []collectors.Sample) error {
	// Bound the whole insert: streaming blocks (Flush) is not covered by the
	// driver's per-query watchdog, and a stalled peer must not hold the
	// shipper (or a shutdown) forever.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	batch, err := s.conn.PrepareBatch(ctx, "INSERT INTO usage_samples ("+sampleColumns+")")
	if err != nil {
		return fmt.Errorf("prepare batch: %w", err)
	}
	// Column-wise append: one slice per column is several times faster than
	// row-wise Append with its per-value reflection. The slices are reused
	// from call to call (the driver copies out of them), which keeps the
	// shipper's steady state from allocating and zeroing them anew.
	cb := columnPool.Get().(*columnBuffers)
	defer columnPool.Put(cb)
	// Blocks of blockRows within the one INSERT: the server writes a block
	// while the next one is built, instead of waiting for the whole batch.
	// A broken connection may leave earlier blocks stored; the caller
	// retries and reads deduplicate by sample_id.
	for lo := 0; lo < len(samples); lo += blockRows {
		if lo > 0 {
			if err := batch.Flush(); err != nil {
				batch.Abort()
				return fmt.Errorf("send block at row %d: %w", lo, err)
			}
		}
		cb.fill(samples[lo:min(lo+blockRows, len(samples))])
		for i, col := range cb.columns() {
			if err := batch.Column(i).Append(col); err != nil {
				batch.Abort()
				return fmt.Errorf("append column %d: %w", i, err)
			}
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("send batch of %d rows: %w", len(samples), err)
	}
	return nil
}

// columnBuffers hold one insert's columns, in sampleColumns order.
type columnBuffers struct {
	strs   [9][]string // host … workload
	times  [2][]time.Time
	counts [collectors.NumMeters][]uint64
	ids    []uint64
	flags  []uint8 // unmeasured
}

var columnPool = sync.Pool{New: func() any { return new(columnBuffers) }}

func (c *columnBuffers) fill(samples []collectors.Sample) {
	c.ids = c.ids[:0]
	c.flags = c.flags[:0]
	for i := range c.strs {
		c.strs[i] = c.strs[i][:0]
	}
	for i := range c.times {
		c.times[i] = c.times[i][:0]
	}
	for i := range c.counts {
		c.counts[i] = c.counts[i][:0]
	}
	for i := range samples {
		x := &samples[i]
		c.ids = append(c.ids, x.ID)
		for j, v := range [9]string{x.Host, x.GPUUUID, x.GPUModel, x.MIGUUID, x.MIGProfile, x.SKU, x.Tenant, x.Department, x.Workload} {
			c.strs[j] = append(c.strs[j], v)
		}
		c.times[0] = append(c.times[0], x.Start.UTC())
		c.times[1] = append(c.times[1], x.End.UTC())
		for j, v := range x.Values() {
			c.counts[j] = append(c.counts[j], v)
		}
		c.flags = append(c.flags, uint8(x.Unmeasured))
	}
}

func (c *columnBuffers) columns() []any {
	cols := make([]any, 0, 14+len(c.counts))
	cols = append(cols, c.ids)
	for i := range c.strs {
		cols = append(cols, c.strs[i])
	}
	cols = append(cols, c.times[0], c.times[1])
	for i := range c.counts {
		cols = append(cols, c.counts[i])
	}
	return append(cols, c.flags)
}

// ScanSamples calls fn for every stored sample of the given GPUs whose
// interval overlaps [from, to), deduplicated (FINAL), in no set order. The
// importer checks new rows against them: ids stored with other data, and
// GPU capacity. Rows start at most collectors.MaxInterval before they
// end (InsertSamples validates it), which bounds the partitions read.
func (s *Store) ScanSamples(ctx context.Context, gpuUUIDs []string, from, to time.Time, fn func(collectors.Sample) error) error {
	if len(gpuUUIDs) == 0 || !to.After(from) {
		return nil
	}
	if err := s.checkTimes(ctx, "scan samples", to); err != nil {
		return err
	}
	earliest := from.Add(-collectors.MaxInterval)
	if earliest.Before(collectors.MinTime) {
		earliest = collectors.MinTime
	}
	rows, err := s.conn.Query(ctx, "SELECT "+sampleColumns+" FROM usage_samples FINAL"+
		" WHERE start >= ? AND start < ? AND end > ? AND has(?, gpu_uuid)",
		earliest.UTC(), to.UTC(), from.UTC(), gpuUUIDs)
	if err != nil {
		return fmt.Errorf("scan samples: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var x collectors.Sample
		var unmeasured uint8
		dest := []any{&x.ID, &x.Host, &x.GPUUUID, &x.GPUModel, &x.MIGUUID, &x.MIGProfile, &x.SKU,
			&x.Tenant, &x.Department, &x.Workload, &x.Start, &x.End}
		for m := range collectors.NumMeters {
			dest = append(dest, x.Ptr(m))
		}
		if err := rows.Scan(append(dest, &unmeasured)...); err != nil {
			return fmt.Errorf("scan samples: %w", err)
		}
		x.Unmeasured = collectors.Unmeasured(unmeasured)
		x.Start, x.End = x.Start.UTC(), x.End.UTC()
		if err := fn(x); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("scan samples: %w", err)
	}
	return nil
}
