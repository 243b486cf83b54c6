package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
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

// The cursor file (docs/delivery.md, "Cursor protocol") is preallocated
// once and then only overwritten in place, so committing needs no free
// space: on a full disk the shipper can still commit and so free the
// segments it shipped. It holds two slots, A at byte 0 and B at byte 4096
// (separate pages and sectors, so a torn write of one cannot touch the
// other). Each commit writes the slot that does not hold the newest state
// and fsyncs; a reader takes the valid slot with the highest generation.
//
//	slot (version 2, 44 bytes) = "GMCR" version:u16 flags:u16 gen:u64
//	                             segment:u64 offset:u64 floor:u64 crc:u32
//	v1 file (older builds, 28 bytes) = "GMCR" version:u16 flags:u16
//	                             segment:u64 offset:u64 crc:u32
//
// The CRC (CRC32C) covers the bytes before it. floor says that every
// segment numbered below it was deleted on purpose (shipped, or dropped by
// the overflow policy), so that recovery can tell those from lost ones.
const (
	cursorFile     = "cursor"
	cursorTmpFile  = "cursor.tmp"
	cursorMagic    = "GMCR"
	cursorV1       = 1
	cursorV1Len    = 28
	cursorV2       = 2
	cursorSlotLen  = 44
	cursorSlotSpan = 4096
	cursorFileLen  = 2 * cursorSlotSpan
	maxCursorOff   = 1 << 62
)

// cursorState is what the cursor file records.
type cursorState struct {
	pos   Position // rows is always 0 here
	floor uint64
}

func encodeCursorV1(p Position) []byte {
	b := make([]byte, cursorV1Len)
	copy(b[0:4], cursorMagic)
	binary.LittleEndian.PutUint16(b[4:6], cursorV1)
	binary.LittleEndian.PutUint64(b[8:16], p.Segment)
	binary.LittleEndian.PutUint64(b[16:24], uint64(p.Offset))
	binary.LittleEndian.PutUint32(b[24:28], crc32.Checksum(b[:24], castagnoli))
	return b
}

func encodeCursorSlot(gen uint64, st cursorState) []byte {
	b := make([]byte, cursorSlotLen)
	copy(b[0:4], cursorMagic)
	binary.LittleEndian.PutUint16(b[4:6], cursorV2)
	binary.LittleEndian.PutUint64(b[8:16], gen)
	binary.LittleEndian.PutUint64(b[16:24], st.pos.Segment)
	binary.LittleEndian.PutUint64(b[24:32], uint64(st.pos.Offset))
	binary.LittleEndian.PutUint64(b[32:40], st.floor)
	binary.LittleEndian.PutUint32(b[40:44], crc32.Checksum(b[:40], castagnoli))
	return b
}

// decodedSlot is one slot as read: a version 2 slot, or (v1) an older
// build's record, which knows no generation (0) and no floor.
type decodedSlot struct {
	gen uint64
	st  cursorState
	v1  bool
}

// decodeCursorSlot decodes the slot starting at b[0]. Errors wrap
// ErrCorruptSegment.
func decodeCursorSlot(b []byte) (decodedSlot, error) {
	if len(b) < cursorV1Len || string(b[0:4]) != cursorMagic {
		return decodedSlot{}, fmt.Errorf("cursor slot: not a cursor (%d bytes): %w", len(b), ErrCorruptSegment)
	}
	switch v := binary.LittleEndian.Uint16(b[4:6]); v {
	case cursorV1:
		if got, want := binary.LittleEndian.Uint32(b[24:28]), crc32.Checksum(b[:24], castagnoli); got != want {
			return decodedSlot{}, fmt.Errorf("cursor: crc %08x, want %08x: %w", got, want, ErrCorruptSegment)
		}
		off := binary.LittleEndian.Uint64(b[16:24])
		if off > maxCursorOff {
			return decodedSlot{}, fmt.Errorf("cursor: offset %d: %w", off, ErrCorruptSegment)
		}
		return decodedSlot{st: cursorState{pos: Position{Segment: binary.LittleEndian.Uint64(b[8:16]), Offset: int64(off)}}, v1: true}, nil
	case cursorV2:
		if len(b) < cursorSlotLen {
			return decodedSlot{}, fmt.Errorf("cursor slot: %d of %d bytes: %w", len(b), cursorSlotLen, ErrCorruptSegment)
		}
		if got, want := binary.LittleEndian.Uint32(b[40:44]), crc32.Checksum(b[:40], castagnoli); got != want {
			return decodedSlot{}, fmt.Errorf("cursor slot: crc %08x, want %08x: %w", got, want, ErrCorruptSegment)
		}
		off := binary.LittleEndian.Uint64(b[24:32])
		if off > maxCursorOff {
			return decodedSlot{}, fmt.Errorf("cursor slot: offset %d: %w", off, ErrCorruptSegment)
		}
		return decodedSlot{
			gen: binary.LittleEndian.Uint64(b[8:16]),
			st: cursorState{
				pos:   Position{Segment: binary.LittleEndian.Uint64(b[16:24]), Offset: int64(off)},
				floor: binary.LittleEndian.Uint64(b[32:40]),
			},
		}, nil
	default:
		return decodedSlot{}, fmt.Errorf("cursor: version %d, this build reads %d and %d: %w", v, cursorV1, cursorV2, ErrCorruptSegment)
	}
}

