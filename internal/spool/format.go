package spool

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

// On-disk format (docs/delivery.md has the picture). All integers
// little-endian. Payload version 2 appends the unmeasured flags to each
// sample; version 1 payloads (without them) still decode.
//
//	segment  = header record*
//	header   = "GMSG" version:u16 flags:u16 seq:u64 crc:u32        (20 bytes)
//	record   = "GMRC" len:u32 rows:u32 crc:u32 payload[len]        (16 + len)
//	payload  = version:u8 nstrings:uvarint (len:uvarint bytes)*
//	           nsamples:uvarint sample*
//	sample   = id:u64 9×string-index:uvarint start end 9×quantity:uvarint
//	           unmeasured:uvarint                                  (v2 only)
//	start    = seconds:zigzag-varint nanos:uvarint
//	end      = seconds-after-start:zigzag-varint nanos:uvarint
//
// The header CRC covers its first 16 bytes; the record CRC (CRC32C) covers
// len, rows and the payload, so a torn length is caught too. The record
// magic lets a reader find the next whole record after a corrupt one.
const (
	segMagic      = "GMSG"
	segVersion    = 1
	segHeaderLen  = 20
	recMagic      = "GMRC"
	recHeaderLen  = 16
	payloadV1     = 1
	payloadV2     = 2
	segFileSuffix = ".seg"

	// payloadMeters is how many meters payloads v1 and v2 carry, in
	// collectors.Meter order. A new meter needs a new payload version that
	// writes it (and reads old ones with this many): the check below stops
	// the build until then.
	payloadMeters = 9

	// maxPayloadBytes caps one record whatever a header claims, so a
	// corrupt length never turns into a huge allocation.
	maxPayloadBytes = 1 << 30
	// minSampleBytes is the smallest encoding of one sample: the id, nine
	// one-byte string indexes, four one-byte time fields, nine one-byte
	// quantities. It bounds a decoded count by the bytes present.
	minSampleBytes = 8 + 9 + 4 + 9
)

// A new meter in collectors.Meters fails this line until the payload
// format carries it (see payloadMeters).
var _ = [1]struct{}{}[collectors.NumMeters-payloadMeters]

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeSegmentHeader(seq uint64) []byte {
	h := make([]byte, segHeaderLen)
	copy(h[0:4], segMagic)
	binary.LittleEndian.PutUint16(h[4:6], segVersion)
	binary.LittleEndian.PutUint64(h[8:16], seq)
	binary.LittleEndian.PutUint32(h[16:20], crc32.Checksum(h[:16], castagnoli))
	return h
}

// parseSegmentHeader checks a segment header and returns its sequence
// number. Errors wrap ErrCorruptSegment.
func parseSegmentHeader(h []byte) (uint64, error) {
	if len(h) < segHeaderLen {
		return 0, fmt.Errorf("segment header: %d of %d bytes: %w", len(h), segHeaderLen, ErrCorruptSegment)
	}
	if string(h[0:4]) != segMagic {
		return 0, fmt.Errorf("segment header: bad magic %q: %w", h[0:4], ErrCorruptSegment)
	}
	if got, want := binary.LittleEndian.Uint32(h[16:20]), crc32.Checksum(h[:16], castagnoli); got != want {
		return 0, fmt.Errorf("segment header: crc %08x, want %08x: %w", got, want, ErrCorruptSegment)
	}
	if v := binary.LittleEndian.Uint16(h[4:6]); v != segVersion {
		return 0, fmt.Errorf("segment header: version %d, this build reads %d: %w", v, segVersion, ErrCorruptSegment)
	}
	return binary.LittleEndian.Uint64(h[8:16]), nil
}

// recordHeader is a parsed record header; the CRC is checked with the payload.
type recordHeader struct {
	payloadLen uint32
	rows       uint32
	crc        uint32
}

