package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
)

// Position is a place in the spool: a segment and a byte offset in it.
// The committed cursor is a Position: every batch before it was delivered.
type Position struct {
	Segment uint64
	Offset  int64

	// rows counts the rows of Segment before Offset; the reader fills it in
	// so that committing keeps the backlog gauge exact without a rescan.
	rows int64
}

// Before reports whether p lies before q.
func (p Position) Before(q Position) bool {
	if p.Segment != q.Segment {
		return p.Segment < q.Segment
	}
	return p.Offset < q.Offset
}

func (p Position) String() string { return fmt.Sprintf("%d:%d", p.Segment, p.Offset) }

// Cursor file: "GMCR" version:u16 flags:u16 segment:u64 offset:u64 crc:u32.
const (
	cursorFile    = "cursor"
	cursorTmpFile = "cursor.tmp"
	cursorMagic   = "GMCR"
	cursorVersion = 1
	cursorLen     = 28
)

func encodeCursor(p Position) []byte {
	b := make([]byte, cursorLen)
	copy(b[0:4], cursorMagic)
	binary.LittleEndian.PutUint16(b[4:6], cursorVersion)
	binary.LittleEndian.PutUint64(b[8:16], p.Segment)
	binary.LittleEndian.PutUint64(b[16:24], uint64(p.Offset))
	binary.LittleEndian.PutUint32(b[24:28], crc32.Checksum(b[:24], castagnoli))
	return b
}

func decodeCursor(b []byte) (Position, error) {
	if len(b) != cursorLen || string(b[0:4]) != cursorMagic {
		return Position{}, fmt.Errorf("cursor: not a cursor file (%d bytes): %w", len(b), ErrCorruptSegment)
	}
	if got, want := binary.LittleEndian.Uint32(b[24:28]), crc32.Checksum(b[:24], castagnoli); got != want {
		return Position{}, fmt.Errorf("cursor: crc %08x, want %08x: %w", got, want, ErrCorruptSegment)
	}
	if v := binary.LittleEndian.Uint16(b[4:6]); v != cursorVersion {
		return Position{}, fmt.Errorf("cursor: version %d, this build reads %d: %w", v, cursorVersion, ErrCorruptSegment)
	}
	off := binary.LittleEndian.Uint64(b[16:24])
	if off > 1<<62 {
		return Position{}, fmt.Errorf("cursor: offset %d: %w", off, ErrCorruptSegment)
	}
	return Position{Segment: binary.LittleEndian.Uint64(b[8:16]), Offset: int64(off)}, nil
}

// readCursor returns the committed cursor; a spool that never committed
// starts at the zero Position, which lies before every segment.
func readCursor(dir string) (Position, error) {
	b, err := os.ReadFile(filepath.Join(dir, cursorFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Position{}, nil
	}
	if err != nil {
		return Position{}, fmt.Errorf("read cursor: %w", err)
	}
	return decodeCursor(b)
}

// writeCursor replaces the cursor durably: write a temporary file, fsync
// it, rename it over the old one, fsync the directory. A crash at any
// point leaves either the old or the new cursor, never a torn one.
func writeCursor(dir string, p Position) error {
	tmp := filepath.Join(dir, cursorTmpFile)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("write cursor %s: %w", p, err)
	}
	if _, err := f.Write(encodeCursor(p)); err != nil {
		f.Close()
		return fmt.Errorf("write cursor %s: %w", p, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync cursor %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close cursor %s: %w", p, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, cursorFile)); err != nil {
		return fmt.Errorf("rename cursor %s: %w", p, err)
	}
	return syncDir(dir)
}

// syncDir makes creations, renames and removals in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
