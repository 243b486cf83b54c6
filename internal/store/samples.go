package store

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/spool"
)

// sampleColumns is the explicit column list of every usage_samples INSERT;
// inserted_at is left to its DEFAULT.
var sampleColumns = "sample_id, host, gpu_uuid, gpu_model, mig_uuid, mig_profile, sku, " +
	"tenant, department, workload, start, end, " + meterColumns("") + ", unmeasured"

// meterColumns lists the meters' columns in meter.ID order, each
// wrapped in its aggregate when agg is set ("sum": sum(col), or max(col)
// for a peak).
func meterColumns(agg string) string {
	cols := make([]string, meter.Count)
	for i, m := range meter.Specs {
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

// unmeasuredColumns lists usage_hourly's unmeasured GPU-time columns, one
// per meter.Groups entry, each wrapped in agg ("" for the bare names).
func unmeasuredColumns(agg string) string {
	cols := make([]string, meter.NumGroups)
	for i, g := range meter.Groups {
		cols[i] = g.Column
		if agg != "" {
			cols[i] = agg + "(" + g.Column + ")"
		}
	}
	return strings.Join(cols, ", ")
}

// meterDest appends a pointer to each of v's meters to dest, in
// meterColumns' order, for a row's Scan.
func meterDest(dest []any, v *meter.Values) []any {
	for m := range meter.Count {
		dest = append(dest, v.Ptr(m))
	}
	return dest
}

// totalsDest appends t's meters (meterDest), then its unmeasured GPU
// times in unmeasuredColumns' order, to dest.
func totalsDest(dest []any, t *meter.Totals) []any {
	dest = meterDest(dest, &t.Values)
	for i := range t.Unmeasured {
		dest = append(dest, &t.Unmeasured[i])
	}
	return dest
}

// unmeasuredSums are the GPU-microseconds of raw samples lacking each
// meter group, by the bits of meter.Unmeasured (shared with the rollup).
func unmeasuredSums() string {
	cols := make([]string, meter.NumGroups)
	for i := range meter.Groups {
		cols[i] = fmt.Sprintf("sumIf(gpu_microseconds, bitAnd(unmeasured, %d) != 0)", meter.Flag(i))
	}
	return strings.Join(cols, ", ")
}

// MaxInsertRows caps one INSERT; larger calls are split.
const MaxInsertRows = 100_000

// blockRows is the size of the data blocks one INSERT is streamed in.
const blockRows = 10_000

// The shipper hands the store columns decoded straight from the spool.
var _ spool.ColumnSink = (*Store)(nil)

// InsertSamples writes samples in batches over the native protocol. Every
// sample is validated first; one bad sample rejects the call and nothing is
// sent. Inserting a sample twice is harmless: reads deduplicate by sample_id.
func (s *Store) InsertSamples(ctx context.Context, samples []collectors.Sample) error {
	for i := range samples {
		if err := samples[i].Validate(); err != nil {
			return fmt.Errorf("insert samples: sample %d (id %d): %w", i, samples[i].ID, err)
		}
	}
	var c spool.Columns
	c.AppendSamples(samples)
	return s.insertColumns(ctx, &c)
}

// InsertColumns validates rows held column by column (what the shipper
// reads from the spool; one invalid row rejects the call and nothing is
// sent), then inserts them as InsertSamples does. Safe for concurrent use:
// each call takes a connection of its own from the pool.
func (s *Store) InsertColumns(ctx context.Context, c *spool.Columns) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("insert samples: %w", err)
	}
	return s.insertColumns(ctx, c)
}

// insertColumns sorts c's rows by the table's key once and sends them in
// INSERTs of at most MaxInsertRows, each an ascending run of that order,
// so that every part arrives sorted.
func (s *Store) insertColumns(ctx context.Context, c *spool.Columns) error {
	o := orderPool.Get().(*rowOrder)
	defer orderPool.Put(o)
	o.sortRows(c)
	for lo := 0; lo < len(o.keys); lo += MaxInsertRows {
		hi := min(lo+MaxInsertRows, len(o.keys))
		if err := s.insertSorted(ctx, c, o.keys[lo:hi]); err != nil {
			return fmt.Errorf("insert samples: rows %d to %d of %d: %w", lo, hi, len(o.keys), err)
		}
	}
	return nil
}

// insertSorted runs one INSERT of the rows keys name, in their order.
func (s *Store) insertSorted(ctx context.Context, c *spool.Columns, keys []sortKey) error {
	// Bound the whole insert: a stalled peer must not hold the shipper (or
	// a shutdown) forever.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	nc, err := s.native.get(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	stop := nc.watch(ctx, 0)
	err = sendSorted(nc, c, keys)
	if stopErr := stop(); stopErr != nil {
		err = fmt.Errorf("%w (after %v)", stopErr, err)
	}
	if err != nil {
		s.native.discard(nc)
		return err
	}
	s.native.put(nc)
	return nil
}