func parseRecordHeader(h []byte) (recordHeader, error) {
	if len(h) < recHeaderLen {
		return recordHeader{}, fmt.Errorf("record header: %d of %d bytes: %w", len(h), recHeaderLen, ErrCorruptSegment)
	}
	if string(h[0:4]) != recMagic {
		return recordHeader{}, fmt.Errorf("record header: bad magic %q: %w", h[0:4], ErrCorruptSegment)
	}
	rh := recordHeader{
		payloadLen: binary.LittleEndian.Uint32(h[4:8]),
		rows:       binary.LittleEndian.Uint32(h[8:12]),
		crc:        binary.LittleEndian.Uint32(h[12:16]),
	}
	if rh.payloadLen > maxPayloadBytes {
		return recordHeader{}, fmt.Errorf("record header: length %d over %d: %w", rh.payloadLen, maxPayloadBytes, ErrCorruptSegment)
	}
	if rh.rows == 0 || uint64(rh.rows)*minSampleBytes > uint64(rh.payloadLen) {
		return recordHeader{}, fmt.Errorf("record header: %d rows cannot fit in %d bytes: %w", rh.rows, rh.payloadLen, ErrCorruptSegment)
	}
	return rh, nil
}

// recordCRC is the checksum stored in a record header: len, rows, payload.
func recordCRC(h []byte, payload []byte) uint32 {
	c := crc32.Update(0, castagnoli, h[4:12])
	return crc32.Update(c, castagnoli, payload)
}

// encoder turns a batch into one record. It reuses its buffers, so one
// encoder serves one goroutine.
type encoder struct {
	index map[string]uint64
	strs  []string
	body  []byte
	out   []byte
}

// encode returns the whole record (header and payload). The slice is valid
// until the next call.
func (e *encoder) encode(samples []collectors.Sample) ([]byte, error) {
	if len(samples) == 0 || len(samples) > math.MaxUint32 {
		return nil, fmt.Errorf("encode batch: %d samples", len(samples))
	}
	if e.index == nil {
		e.index = make(map[string]uint64)
	}
	clear(e.index)
	e.strs = e.strs[:0]
	b := e.body[:0]
	for i := range samples {
		s := &samples[i]
		b = binary.LittleEndian.AppendUint64(b, s.ID)
		for _, str := range [...]string{s.Host, s.GPUUUID, s.GPUModel, s.MIGUUID, s.MIGProfile, s.SKU, s.Tenant, s.Department, s.Workload} {
			b = binary.AppendUvarint(b, e.intern(str))
		}
		startSec := s.Start.Unix()
		b = binary.AppendVarint(b, startSec)
		b = binary.AppendUvarint(b, uint64(s.Start.Nanosecond()))
		// Wrapping subtraction is fine: decoding adds it back the same way.
		b = binary.AppendVarint(b, s.End.Unix()-startSec)
		b = binary.AppendUvarint(b, uint64(s.End.Nanosecond()))
		for _, q := range s.Values() {
			b = binary.AppendUvarint(b, q)
		}
		b = binary.AppendUvarint(b, uint64(s.Unmeasured))
	}
	e.body = b

	var header [recHeaderLen]byte // filled in once the payload length is known
	out := append(e.out[:0], header[:]...)
	out = append(out, payloadV2)
	out = binary.AppendUvarint(out, uint64(len(e.strs)))
	for _, str := range e.strs {
		out = binary.AppendUvarint(out, uint64(len(str)))
		out = append(out, str...)
	}
	out = binary.AppendUvarint(out, uint64(len(samples)))
	out = append(out, b...)
	e.out = out

	payloadLen := len(out) - recHeaderLen
	if payloadLen > maxPayloadBytes {
		return nil, fmt.Errorf("encode batch: %d bytes over %d: %w", payloadLen, maxPayloadBytes, ErrBatchTooLarge)
	}
	copy(out[0:4], recMagic)
	binary.LittleEndian.PutUint32(out[4:8], uint32(payloadLen))
	binary.LittleEndian.PutUint32(out[8:12], uint32(len(samples)))
	binary.LittleEndian.PutUint32(out[12:16], recordCRC(out, out[recHeaderLen:]))
	return out, nil
}

