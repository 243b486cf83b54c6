package spool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// readFull reads len(p) bytes at off. Bytes that are not there are a
// corrupt (short) segment, not an I/O failure.
func readFull(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("short read: %d of %d bytes at %d: %w", n, len(p), off, ErrCorruptSegment)
	}
	return fmt.Errorf("read %d bytes at %d: %w", len(p), off, err)
}

// readRecordAt reads and checks the record at off, which must end by end.
// The payload is read into *buf (grown as needed). Errors wrapping
// ErrCorruptSegment mean the bytes there are not a whole record.
func readRecordAt(r io.ReaderAt, off, end int64, buf *[]byte) (recordHeader, []byte, error) {
	if end-off < recHeaderLen {
		return recordHeader{}, nil, fmt.Errorf("partial record header, %d bytes: %w", end-off, ErrCorruptSegment)
	}
	var h [recHeaderLen]byte
	if err := readFull(r, h[:], off); err != nil {
		return recordHeader{}, nil, err
	}
	rh, err := parseRecordHeader(h[:])
	if err != nil {
		return recordHeader{}, nil, err
	}
	if int64(rh.payloadLen) > end-off-recHeaderLen {
		return recordHeader{}, nil, fmt.Errorf("partial payload, %d of %d bytes: %w", end-off-recHeaderLen, rh.payloadLen, ErrCorruptSegment)
	}
	if cap(*buf) < int(rh.payloadLen) {
		*buf = make([]byte, rh.payloadLen)
	}
	payload := (*buf)[:rh.payloadLen]
	if err := readFull(r, payload, off+recHeaderLen); err != nil {
		return recordHeader{}, nil, err
	}
	if got := recordCRC(h[:], payload); got != rh.crc {
		return recordHeader{}, nil, fmt.Errorf("crc %08x, header says %08x: %w", got, rh.crc, ErrCorruptSegment)
	}
	return rh, payload, nil
}

// findNextRecord looks for the first whole record starting in [from, end):
// after a corrupt record the length field cannot be trusted, so the reader
// searches for the record magic and accepts a candidate only when its CRC
// matches.
func findNextRecord(r io.ReaderAt, from, end int64, buf *[]byte) (int64, bool, error) {
	const window = 64 << 10
	var w []byte
	for pos := from; end-pos >= recHeaderLen; {
		n := min(int64(window), end-pos)
		if w == nil {
			w = make([]byte, n)
		}
		if err := readFull(r, w[:n], pos); err != nil {
			return 0, false, err
		}
		chunk := w[:n]
		for i := 0; ; {
			j := bytes.Index(chunk[i:], []byte(recMagic))
			if j < 0 {
				break
			}
			cand := pos + int64(i+j)
			_, _, err := readRecordAt(r, cand, end, buf)
			if err == nil {
				return cand, true, nil
			}
			if !errors.Is(err, ErrCorruptSegment) {
				return 0, false, err
			}
			i += j + 1
		}
		if pos+n >= end {
			break
		}
		// Overlap windows so a magic split across two is still seen.
		pos += n - int64(len(recMagic)-1)
	}
	return 0, false, nil
}

// scanRecords walks the whole records of a segment from start to end,
// calling fn for each, and resynchronises past corrupt regions. validEnd
// is the end of the last whole record: anything after it is a torn tail.
// corrupt counts the corrupt regions that have whole records after them.
func scanRecords(r io.ReaderAt, start, end int64, buf *[]byte, fn func(off int64, rh recordHeader)) (validEnd int64, corrupt int, err error) {
	off := start
	for off < end {
		rh, _, err := readRecordAt(r, off, end, buf)
		if err != nil {
			if !errors.Is(err, ErrCorruptSegment) {
				return off, corrupt, err
			}
			next, found, ferr := findNextRecord(r, off+1, end, buf)
			if ferr != nil {
				return off, corrupt, ferr
			}
			if !found {
				return off, corrupt, nil
			}
			corrupt++
			off = next
			continue
		}
		fn(off, rh)
		off += recHeaderLen + int64(rh.payloadLen)
	}
	return off, corrupt, nil
}

// tailKind is what classifyTail found at the end of the last segment.
type tailKind struct {
	torn      bool   // a crash cut the last write short: nothing acknowledged is in it
	rows      int64  // corrupt: the rows the header claims, when that is plausible
	rowsKnown bool   // rows is meaningful
	why       string // what decided
}

func (k tailKind) rowsText() string {
	if !k.rowsKnown {
		return "unknown"
	}
	return strconv.FormatInt(k.rows, 10)
}