// sendSorted runs one INSERT on nc of the rows keys name, streamed in
// blocks of blockRows: the server works on a block while the next one is
// built, instead of waiting for the whole batch. A broken connection may
// leave earlier blocks stored; the caller retries and reads deduplicate
// by sample_id.
func sendSorted(nc *nativeConn, c *spool.Columns, keys []sortKey) error {
	header, err := nc.begin("INSERT INTO usage_samples ("+sampleColumns+") FORMAT Native", nc.header)
	if err != nil {
		return fmt.Errorf("begin insert: %w", err)
	}
	nc.header = header
	if nc.fields, err = sampleFields(nc.fields[:0], header); err != nil {
		return err
	}
	for lo := 0; lo < len(keys); lo += blockRows {
		block := keys[lo:min(lo+blockRows, len(keys))]
		err := nc.appendBlock(header, len(block), func(b []byte, i int, col *nativeColumn) []byte {
			return nc.fields[i].encode(b, col, c, block, &nc.lc)
		})
		if err == nil {
			err = nc.flush()
		}
		if err != nil {
			return fmt.Errorf("send block after %d rows: %w", lo, err)
		}
	}
	if err := nc.finish(); err != nil {
		return fmt.Errorf("insert of %d rows: %w", len(keys), err)
	}
	return nil
}

// sampleField is where a usage_samples column comes from in
// spool.Columns.
type sampleField struct {
	from  fieldSource
	index int // the string column (spool.Col...) or the meter
}

type fieldSource uint8

const (
	fromID fieldSource = iota
	fromString
	fromStart
	fromEnd
	fromMeter
	fromUnmeasured
)

// sampleFields maps the server's header columns to their sources, and
// refuses a header whose names or types are not usage_samples' own.
func sampleFields(dst []sampleField, header []nativeColumn) ([]sampleField, error) {
	names := strings.Split(sampleColumns, ", ")
	if len(header) != len(names) {
		return nil, fmt.Errorf("usage_samples insert: the server expects %d columns, want %d", len(header), len(names))
	}
	for i, col := range header {
		var f sampleField
		var want []columnKind
		switch {
		case col.name == "sample_id":
			f, want = sampleField{from: fromID}, []columnKind{kindUInt64}
		case col.name == "start":
			f, want = sampleField{from: fromStart}, []columnKind{kindDateTime}
		case col.name == "end":
			f, want = sampleField{from: fromEnd}, []columnKind{kindDateTime}
		case col.name == "unmeasured":
			f, want = sampleField{from: fromUnmeasured}, []columnKind{kindUInt8}
		default:
			j := slices.Index(names, col.name)
			switch {
			case j >= 1 && j <= spool.NumStringColumns:
				f, want = sampleField{from: fromString, index: j - 1}, []columnKind{kindString, kindLowCardinalityString}
			case j > spool.NumStringColumns+2 && j < spool.NumStringColumns+3+int(meter.Count):
				f, want = sampleField{from: fromMeter, index: j - spool.NumStringColumns - 3}, []columnKind{kindUInt64}
			default:
				return nil, fmt.Errorf("usage_samples insert: the server expects column %s, which the insert does not have", col.name)
			}
		}
		if names[i] != col.name {
			return nil, fmt.Errorf("usage_samples insert: the server expects column %s at %d, want %s", col.name, i, names[i])
		}
		if !slices.Contains(want, col.kind) {
			return nil, fmt.Errorf("usage_samples insert: column %s has type %s on the server", col.name, col.typ)
		}
		dst = append(dst, f)
	}
	return dst, nil
}

// encode appends the rows keys name, in their order, as column col.
func (f sampleField) encode(b []byte, col *nativeColumn, c *spool.Columns, keys []sortKey, lc *lowCardinalityScratch) []byte {
	switch f.from {
	case fromID:
		return appendUInt64s(b, c.IDs, keys)
	case fromMeter:
		return appendUInt64s(b, c.Meters[f.index], keys)
	case fromStart:
		return appendDateTimes(b, c.StartSeconds, keys)
	case fromEnd:
		return appendDateTimes(b, c.EndSeconds, keys)
	case fromUnmeasured:
		n := len(b)
		b = slices.Grow(b, len(keys))[:n+len(keys)]
		for i, k := range keys {
			b[n+i] = c.Unmeasured[k.row]
		}
		return b
	}
	codes := c.Strings[f.index]
	if col.kind == kindLowCardinalityString {
		return lc.appendLowCardinality(b, c.Dict, func(yield func(uint32)) {
			for _, k := range keys {
				yield(codes[k.row])
			}
		})
	}
	for _, k := range keys {
		b = appendString(b, c.Dict[codes[k.row]])
	}
	return b
}

// appendUInt64s appends src's rows in keys' order as a UInt64 column.
func appendUInt64s(b []byte, src []uint64, keys []sortKey) []byte {
	n := len(b)
	b = slices.Grow(b, 8*len(keys))[:n+8*len(keys)]
	out := b[n:]
	for i, k := range keys {
		binary.LittleEndian.PutUint64(out[8*i:], src[k.row])
	}
	return b
}

