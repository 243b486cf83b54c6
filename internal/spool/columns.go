package spool

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// The string columns of Columns, in the order of the segment format and of
// the usage_samples columns.
const (
	ColHost = iota
	ColGPUUUID
	ColGPUModel
	ColMIGUUID
	ColMIGProfile
	ColSKU
	ColTenant
	ColDepartment
	ColWorkload
	NumStringColumns
)

// Columns holds spooled samples column by column; row i of every column is
// one sample. The shipper decodes the spool straight into it for a
// ColumnSink, so an insert builds no collectors.Sample values, and the
// strings that repeat on nearly every row (host, model, SKU, tenant) are
// kept once, in Dict, with a small index per row that the garbage
// collector does not need to scan.
type Columns struct {
	IDs []uint64
	// Strings[c][i] is the index in Dict of string column c of row i.
	Strings [NumStringColumns][]uint32
	// Dict holds each distinct string once.
	Dict []string
	// StartSeconds and EndSeconds are Unix seconds; StartNanos and EndNanos
	// the nanoseconds within them (below 1e9).
	StartSeconds, EndSeconds []int64
	StartNanos, EndNanos     []uint32
	// Meters[m] is meter m in meter.ID order.
	Meters     [meter.Count][]uint64
	Unmeasured []uint8

	index map[string]uint32 // Dict's inverse
	table []uint32          // one record's string table, as Dict indexes
}

// Len is the number of rows.
func (c *Columns) Len() int { return len(c.IDs) }

// Reset empties c and keeps its buffers for reuse.
func (c *Columns) Reset() {
	c.truncate(0)
	clear(c.Dict) // let the strings go
	c.Dict = c.Dict[:0]
	clear(c.index)
}

// truncate keeps the first n rows.
func (c *Columns) truncate(n int) {
	c.IDs = c.IDs[:n]
	for i := range c.Strings {
		c.Strings[i] = c.Strings[i][:n]
	}
	c.StartSeconds, c.EndSeconds = c.StartSeconds[:n], c.EndSeconds[:n]
	c.StartNanos, c.EndNanos = c.StartNanos[:n], c.EndNanos[:n]
	for i := range c.Meters {
		c.Meters[i] = c.Meters[i][:n]
	}
	c.Unmeasured = c.Unmeasured[:n]
}

// View returns rows [lo, hi) of c, sharing its memory (and Dict).
func (c *Columns) View(lo, hi int) Columns {
	v := Columns{
		IDs:          c.IDs[lo:hi:hi],
		Dict:         c.Dict,
		StartSeconds: c.StartSeconds[lo:hi:hi], EndSeconds: c.EndSeconds[lo:hi:hi],
		StartNanos: c.StartNanos[lo:hi:hi], EndNanos: c.EndNanos[lo:hi:hi],
		Unmeasured: c.Unmeasured[lo:hi:hi],
	}
	for i := range c.Strings {
		v.Strings[i] = c.Strings[i][lo:hi:hi]
	}
	for i := range c.Meters {
		v.Meters[i] = c.Meters[i][lo:hi:hi]
	}
	return v
}

// deleteRows removes rows [lo, hi).
func (c *Columns) deleteRows(lo, hi int) {
	c.IDs = slices.Delete(c.IDs, lo, hi)
	for i := range c.Strings {
		c.Strings[i] = slices.Delete(c.Strings[i], lo, hi)
	}
	c.StartSeconds, c.EndSeconds = slices.Delete(c.StartSeconds, lo, hi), slices.Delete(c.EndSeconds, lo, hi)
	c.StartNanos, c.EndNanos = slices.Delete(c.StartNanos, lo, hi), slices.Delete(c.EndNanos, lo, hi)
	for i := range c.Meters {
		c.Meters[i] = slices.Delete(c.Meters[i], lo, hi)
	}
	c.Unmeasured = slices.Delete(c.Unmeasured, lo, hi)
}

// Start and End return the interval of row i, in UTC.
func (c *Columns) Start(i int) time.Time {
	return time.Unix(c.StartSeconds[i], int64(c.StartNanos[i])).UTC()
}

func (c *Columns) End(i int) time.Time {
	return time.Unix(c.EndSeconds[i], int64(c.EndNanos[i])).UTC()
}