// Unwritten sectors: a file system that extended the file but never wrote
// some of its blocks (a crash during write-back) reads them as zeros. An
// encoded batch never holds tornZeroRun zero bytes from a sector boundary
// to the sector's (or file's) end: every sample has a non-zero id or time
// byte every 30-odd bytes.
const (
	sectorBytes = 512
	tornZeroRun = 32
)

// classifyTail decides whether the bytes from off (the end of the last
// whole record, with no whole record after it) to size are a torn write or
// corruption. A torn write leaves the file short of the record's declared
// length, or zeros where the data never landed; bit rot and stray writes
// leave all the bytes there, wrong. So: a partial header, an all-zero
// header, or a record header whose declared length runs past the end of
// the file is torn; so is a record holding an unwritten (zero) sector
// within its declared length.
// Anything else, a whole-length record whose CRC fails, or a damaged
// header, is corrupt. One exception is checked by CRC: a record whose
// length field alone was damaged (it then seems to run past the end, but
// its checksum matches the bytes that are there) is corrupt.
func classifyTail(r io.ReaderAt, off, size int64) (tailKind, error) {
	rem := size - off
	if rem < recHeaderLen {
		return tailKind{torn: true, why: "partial record header"}, nil
	}
	data := make([]byte, rem)
	if err := readFull(r, data, off); err != nil {
		return tailKind{}, err
	}
	h := data[:recHeaderLen]
	if allZero(h) {
		return tailKind{torn: true, why: "zeros where the record header belongs"}, nil
	}
	plen := int64(binary.LittleEndian.Uint32(h[4:8]))
	rows := int64(binary.LittleEndian.Uint32(h[8:12]))
	crc := binary.LittleEndian.Uint32(h[12:16])
	kind := tailKind{rows: rows, rowsKnown: rows > 0 && rows*minSampleBytes <= min(plen, rem-recHeaderLen)}
	if string(h[0:4]) == recMagic && plen <= maxPayloadBytes && recHeaderLen+plen > rem {
		var fixed [recHeaderLen]byte
		copy(fixed[:], h)
		binary.LittleEndian.PutUint32(fixed[4:8], uint32(rem-recHeaderLen))
		if recordCRC(fixed[:], data[recHeaderLen:]) != crc {
			return tailKind{torn: true, why: fmt.Sprintf("file ends %d bytes short of the record's declared length", recHeaderLen+plen-rem)}, nil
		}
		kind.why = "record length field damaged (the checksum matches the bytes there)"
		return kind, nil
	}
	// Only the first record's own bytes decide: a whole record after it
	// that was torn says nothing about whether this one rotted.
	end := size
	if string(h[0:4]) == recMagic && plen <= maxPayloadBytes {
		end = off + recHeaderLen + plen
	}
	for s := (off + sectorBytes - 1) / sectorBytes * sectorBytes; s < end; s += sectorBytes {
		run := data[s-off : min(s+sectorBytes, end)-off]
		if len(run) >= tornZeroRun && allZero(run) {
			return tailKind{torn: true, why: fmt.Sprintf("unwritten (zero) sector at %d", s)}, nil
		}
	}
	switch {
	case string(h[0:4]) != recMagic:
		kind.why = "record header damaged (bad magic)"
	case plen > maxPayloadBytes:
		kind.why = "record header damaged (length out of range)"
	default:
		kind.why = "whole record, checksum or header fields wrong"
	}
	return kind, nil
}

// claimedRows estimates the rows lost in a skipped region [from, to): it
// adds the rows of each record header there, following declared lengths
// while they stay inside the region, as long as the count is plausible
// for the bytes. The first header may have a damaged magic (that may be
// the very damage); later ones must have the record magic. It is a lower
// bound: a region whose first header is unreadable counts nothing.
func claimedRows(r io.ReaderAt, from, to int64) (int64, error) {
	var total int64
	var h [recHeaderLen]byte
	for off := from; to-off >= recHeaderLen; {
		if err := readFull(r, h[:], off); err != nil {
			return total, err
		}
		if off != from && string(h[0:4]) != recMagic {
			break
		}
		plen := int64(binary.LittleEndian.Uint32(h[4:8]))
		rows := int64(binary.LittleEndian.Uint32(h[8:12]))
		if rows == 0 || rows*minSampleBytes > min(plen, to-off-recHeaderLen) {
			break
		}
		total += rows
		off += recHeaderLen + plen
	}
	return total, nil
}
