package spool

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// On-disk format (docs/delivery.md has the picture). All integers
// little-endian. Payload version 2 appends the unmeasured flags to each
// sample; version 3 also says how many meters each sample carries, so a
// meter added to the meter table changes no format: payloads written
// before it decode with it zero and marked unmeasured. Versions 1 and 2
// (nine meters; v1 without flags) still decode.
//
//	segment  = header record*
//	header   = "GMSG" version:u16 flags:u16 seq:u64 crc:u32        (20 bytes)
//	record   = "GMRC" len:u32 rows:u32 crc:u32 payload[len]        (16 + len)
//	payload  = version:u8 [nmeters:uvarint (v3)] nstrings:uvarint
//	           (len:uvarint bytes)* nsamples:uvarint sample*
//	sample   = id:u64 9×string-index:uvarint start end
//	           nmeters×quantity:uvarint (9 before v3)
//	           unmeasured:uvarint                                  (v2, v3)
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
	payloadV3     = 3
	segFileSuffix = ".seg"

	// legacyPayloadMeters is how many meters payloads v1 and v2 carry, in
	// meter.ID order; v3 payloads say how many they carry.
	legacyPayloadMeters = 9

	// maxPayloadBytes caps one record whatever a header claims, so a
	// corrupt length never turns into a huge allocation.
	maxPayloadBytes = 1 << 30
	// minSampleBytes is the smallest encoding of one sample of one meter:
	// the id, nine one-byte string indexes, four one-byte time fields, a
	// one-byte quantity; each further meter adds at least a byte. It
	// bounds a decoded count by the bytes present.
	minSampleBytes = 8 + 9 + 4 + 1
)

// The meter table only grows (a meter's place is part of every payload),
// so every payload ever written carries at most meter.Count meters (a
// negative array length does not compile).
var _ [meter.Count - legacyPayloadMeters]struct{}

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
	// last holds, per string column, the value of the row before and its
	// index: most columns repeat from row to row, and comparing with the
	// last value is cheaper than a map lookup.
	last [9]struct {
		s  string
		i  uint64
		ok bool
	}
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
	e.last = [len(e.last)]struct {
		s  string
		i  uint64
		ok bool
	}{}
	b := e.body[:0]
	for i := range samples {
		s := &samples[i]
		b = binary.LittleEndian.AppendUint64(b, s.ID)
		for j, str := range [...]string{s.Host, s.GPUUUID, s.GPUModel, s.MIGUUID, s.MIGProfile, s.SKU, s.Tenant, s.Department, s.Workload} {
			l := &e.last[j]
			if !l.ok || str != l.s {
				l.s, l.i, l.ok = str, e.intern(str), true
			}
			b = binary.AppendUvarint(b, l.i)
		}
		startSec := s.Start.Unix()
		b = binary.AppendVarint(b, startSec)
		b = binary.AppendUvarint(b, uint64(s.Start.Nanosecond()))
		// Wrapping subtraction is fine: decoding adds it back the same way.
		b = binary.AppendVarint(b, s.End.Unix()-startSec)
		b = binary.AppendUvarint(b, uint64(s.End.Nanosecond()))
		for _, q := range s.Array() {
			b = binary.AppendUvarint(b, q)
		}
		b = binary.AppendUvarint(b, uint64(s.Unmeasured))
	}
	e.body = b

	var header [recHeaderLen]byte // filled in once the payload length is known
	out := append(e.out[:0], header[:]...)
	out = append(out, payloadV3)
	out = binary.AppendUvarint(out, uint64(meter.Count))
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

// decodeBatch decodes a payload whose CRC already matched into samples
// (decodeColumns has the rules; the shipper decodes into Columns directly).
func decodeBatch(payload []byte, rows uint32) ([]collectors.Sample, error) {
	var c Columns
	if err := decodeColumns(payload, rows, &c); err != nil {
		return nil, err
	}
	return c.Samples(), nil
}