// cursorStore owns the cursor file. Its methods are safe for concurrent
// use: the shipper commits while the writer may raise the floor when the
// overflow policy drops a segment.
type cursorStore struct {
	dir string

	mu   sync.Mutex
	f    *os.File // nil until the file exists
	size int64    // bytes in the file
	v1   bool     // slot A holds an older build's record: the file may still be 28 bytes
	gen  uint64   // generation of the newest valid slot
	next int64    // offset of the slot to write next (the older one)
	st   cursorState
}

// openCursor opens dir's cursor file, if there is one, and returns the
// newest state in it, and whether the state knows its floor (an older
// build's file does not). An error wrapping ErrCorruptSegment means no slot
// is valid; the store is usable all the same, and prepare rebuilds the file.
func openCursor(dir string) (c *cursorStore, st cursorState, floorKnown bool, err error) {
	c = &cursorStore{dir: dir}
	f, err := os.OpenFile(filepath.Join(dir, cursorFile), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return c, cursorState{}, true, nil
	}
	if err != nil {
		return nil, cursorState{}, false, fmt.Errorf("open cursor: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, cursorState{}, false, fmt.Errorf("stat cursor: %w", err)
	}
	c.f, c.size = f, fi.Size()
	b := make([]byte, min(c.size, cursorFileLen))
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, cursorState{}, false, fmt.Errorf("read cursor: %w", err)
	}
	b = b[:n]
	a, errA := decodeCursorSlot(b)
	if c.size == cursorV1Len && errA == nil && a.v1 {
		c.v1, c.st, c.next = true, a.st, cursorSlotSpan
		return c, a.st, false, nil
	}
	var bslot decodedSlot
	errB := fmt.Errorf("cursor slot B: file of %d bytes: %w", c.size, ErrCorruptSegment)
	if len(b) > cursorSlotSpan {
		bslot, errB = decodeCursorSlot(b[cursorSlotSpan:])
		if errB == nil && bslot.v1 {
			errB = fmt.Errorf("cursor slot B: version 1: %w", ErrCorruptSegment)
		}
	}
	switch {
	case errA == nil && (errB != nil || a.gen >= bslot.gen):
		c.v1, c.gen, c.st, c.next = a.v1, a.gen, a.st, cursorSlotSpan
		return c, a.st, !a.v1, nil
	case errB == nil:
		c.gen, c.st, c.next = bslot.gen, bslot.st, 0
		return c, bslot.st, true, nil
	default:
		c.size = 0 // nothing in it to keep: prepare replaces it
		return c, cursorState{}, false, fmt.Errorf("cursor unreadable: slot A: %w; slot B: %w", errA, errB)
	}
}

// prepare makes the file a whole, preallocated version 2 file recording
// st: it creates a missing or unreadable one (a new file and a rename:
// this needs space, once), and grows an older build's 28-byte file in
// place. Where that fails (no space), commits keep working as described at
// write, and each one tries again.
func (c *cursorStore) prepare(st cursorState) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.pos.rows = 0
	switch {
	case c.f == nil || (c.size != cursorFileLen && !c.v1):
		return c.create(st)
	case c.v1 && c.size < cursorFileLen:
		return c.grow(st)
	case st != c.st:
		return c.writeLocked(st)
	}
	return nil
}

