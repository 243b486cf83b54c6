package spool

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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