// appendDateTimes appends src's rows (Unix seconds, which Validate keeps
// within DateTime's range) in keys' order as a DateTime column: UInt32.
func appendDateTimes(b []byte, src []int64, keys []sortKey) []byte {
	n := len(b)
	b = slices.Grow(b, 4*len(keys))[:n+4*len(keys)]
	out := b[n:]
	for i, k := range keys {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(src[k.row]))
	}
	return b
}

// rowOrder is one batch's rows in usage_samples' sort order, reused from
// batch to batch.
type rowOrder struct {
	keys  []sortKey
	rank  []uint32 // by Dict index: the tenant's place in byte order
	codes []uint32 // the tenants' Dict indexes, in byte order
	ends  []int    // by rank: where the tenant's rows end in keys
	next  []int
}

var orderPool = sync.Pool{New: func() any { return new(rowOrder) }}

// sortKey is a row's place in usage_samples' sorting key, ORDER BY
// (tenant, start, sample_id), within its tenant.
type sortKey struct {
	start uint32 // DateTime stores the second as a UInt32 (validated to fit)
	row   int32
	id    uint64
}

// sortRows orders the rows of c by usage_samples' sorting key. ClickHouse
// sorts every part it writes by that key unless the rows arrive sorted,
// which it checks in one pass: sorting here costs the shipper less than
// it saves the server (docs/performance.md). Should the table's key ever
// differ, only that saving is lost, nothing else.
//
// Rows go to their tenant by a counting sort (stable), and spooled rows
// arrive in time order, poll by poll: within a tenant only the ids of
// each poll are left to sort, unless the starts are out of order (late
// samples), which gets a full sort of that tenant's rows.
func (b *rowOrder) sortRows(c *spool.Columns) {
	tenants := c.Strings[spool.ColTenant]
	b.rank = slices.Grow(b.rank[:0], len(c.Dict))[:len(c.Dict)]
	clear(b.rank)
	b.codes = b.codes[:0]
	for _, k := range tenants {
		if b.rank[k] == 0 {
			b.rank[k] = 1
			b.codes = append(b.codes, k)
		}
	}
	// Byte order, as ClickHouse compares String.
	slices.SortFunc(b.codes, func(x, y uint32) int { return strings.Compare(c.Dict[x], c.Dict[y]) })
	for r, k := range b.codes {
		b.rank[k] = uint32(r)
	}
	// Counting sort by tenant: ends[r] is where tenant r's rows end.
	b.ends = slices.Grow(b.ends[:0], len(b.codes))[:len(b.codes)]
	clear(b.ends)
	for _, k := range tenants {
		b.ends[b.rank[k]]++
	}
	next := b.next[:0]
	at := 0
	for r := range b.ends {
		next = append(next, at)
		at += b.ends[r]
		b.ends[r] = at
	}
	b.next = next
	b.keys = slices.Grow(b.keys[:0], len(tenants))[:len(tenants)]
	for i, k := range tenants {
		r := b.rank[k]
		b.keys[next[r]] = sortKey{start: uint32(c.StartSeconds[i]), row: int32(i), id: c.IDs[i]}
		next[r]++
	}
	byStartID := func(x, y sortKey) int {
		if x.start != y.start {
			return cmp.Compare(x.start, y.start)
		}
		return cmp.Compare(x.id, y.id)
	}
	byID := func(x, y sortKey) int { return cmp.Compare(x.id, y.id) }
	lo := 0
	for _, hi := range b.ends {
		group := b.keys[lo:hi]
		lo = hi
		if !slices.IsSortedFunc(group, func(x, y sortKey) int { return cmp.Compare(x.start, y.start) }) {
			slices.SortFunc(group, byStartID)
			continue
		}
		for i := 0; i < len(group); {
			j := i + 1
			for j < len(group) && group[j].start == group[i].start {
				j++
			}
			if j-i > 1 {
				slices.SortFunc(group[i:j], byID)
			}
			i = j
		}
	}
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
	return s.eachRow(ctx, "scan samples", "SELECT "+sampleColumns+" FROM usage_samples FINAL"+
		" WHERE start >= ? AND start < ? AND end > ? AND has(?, gpu_uuid)",
		[]any{earliest.UTC(), to.UTC(), from.UTC(), gpuUUIDs}, func(scan scanFunc) error {
			var x collectors.Sample
			var unmeasured uint8
			dest := meterDest([]any{&x.ID, &x.Host, &x.GPUUUID, &x.GPUModel, &x.MIGUUID, &x.MIGProfile, &x.SKU,
				&x.Tenant, &x.Department, &x.Workload, &x.Start, &x.End}, &x.Values)
			if err := scan(append(dest, &unmeasured)...); err != nil {
				return err
			}
			x.Unmeasured = meter.Unmeasured(unmeasured)
			x.Start, x.End = x.Start.UTC(), x.End.UTC()
			return fn(x)
		})
}