// Row returns row i as a sample.
func (c *Columns) Row(i int) collectors.Sample {
	d := c.Dict
	var v [meter.Count]uint64
	for j := range v {
		v[j] = c.Meters[j][i]
	}
	return collectors.Sample{
		ID:         c.IDs[i],
		Host:       d[c.Strings[ColHost][i]],
		GPUUUID:    d[c.Strings[ColGPUUUID][i]],
		GPUModel:   d[c.Strings[ColGPUModel][i]],
		MIGUUID:    d[c.Strings[ColMIGUUID][i]],
		MIGProfile: d[c.Strings[ColMIGProfile][i]],
		SKU:        d[c.Strings[ColSKU][i]],
		Tenant:     d[c.Strings[ColTenant][i]],
		Department: d[c.Strings[ColDepartment][i]],
		Workload:   d[c.Strings[ColWorkload][i]],
		Start:      c.Start(i),
		End:        c.End(i),
		Values:     meter.FromArray(v),
		Unmeasured: meter.Unmeasured(c.Unmeasured[i]),
	}
}

// Validate is collectors.Sample.Validate for every row, without building
// a Sample per row (the store validates every insert, and Row is most of
// that cost): each row gets a conservative check of its columns, and only a
// row that fails it is built and validated, for the error. The error names
// the first invalid row's index and id.
func (c *Columns) Validate() error {
	d := c.Dict
	host, gpu, sku := c.Strings[ColHost], c.Strings[ColGPUUUID], c.Strings[ColSKU]
	tenant, workload := c.Strings[ColTenant], c.Strings[ColWorkload]
	for i := range c.Len() {
		ss, es := c.StartSeconds[i], c.EndSeconds[i]
		// Whole seconds bound the times (nanoseconds below a second, as
		// the decoder and AppendSamples leave them; Row would carry more
		// into the seconds): es > ss puts End after Start
		// whatever the nanoseconds, es − ss < maxIntervalSeconds keeps the
		// interval under MaxInterval, and ss ≥ 0, es < maxStorableSecond
		// keep both within [MinTime, MaxTime].
		if c.IDs[i] != 0 && d[host[i]] != "" && d[gpu[i]] != "" && d[sku[i]] != "" &&
			c.StartNanos[i] < nanosPerSecond && c.EndNanos[i] < nanosPerSecond &&
			ss >= minStorableSecond && es > ss && es < maxStorableSecond && es-ss < maxIntervalSeconds &&
			meter.Unmeasured(c.Unmeasured[i])&^meter.UnmeasuredAll == 0 &&
			(d[tenant[i]] != "" || d[workload[i]] == "") {
			continue
		}
		if x := c.Row(i); x.Validate() != nil {
			return fmt.Errorf("sample %d (id %d): %w", i, x.ID, x.Validate())
		}
	}
	return nil
}

// The bounds of Validate's column check, in whole seconds.
var (
	minStorableSecond  = collectors.MinTime.Unix()
	maxStorableSecond  = collectors.MaxTime.Unix()
	maxIntervalSeconds = int64(collectors.MaxInterval / time.Second)
)

const nanosPerSecond = uint32(time.Second)

// AppendSamples adds samples as rows.
func (c *Columns) AppendSamples(samples []collectors.Sample) {
	base := c.Len()
	c.extend(len(samples))
	// Most string columns repeat the row before: compare with it before
	// looking the string up.
	var last [NumStringColumns]struct {
		s  string
		i  uint32
		ok bool
	}
	for n := range samples {
		x, i := &samples[n], base+n
		c.IDs[i] = x.ID
		for j, v := range [NumStringColumns]string{x.Host, x.GPUUUID, x.GPUModel, x.MIGUUID, x.MIGProfile, x.SKU, x.Tenant, x.Department, x.Workload} {
			l := &last[j]
			if !l.ok || v != l.s {
				l.s, l.i, l.ok = v, c.intern(v), true
			}
			c.Strings[j][i] = l.i
		}
		c.StartSeconds[i], c.StartNanos[i] = x.Start.Unix(), uint32(x.Start.Nanosecond())
		c.EndSeconds[i], c.EndNanos[i] = x.End.Unix(), uint32(x.End.Nanosecond())
		for j, v := range x.Array() {
			c.Meters[j][i] = v
		}
		c.Unmeasured[i] = uint8(x.Unmeasured)
	}
}

// Samples returns every row as a sample.
func (c *Columns) Samples() []collectors.Sample {
	out := make([]collectors.Sample, c.Len())
	for i := range out {
		out[i] = c.Row(i)
	}
	return out
}

// intern returns the Dict index of s, adding it on first use.
func (c *Columns) intern(s string) uint32 {
	if i, ok := c.index[s]; ok {
		return i
	}
	return c.add(s)
}