// commit durably records pos as the cursor.
func (c *cursorStore) commit(pos Position) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	st.pos = Position{Segment: pos.Segment, Offset: pos.Offset}
	return c.writeLocked(st)
}

// raiseFloor durably records that segments below floor are deleted on
// purpose; it is called before they are.
func (c *cursorStore) raiseFloor(floor uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if floor <= c.st.floor {
		return nil
	}
	st := c.st
	st.floor = floor
	return c.writeLocked(st)
}

// writeLocked records st. In a version 2 file it overwrites the older slot
// and fsyncs: no allocation, so it works on a full disk, and a crash
// leaves the other slot, the previous state, valid. An older build's
// 28-byte file is first grown in place; while that fails (no space), its
// record is overwritten in place instead: still no allocation, and a torn
// write fails its CRC, which costs a resend of the spool, never a loss.
func (c *cursorStore) writeLocked(st cursorState) error {
	switch {
	case c.f == nil:
		return c.create(st)
	case c.v1 && c.size < cursorFileLen:
		gerr := c.grow(st)
		if gerr == nil {
			return nil
		}
		if _, err := c.f.WriteAt(encodeCursorV1(st.pos), 0); err != nil {
			return fmt.Errorf("write cursor %s: %w (growing the file: %w)", st.pos, err, gerr)
		}
		if err := c.f.Sync(); err != nil {
			return fmt.Errorf("fsync cursor %s: %w", st.pos, err)
		}
		c.st = st
		return nil
	}
	if _, err := c.f.WriteAt(encodeCursorSlot(c.gen+1, st), c.next); err != nil {
		return fmt.Errorf("write cursor %s: %w", st.pos, err)
	}
	if err := c.f.Sync(); err != nil {
		return fmt.Errorf("fsync cursor %s: %w", st.pos, err)
	}
	c.gen++
	c.next = cursorSlotSpan - c.next
	c.st, c.v1 = st, false
	return nil
}

// grow turns an older build's 28-byte file into a version 2 file in place:
// it writes the rest of the file, with st in slot B, and fsyncs. Until that
// returns, slot A (the old record) stays valid. On failure the file is cut
// back to the old record, so that slot B can never hold a stale state.
func (c *cursorStore) grow(st cursorState) error {
	buf := make([]byte, cursorFileLen-cursorV1Len)
	copy(buf[cursorSlotSpan-cursorV1Len:], encodeCursorSlot(c.gen+1, st))
	_, err := c.f.WriteAt(buf, cursorV1Len)
	if err == nil {
		err = c.f.Sync()
	}
	if err != nil {
		if terr := c.f.Truncate(cursorV1Len); terr == nil {
			c.size = cursorV1Len
		}
		return fmt.Errorf("grow cursor file: %w", err)
	}
	c.size, c.v1, c.gen, c.next, c.st = cursorFileLen, false, c.gen+1, 0, st
	return nil
}

// create writes a new cursor file recording st in slot A: a temporary
// file, fsynced, renamed over the old one, and the directory fsynced.
func (c *cursorStore) create(st cursorState) error {
	tmp := filepath.Join(c.dir, cursorTmpFile)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("create cursor file: %w", err)
	}
	buf := make([]byte, cursorFileLen)
	copy(buf, encodeCursorSlot(1, st))
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("create cursor file: %w", err)
	}
	if _, err := f.WriteAt(buf, 0); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, cursorFile)); err != nil {
		return fail(err)
	}
	if err := syncDir(c.dir); err != nil {
		// The rename happened: the file is in use whatever the directory
		// fsync says, and the next commit fsyncs the file again.
		c.adopt(f, st)
		return fmt.Errorf("create cursor file: %w", err)
	}
	c.adopt(f, st)
	return nil
}

func (c *cursorStore) adopt(f *os.File, st cursorState) {
	if c.f != nil {
		c.f.Close()
	}
	c.f, c.size, c.v1, c.gen, c.next, c.st = f, cursorFileLen, false, 1, cursorSlotSpan, st
}

func (c *cursorStore) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return nil
	}
	err := c.f.Close()
	c.f = nil
	return err
}

// noSpace reports whether err says the file system (or the quota) is full.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
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