// intern returns the string-table index of s, adding it on first use: a
// batch repeats host, GPU, SKU and tenant on nearly every row.
func (e *encoder) intern(s string) uint64 {
	if i, ok := e.index[s]; ok {
		return i
	}
	i := uint64(len(e.strs))
	e.index[s] = i
	e.strs = append(e.strs, s)
	return i
}

// decodeBatch decodes a payload whose CRC already matched. A payload that
// is not a whole, canonical v1 or v2 batch of exactly rows samples is an error
// wrapping ErrCorruptSegment; it never panics and never allocates more
// than the payload can justify.
func decodeBatch(payload []byte, rows uint32) ([]collectors.Sample, error) {
	d := decoder{b: payload}
	version := d.byte()
	if d.err == nil && version != payloadV1 && version != payloadV2 {
		return nil, fmt.Errorf("decode batch: payload version %d, this build reads %d and %d: %w", version, payloadV1, payloadV2, ErrCorruptSegment)
	}
	nstr := d.count(1)
	strs := make([]string, 0, nstr)
	for i := uint64(0); i < nstr && d.err == nil; i++ {
		strs = append(strs, string(d.bytes(d.count(1))))
	}
	n := d.count(minSampleBytes)
	if d.err == nil && n != uint64(rows) {
		return nil, fmt.Errorf("decode batch: %d samples, header says %d: %w", n, rows, ErrCorruptSegment)
	}
	out := make([]collectors.Sample, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		var s collectors.Sample
		s.ID = d.u64()
		for _, p := range [...]*string{&s.Host, &s.GPUUUID, &s.GPUModel, &s.MIGUUID, &s.MIGProfile, &s.SKU, &s.Tenant, &s.Department, &s.Workload} {
			*p = d.str(strs)
		}
		startSec := d.varint()
		startNsec := d.nanos()
		endSec := startSec + d.varint()
		endNsec := d.nanos()
		s.Start = time.Unix(startSec, startNsec).UTC()
		s.End = time.Unix(endSec, endNsec).UTC()
		for m := range collectors.Meter(payloadMeters) {
			*s.Ptr(m) = d.uvarint()
		}
		if version >= payloadV2 {
			u := d.uvarint()
			if u > uint64(collectors.UnmeasuredAll) && d.err == nil {
				d.fail(fmt.Sprintf("unmeasured flags %#x", u))
			}
			s.Unmeasured = collectors.Unmeasured(u)
		}
		out = append(out, s)
	}
	if d.err != nil {
		return nil, fmt.Errorf("decode batch: %w", d.err)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("decode batch: %d trailing bytes: %w", len(d.b), ErrCorruptSegment)
	}
	return out, nil
}

// decoder reads a payload with a sticky error, so decodeBatch reads
// straight through and checks once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%s at %d bytes from the end: %w", what, len(d.b), ErrCorruptSegment)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("short byte")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) u64() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("short id")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length or count and refuses one that the remaining bytes
// cannot hold at unit bytes per item.
func (d *decoder) count(unit uint64) uint64 {
	v := d.uvarint()
	if d.err == nil && v > uint64(len(d.b))/unit {
		d.fail(fmt.Sprintf("count %d too large", v))
		return 0
	}
	return v
}

func (d *decoder) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) str(table []string) string {
	i := d.uvarint()
	if d.err != nil {
		return ""
	}
	if i >= uint64(len(table)) {
		d.fail(fmt.Sprintf("string index %d of %d", i, len(table)))
		return ""
	}
	return table[i]
}

func (d *decoder) nanos() int64 {
	v := d.uvarint()
	if d.err == nil && v >= uint64(time.Second) {
		d.fail(fmt.Sprintf("nanoseconds %d", v))
		return 0
	}
	return int64(v)
}