// internBytes is intern for a string still in a payload: a lookup does not
// allocate, only a string seen for the first time is copied.
func (c *Columns) internBytes(b []byte) uint32 {
	if i, ok := c.index[string(b)]; ok {
		return i
	}
	return c.add(string(b))
}

func (c *Columns) add(s string) uint32 {
	if c.index == nil {
		c.index = make(map[string]uint32)
	}
	i := uint32(len(c.Dict))
	c.Dict = append(c.Dict, s)
	c.index[s] = i
	return i
}

// extend adds n rows (of zeros, or of old contents) for the caller to
// write by index.
func (c *Columns) extend(n int) {
	c.IDs = extend(c.IDs, n)
	for i := range c.Strings {
		c.Strings[i] = extend(c.Strings[i], n)
	}
	c.StartSeconds, c.EndSeconds = extend(c.StartSeconds, n), extend(c.EndSeconds, n)
	c.StartNanos, c.EndNanos = extend(c.StartNanos, n), extend(c.EndNanos, n)
	for i := range c.Meters {
		c.Meters[i] = extend(c.Meters[i], n)
	}
	c.Unmeasured = extend(c.Unmeasured, n)
}

// Grow makes room for n more rows in every column without growing again,
// as slices.Grow does for one slice.
func (c *Columns) Grow(n int) {
	c.IDs = slices.Grow(c.IDs, n)
	for i := range c.Strings {
		c.Strings[i] = slices.Grow(c.Strings[i], n)
	}
	c.StartSeconds, c.EndSeconds = slices.Grow(c.StartSeconds, n), slices.Grow(c.EndSeconds, n)
	c.StartNanos, c.EndNanos = slices.Grow(c.StartNanos, n), slices.Grow(c.EndNanos, n)
	for i := range c.Meters {
		c.Meters[i] = slices.Grow(c.Meters[i], n)
	}
	c.Unmeasured = slices.Grow(c.Unmeasured, n)
}

// extend lengthens s by n, doubling its capacity when it must grow: a
// pending grows batch by batch to an insert's worth of rows, and append's
// gentler growth for large slices would copy it many times on the way.
func extend[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s[:len(s)+n]
	}
	t := make([]T, len(s)+n, max(2*cap(s), len(s)+n, 1024))
	copy(t, s)
	return t
}

// decodeColumns decodes a payload whose CRC already matched and appends its
// rows to c. A payload that is not a whole, canonical v1 or v2 batch of
// exactly rows samples is an error wrapping ErrCorruptSegment, and c keeps
// the rows it had; it never panics and never allocates more than the
// payload can justify.
//
// It reads with a plain offset and a single error path, and
// takes one-byte varints without a call: this loop is most of what the
// shipper spends per row.
func decodeColumns(payload []byte, rows uint32, c *Columns) error {
	b := payload
	if len(b) < 1 {
		return fmt.Errorf("decode batch: empty payload: %w", ErrCorruptSegment)
	}
	version := b[0]
	if version < payloadV1 || version > payloadV3 {
		return fmt.Errorf("decode batch: payload version %d, this build reads %d to %d: %w", version, payloadV1, payloadV3, ErrCorruptSegment)
	}
	p := 1
	nmeters := uint64(legacyPayloadMeters)
	if version >= payloadV3 {
		nmeters, p = uvarintAt(b, p)
		if p < 0 || nmeters == 0 || nmeters > uint64(meter.Count) {
			// More meters than this build knows: a newer build wrote it.
			return fmt.Errorf("decode batch: %d meters a sample, this build knows %d: %w", nmeters, meter.Count, ErrCorruptSegment)
		}
	}
	// Meters the payload predates are unmeasured in its samples, not 0.
	var absent meter.Unmeasured
	for m := int(nmeters); m < int(meter.Count); m++ {
		absent |= meter.Specs[m].Unmeasured
	}
	nstr, p := uvarintAt(b, p)
	if p < 0 || nstr > uint64(len(b)-p) {
		return corruptAt(b, p, "string count")
	}
	table := c.table[:0]
	for range nstr {
		var n uint64
		n, p = uvarintAt(b, p)
		if p < 0 || n > uint64(len(b)-p) {
			return corruptAt(b, p, "string length")
		}
		table = append(table, c.internBytes(b[p:p+int(n)]))
		p += int(n)
	}
	c.table = table
	n, p := uvarintAt(b, p)
	if p < 0 || n > uint64(len(b)-p)/(minSampleBytes-1+nmeters) {
		return corruptAt(b, p, "sample count")
	}
	if n != uint64(rows) {
		return fmt.Errorf("decode batch: %d samples, header says %d: %w", n, rows, ErrCorruptSegment)
	}
	base := c.Len()
	c.extend(int(n))
	fail := func(what string) error {
		c.truncate(base)
		return corruptAt(b, p, what)
	}
	ntable := uint64(len(table))
	// Each column is written by index into room made up front.
	ids := c.IDs[base:]
	var strs [NumStringColumns][]uint32
	for j := range strs {
		strs[j] = c.Strings[j][base:]
	}
	var meters [meter.Count][]uint64
	for m := range meters {
		meters[m] = c.Meters[m][base:]
		if m >= int(nmeters) {
			clear(meters[m][:n]) // room reused from earlier batches
		}
	}
	present := meters[:nmeters]
	startSecs, endSecs := c.StartSeconds[base:], c.EndSeconds[base:]
	startNanos, endNanos := c.StartNanos[base:], c.EndNanos[base:]
	unmeasured := c.Unmeasured[base:]
	for i := range int(n) {
		if len(b)-p < 8 {
			return fail("short id")
		}
		ids[i] = binary.LittleEndian.Uint64(b[p:])
		p += 8
		for j := range strs {
			var v uint64
			if x, ok := oneByte(b, p); ok {
				v, p = x, p+1
			} else {
				v, p = uvarintAt(b, p)
			}
			if p < 0 || v >= ntable {
				return fail("string index")
			}
			strs[j][i] = table[v]
		}
		var startSec, delta int64
		var startNsec, endNsec uint64
		startSec, p = varintAt(b, p)
		if p < 0 {
			return fail("start seconds")
		}
		startNsec, p = uvarintAt(b, p)
		if p < 0 || startNsec >= uint64(time.Second) {
			return fail("start nanoseconds")
		}
		delta, p = varintAt(b, p)
		if p < 0 {
			return fail("end seconds")
		}
		endNsec, p = uvarintAt(b, p)
		if p < 0 || endNsec >= uint64(time.Second) {
			return fail("end nanoseconds")
		}
		startSecs[i], startNanos[i] = startSec, uint32(startNsec)
		// Wrapping addition undoes the encoder's wrapping subtraction.
		endSecs[i], endNanos[i] = startSec+delta, uint32(endNsec)
		for m := range present {
			var v uint64
			if x, ok := oneByte(b, p); ok {
				v, p = x, p+1
			} else {
				v, p = uvarintAt(b, p)
			}
			if p < 0 {
				return fail("meter")
			}
			present[m][i] = v
		}
		var u uint64
		if version >= payloadV2 {
			u, p = uvarintAt(b, p)
			if p < 0 || u > uint64(meter.UnmeasuredAll) {
				return fail("unmeasured flags")
			}
		}
		unmeasured[i] = uint8(u) | uint8(absent)
	}
	if p != len(b) {
		c.truncate(base)
		return fmt.Errorf("decode batch: %d trailing bytes: %w", len(b)-p, ErrCorruptSegment)
	}
	return nil
}

// uvarintAt reads a uvarint at b[p:] and returns it with the offset after
// it, or p = -1 when there is none. It accepts what binary.Uvarint does,
// without slicing b for every value.
func uvarintAt(b []byte, p int) (uint64, int) {
	if p < 0 {
		return 0, -1
	}
	var x uint64
	var shift uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		if p >= len(b) {
			return 0, -1
		}
		c := b[p]
		p++
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, -1 // overflows 64 bits
			}
			return x | uint64(c)<<shift, p
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	return 0, -1
}

// oneByte returns the varint at b[p] when it takes one byte. The compiler
// inlines it, and not uvarintAt (nor any wrapper that calls it): the nine
// string indexes and most small quantities of a sample take one byte, so
// the two per-row loops over them try it first and call uvarintAt only for
// the longer ones.
func oneByte(b []byte, p int) (uint64, bool) {
	if uint(p) < uint(len(b)) && b[p] < 0x80 {
		return uint64(b[p]), true
	}
	return 0, false
}

// varintAt is uvarintAt for a zigzag varint.
func varintAt(b []byte, p int) (int64, int) {
	ux, p := uvarintAt(b, p)
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x, p
}

func corruptAt(b []byte, p int, what string) error {
	at := "the end"
	if p >= 0 {
		at = fmt.Sprintf("%d bytes from the end", len(b)-p)
	}
	return fmt.Errorf("decode batch: bad %s at %s: %w", what, at, ErrCorruptSegment)
}
