// Package spool is the collector's durable write-ahead log: batches of
// samples go to append-only segment files on local disk, checksummed and
// fsynced before Append returns, and a shipper sends them on to the store
// from a committed cursor. docs/delivery.md describes the format, the
// fsync and cursor protocol, overflow and recovery.
//
// A Spool is safe for one writer goroutine (Append) and one reader
// goroutine (Read, Commit, Rewind, or a Shipper running) at a time.
package spool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/dirlock"
)

// The collector's poll loop writes into the spool.
var _ collectors.Appender = (*Spool)(nil)

// segment is the spool's view of one segment file.
type segment struct {
	seq  uint64
	size int64 // bytes the reader may read: header and whole records (sealed: the file)
	rows int64 // samples in whole records
	bad  bool  // unreadable header: the reader skips the file whole
	// sealed: the last segment ends in corrupt bytes, kept for the reader
	// to report; nothing is appended after them.
	sealed bool
}

// Spool is an on-disk queue of sample batches. Open one with Open.
type Spool struct {
	cfg    Config
	log    *slog.Logger
	m      *spoolMetrics
	lock   *os.File
	notify chan struct{}

	// mu guards the shared picture below; file I/O happens outside it
	// except deleting segments, which must not race with the reader.
	mu      sync.Mutex
	segs    []*segment // ascending seq; the last one is the one written to
	total   int64      // sum of segs' sizes
	cursor  Position   // committed; its rows field counts the cursor segment's shipped rows
	nextSeq uint64
	closed  bool
	// droppedThrough is the highest segment the overflow policy deleted in
	// this process (segments go oldest first, so every one at or below it
	// is gone). The shipper checks it to discard rows it read from them
	// and to report those it delivered anyway (see DroppedThrough).
	droppedThrough uint64

	wmu    sync.Mutex // the writer's state
	w      *os.File   // active segment, nil until the first Append or after a failure
	wseg   *segment
	broken bool // a write failed: start a new segment rather than append after it
	enc    encoder

	rmu sync.Mutex // the reader's state
	rd  reader

	cur *cursorStore // the cursor file; its own lock is taken last
}

// Open opens (creating if needed) the spool in cfg.Dir and recovers it:
// segments behind the committed cursor are deleted, a torn tail of the last
// segment is cut off, every whole batch before it is kept, and damage
// (missing segments, a cursor past the data, a corrupt last record) is
// logged at Error and counted. Metrics are registered with reg when it is
// not nil; a nil logger discards.
func Open(ctx context.Context, cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Spool, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("open spool: invalid config: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open spool %s: %w", cfg.Dir, err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("open spool %s: %w", cfg.Dir, err)
	}
	lock, err := dirlock.Lock(cfg.Dir, "spool")
	if err != nil {
		return nil, fmt.Errorf("open spool %s: %w", cfg.Dir, err)
	}
	s := &Spool{
		cfg:    cfg,
		log:    logger.With("component", "spool", "dir", cfg.Dir),
		lock:   lock,
		notify: make(chan struct{}, 1),
	}
	s.m = newSpoolMetrics(s)
	if err := s.load(ctx); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("open spool %s: %w", cfg.Dir, err)
	}
	if err := register(reg, s.m.all); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("open spool %s: %w", cfg.Dir, err)
	}
	return s, nil
}

func segPath(dir string, seq uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", seq, segFileSuffix))
}

// listSegments returns the sequence numbers of dir's segment files, sorted.
func listSegments(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	var seqs []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), segFileSuffix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		seq, err := strconv.ParseUint(name, 10, 64)
		if err != nil || seq == 0 {
			continue
		}
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	return seqs, nil
}

// load rebuilds the in-memory picture from disk, recovering what a crash
// left and reporting what damage cost (docs/delivery.md, "Recovery on
// open"). It runs before the spool is shared, so it takes no locks.
func (s *Spool) load(ctx context.Context) error {
	dir := s.cfg.Dir
	if err := os.Remove(filepath.Join(dir, cursorTmpFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale cursor: %w", err)
	}
	cur, st, floorKnown, err := openCursor(dir)
	if errors.Is(err, ErrCorruptSegment) {
		// Starting over re-sends what is still spooled: duplicates, which
		// the store collapses by sample_id, never a loss.
		s.log.Warn("spool cursor unreadable, shipping every retained segment again", "err", err)
		s.m.cursorResets.Inc()
		st, floorKnown = cursorState{}, false
	} else if err != nil {
		return err
	}
	s.cur = cur
	cursor, floor := st.pos, st.floor
	seqs, err := listSegments(dir)
	if err != nil {
		return err
	}
	invalid, reason, err := s.checkCursor(cursor, floor, floorKnown, seqs)
	if err != nil {
		return err
	}
	if reason != "" {
		// Deleting every segment behind such a cursor would throw away
		// data nobody shipped; sending it again costs duplicates only.
		cursor = Position{}
		s.m.cursorResets.Inc()
	}
	gapFrom := s.gapStart(cursor, &floor, floorKnown, seqs)
	s.reportGaps(gapFrom, seqs, cursor)

	var buf []byte
	for i, seq := range seqs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if seq < cursor.Segment || seq < floor {
			// Shipped, or dropped by the overflow policy: a crash came
			// between recording that and deleting the file.
			if err := os.Remove(segPath(dir, seq)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove shipped segment %d: %w", seq, err)
			}
			continue
		}
		seg, err := s.recoverSegment(seq, i == len(seqs)-1, &cursor, &buf)
		if err != nil {
			return err
		}
		if seg != nil {
			s.segs = append(s.segs, seg)
			s.total += seg.size
		}
	}
	s.cursor = cursor
	s.nextSeq = max(cursor.Segment+1, floor, gapFrom)
	if n := len(s.segs); n > 0 {
		s.nextSeq = max(s.nextSeq, s.segs[n-1].seq+1)
	}
	s.rd.pos = cursor
	if reason != "" {
		rows, bytes := s.backlogLocked()
		last := seqs[len(seqs)-1]
		s.log.Error("spool cursor points past the spool's data: rewinding to the start of the spool",
			"cursor", invalid.String(), "reason", reason, "last_segment", last, "rows", rows, "bytes", bytes,
			"note", "the rows and bytes retained are sent again (the store drops duplicates by sample_id); segments after the last one, if the cursor was right, are lost with rows unknown")
	}
	// Preallocate the cursor file now, while there is room, so that
	// commits never need space (docs/delivery.md, "Full disk"); this also
	// records a rewound cursor.
	if err := s.cur.prepare(cursorState{pos: cursor, floor: floor}); err != nil {
		s.log.Error("spool cannot prepare its cursor file; each commit tries again", "err", err)
	}
	if n := len(s.segs); n > 0 {
		last := s.segs[n-1]
		if !last.bad && !last.sealed && last.size < s.cfg.SegmentBytes {
			f, err := os.OpenFile(segPath(dir, last.seq), os.O_WRONLY, 0)
			if err != nil {
				return fmt.Errorf("open segment %d for append: %w", last.seq, err)
			}
			s.w, s.wseg = f, last
		}
	}
	rows, bytes := s.backlogLocked()
	s.log.Info("spool opened", "segments", len(s.segs), "cursor", s.cursor.String(), "backlog_rows", rows, "backlog_bytes", bytes)
	return nil
}

// checkCursor says why the committed cursor cannot be right, or "": a
// cursor past the last segment that was not deleted on purpose, or past
// the end of its own segment. No commit produces either (the cursor only
// moves to positions the reader returned, and segments go only once they
// are behind it), so the cursor is what is damaged, or came from elsewhere.
func (s *Spool) checkCursor(cursor Position, floor uint64, floorKnown bool, seqs []uint64) (Position, string, error) {
	kept := seqs
	if floorKnown {
		i, _ := slices.BinarySearch(seqs, floor)
		kept = seqs[i:]
	}
	if len(kept) == 0 {
		return cursor, "", nil
	}
	if last := kept[len(kept)-1]; cursor.Segment > last {
		return cursor, fmt.Sprintf("cursor segment %d is after the last segment %d", cursor.Segment, last), nil
	}
	if _, ok := slices.BinarySearch(kept, cursor.Segment); !ok {
		return cursor, "", nil
	}
	fi, err := os.Stat(segPath(s.cfg.Dir, cursor.Segment))
	if err != nil {
		return cursor, "", fmt.Errorf("stat segment %d: %w", cursor.Segment, err)
	}
	if cursor.Offset > fi.Size() {
		return cursor, fmt.Sprintf("cursor offset %d is past the end of segment %d (%d bytes)", cursor.Offset, cursor.Segment, fi.Size()), nil
	}
	return cursor, "", nil
}

// gapStart returns the first segment number that must exist if any later
// one does, and settles the floor of an older build's cursor file (which
// recorded none).
func (s *Spool) gapStart(cursor Position, floor *uint64, floorKnown bool, seqs []uint64) uint64 {
	if floorKnown {
		return max(*floor, cursor.Segment, 1)
	}
	// An older build deleted only segments behind its cursor, and the
	// cursor's own segment once shipped whole (the writer having moved on).
	*floor = cursor.Segment
	switch {
	case cursor.Segment == 0:
		// Nothing known (a fresh spool, or a cursor reset): start at the
		// first segment there is.
		if len(seqs) > 0 {
			return seqs[0]
		}
		return 1
	case slices.Contains(seqs, cursor.Segment):
		return cursor.Segment
	default:
		return cursor.Segment + 1
	}
}

// reportGaps logs and counts the segment numbers missing between from and
// the last segment: segments never deleted on purpose, so their samples
// are lost. How many is unknown: the rows were counted in the file.
func (s *Spool) reportGaps(from uint64, seqs []uint64, cursor Position) {
	var ranges []string
	var missing uint64
	next := from
	for _, seq := range seqs {
		if seq < from {
			continue
		}
		if seq > next {
			missing += seq - next
			if seq-next == 1 {
				ranges = append(ranges, strconv.FormatUint(next, 10))
			} else {
				ranges = append(ranges, fmt.Sprintf("%d-%d", next, seq-1))
			}
		}
		next = seq + 1
	}
	if missing == 0 {
		return
	}
	s.m.missingSegments.Add(float64(missing))
	s.log.Error("spool segments missing: their samples are lost (rows unknown)",
		"missing", strings.Join(ranges, ","), "segments", missing, "cursor", cursor.String(), "last_segment", seqs[len(seqs)-1])
}

// recoverSegment scans one segment. The last segment is the only one a
// crash can tear, so only its tail is cut off; garbage anywhere else stays
// for the reader to report. It may move *cursor back onto a record
// boundary, and counts the rows before it when the cursor lies here.
func (s *Spool) recoverSegment(seq uint64, last bool, cursor *Position, buf *[]byte) (*segment, error) {
	path := segPath(s.cfg.Dir, seq)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open segment %d: %w", seq, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat segment %d: %w", seq, err)
	}
	size := st.Size()
	seg := &segment{seq: seq, size: size}

	h := make([]byte, segHeaderLen)
	n, _ := f.ReadAt(h, 0)
	hseq, herr := parseSegmentHeader(h[:n])
	if herr == nil && hseq != seq {
		herr = fmt.Errorf("segment header: sequence %d in file %d: %w", hseq, seq, ErrCorruptSegment)
	}
	if herr != nil {
		if last && (n < segHeaderLen || allZero(h)) {
			// A crash while the segment was created: the header is fsynced
			// before any record, so there is nothing to lose.
			s.log.Warn("spool removing segment torn while created", "segment", seq, "bytes", size)
			if err := os.Remove(path); err != nil {
				return nil, fmt.Errorf("remove torn segment %d: %w", seq, err)
			}
			return nil, nil
		}
		s.log.Error("spool segment header unreadable, its batches will be skipped", "segment", seq, "bytes", size, "err", herr)
		seg.bad = true
		return seg, nil
	}

	// boundary is the last record start or end at or before the cursor.
	inCursor := seq == cursor.Segment
	boundary, boundaryRows := int64(segHeaderLen), int64(0)
	validEnd, corrupt, err := scanRecords(f, segHeaderLen, size, buf, func(off int64, rh recordHeader) {
		end := off + recHeaderLen + int64(rh.payloadLen)
		if inCursor && off <= cursor.Offset {
			boundary, boundaryRows = off, seg.rows
		}
		seg.rows += int64(rh.rows)
		if inCursor && end <= cursor.Offset {
			boundary, boundaryRows = end, seg.rows
		}
	})
	if err != nil {
		return nil, fmt.Errorf("scan segment %d: %w", seq, err)
	}
	if corrupt > 0 {
		s.log.Error("spool segment has corrupt batches, they will be skipped", "segment", seq, "regions", corrupt)
	}
	if last && validEnd < size {
		tail, err := classifyTail(f, validEnd, size)
		if err != nil {
			return nil, fmt.Errorf("scan segment %d: %w", seq, err)
		}
		if !tail.torn {
			// The bytes are all there and wrong: bit rot or a stray write,
			// not a crash. Keep them for the reader, which skips and counts
			// them; new batches go to a new segment.
			s.log.Error("spool last segment ends in a corrupt batch: not a torn write, its samples are lost",
				"segment", seq, "offset", validEnd, "bytes", size-validEnd, "rows", tail.rowsText(), "why", tail.why)
			seg.sealed = true
			last = false
		}
	}
	if last && validEnd < size {
		// A torn tail: the batch in it never had its fsync return, so its
		// Append failed or never returned; nothing acknowledged is lost.
		s.log.Warn("spool cutting torn tail off the last segment", "segment", seq, "offset", validEnd, "bytes", size-validEnd)
		if err := f.Truncate(validEnd); err != nil {
			return nil, fmt.Errorf("truncate segment %d at %d: %w", seq, validEnd, err)
		}
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("fsync segment %d: %w", seq, err)
		}
		s.m.truncatedBytes.Add(float64(size - validEnd))
		seg.size = validEnd
	}
	if inCursor {
		switch {
		case cursor.Offset <= segHeaderLen:
			cursor.Offset = segHeaderLen
		case cursor.Offset == boundary:
		case cursor.Offset == seg.size:
			// Past a corrupt tail that the reader already skipped.
			boundary, boundaryRows = size, seg.rows
		default:
			s.log.Warn("spool cursor not on a batch boundary, moving it back (batches after it are sent again)", "segment", seq, "offset", cursor.Offset, "to", boundary)
			cursor.Offset = boundary
		}
		cursor.rows = boundaryRows
	}
	return seg, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Appended returns a channel that receives (coalesced) after each Append,
// so a reader can wait for data without polling.
func (s *Spool) Appended() <-chan struct{} { return s.notify }

// Append writes samples as one batch and returns once it is on disk
// (written and fsynced). An error means the batch may not be in the spool;
// ErrFull (reject policy) means it certainly is not.
func (s *Spool) Append(ctx context.Context, samples []collectors.Sample) error {
	if len(samples) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("append %d samples: %w", len(samples), err)
	}
	for i := range samples {
		if err := samples[i].Validate(); err != nil {
			return fmt.Errorf("append %d samples: sample %d (id %d): %w: %w", len(samples), i, samples[i].ID, ErrInvalidSample, err)
		}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()

	rec, err := s.enc.encode(samples)
	if err != nil {
		return fmt.Errorf("append %d samples: %w", len(samples), err)
	}
	recLen := int64(len(rec))
	if recLen > s.cfg.SegmentBytes-segHeaderLen {
		return fmt.Errorf("append %d samples: %d bytes, segments hold %d: %w", len(samples), recLen, s.cfg.SegmentBytes-segHeaderLen, ErrBatchTooLarge)
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("append %d samples: %w", len(samples), ErrClosed)
	}
	roll := s.w == nil || s.broken || s.wseg.size+recLen > s.cfg.SegmentBytes
	need := recLen
	if roll {
		need += segHeaderLen
	}
	s.removeShippedLocked()
	if s.total+need > s.cfg.MaxBytes {
		if err := s.overflowLocked(need, roll, len(samples)); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	s.mu.Unlock()

	if roll {
		if err := s.roll(); err != nil {
			s.m.writeErrors.Inc()
			return s.appendFailed(fmt.Errorf("append %d samples: %w", len(samples), err), len(samples), recLen)
		}
	}
	off := s.wseg.size // only this goroutine changes it
	if _, err := s.w.WriteAt(rec, off); err != nil {
		s.writeFailed(off)
		return s.appendFailed(fmt.Errorf("append %d samples: write segment %d: %w", len(samples), s.wseg.seq, err), len(samples), recLen)
	}
	if err := s.w.Sync(); err != nil {
		s.writeFailed(off)
		return s.appendFailed(fmt.Errorf("append %d samples: fsync segment %d: %w", len(samples), s.wseg.seq, err), len(samples), recLen)
	}

	s.mu.Lock()
	s.wseg.size += recLen
	s.wseg.rows += int64(len(samples))
	s.total += recLen
	s.mu.Unlock()
	s.m.appendedBatches.Inc()
	s.m.appendedRows.Add(float64(len(samples)))
	s.m.appendedBytes.Add(float64(recLen))
	s.m.diskFull.Set(0)
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return nil
}

// appendFailed reports an append whose write failed and returns err. A
// full file system is logged at Error and counted: the batch is not in the
// spool, and the space comes back only when the shipper commits (which
// needs none: the cursor file is preallocated) or an operator frees some.
func (s *Spool) appendFailed(err error, rows int, bytes int64) error {
	if noSpace(err) {
		s.m.diskFull.Set(1)
		s.m.diskFullErrors.Inc()
		s.mu.Lock()
		segs, used := len(s.segs), s.total
		s.mu.Unlock()
		s.log.Error("spool disk full: batch not spooled", "rows", rows, "bytes", bytes, "segments", segs, "spool_bytes", used, "err", err)
	}
	return err
}

// overflowLocked applies the overflow policy for a record needing need
// bytes. It returns the error Append returns, or nil once the record fits.
func (s *Spool) overflowLocked(need int64, roll bool, rows int) error {
	if s.cfg.Overflow == OverflowReject {
		s.m.rejectedBatches.Inc()
		s.m.rejectedRows.Add(float64(rows))
		return fmt.Errorf("append %d samples: %d of %d bytes in use, %d more needed: %w", rows, s.total, s.cfg.MaxBytes, need, ErrFull)
	}
	for s.total+need > s.cfg.MaxBytes {
		// The active segment goes only when a roll replaces it anyway;
		// MaxBytes >= 2 × SegmentBytes means it is never needed otherwise.
		if len(s.segs) == 0 || (s.segs[0] == s.wseg && !roll) {
			s.m.rejectedBatches.Inc()
			s.m.rejectedRows.Add(float64(rows))
			return fmt.Errorf("append %d samples: nothing left to drop: %w", rows, ErrFull)
		}
		victim := s.segs[0]
		lost := s.unshippedRowsLocked(victim)
		if victim == s.wseg {
			s.w.Close()
			s.w, s.wseg = nil, nil
		}
		if err := s.removeFirstLocked(1); err != nil {
			return fmt.Errorf("append %d samples: drop oldest: %w", rows, err)
		}
		s.droppedThrough = victim.seq
		s.m.droppedSegments.Inc()
		s.m.droppedRows.Add(float64(lost))
		s.log.Error("spool full, dropped oldest segment: unshipped samples lost", "segment", victim.seq, "rows", lost, "bytes", victim.size, "max_bytes", s.cfg.MaxBytes)
	}
	return nil
}

// roll seals the active segment and starts a new one whose header is
// durable (file and directory fsynced) before any record goes in.
func (s *Spool) roll() error {
	if s.w != nil {
		s.w.Close()
		s.w, s.wseg = nil, nil
	}
	s.mu.Lock()
	seq := s.nextSeq
	s.nextSeq++
	s.mu.Unlock()
	path := segPath(s.cfg.Dir, seq)
	// A number is used up only by a file that exists: recovery reports a
	// hole in the numbering as lost segments.
	reuse := func() {
		s.mu.Lock()
		if s.nextSeq == seq+1 {
			s.nextSeq = seq
		}
		s.mu.Unlock()
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		if !errors.Is(err, fs.ErrExist) {
			reuse()
		}
		return fmt.Errorf("create segment %d: %w", seq, err)
	}
	fail := func(err error) error {
		f.Close()
		if os.Remove(path) == nil {
			reuse()
		}
		return fmt.Errorf("create segment %d: %w", seq, err)
	}
	if _, err := f.Write(encodeSegmentHeader(seq)); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := syncDir(s.cfg.Dir); err != nil {
		return fail(err)
	}
	seg := &segment{seq: seq, size: segHeaderLen}
	s.mu.Lock()
	s.segs = append(s.segs, seg)
	s.total += seg.size
	s.mu.Unlock()
	s.w, s.wseg, s.broken = f, seg, false
	return nil
}

// writeFailed undoes what it can of a failed append. The record was never
// published, so the reader will not see it; the next append starts a new
// segment rather than trust the bytes after off.
func (s *Spool) writeFailed(off int64) {
	s.m.writeErrors.Inc()
	s.broken = true
	if err := s.w.Truncate(off); err != nil {
		s.log.Warn("spool could not cut a failed write, the reader will skip it as corrupt", "segment", s.wseg.seq, "offset", off, "err", err)
	}
}

// removeShippedLocked deletes segments wholly behind the committed cursor.
// The last segment stays: the writer may still append to it.
func (s *Spool) removeShippedLocked() {
	n := 0
	for ; n < len(s.segs)-1; n++ {
		seg := s.segs[n]
		if seg.seq > s.cursor.Segment || (seg.seq == s.cursor.Segment && s.cursor.Offset < seg.size) {
			break
		}
	}
	if n == 0 {
		return
	}
	if err := s.removeFirstLocked(n); err != nil {
		// Retried at the next commit or append; only space is at stake.
		s.log.Warn("spool could not delete shipped segments", "segments", n, "err", err)
	}
}

// removeFirstLocked deletes the n oldest segments. It first raises the
// cursor file's floor above them (written in place: no space needed), so
// that recovery knows they went on purpose and never reports them lost.
func (s *Spool) removeFirstLocked(n int) error {
	if err := s.cur.raiseFloor(s.segs[n-1].seq + 1); err != nil {
		return fmt.Errorf("remove segments %d to %d: %w", s.segs[0].seq, s.segs[n-1].seq, err)
	}
	for range n {
		first := s.segs[0]
		if err := os.Remove(segPath(s.cfg.Dir, first.seq)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove segment %d: %w", first.seq, err)
		}
		s.segs = s.segs[1:]
		s.total -= first.size
	}
	return nil
}

// unshippedRowsLocked counts the rows of seg at or after the cursor.
func (s *Spool) unshippedRowsLocked(seg *segment) int64 {
	switch {
	case seg.seq < s.cursor.Segment:
		return 0
	case seg.seq == s.cursor.Segment:
		return seg.rows - s.cursor.rows
	default:
		return seg.rows
	}
}

// Backlog returns the rows and record bytes not yet behind the committed
// cursor: what a shipper still has to deliver.
func (s *Spool) Backlog() (rows, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.backlogLocked()
}

func (s *Spool) backlogLocked() (rows, bytes int64) {
	for _, seg := range s.segs {
		if seg.seq < s.cursor.Segment {
			continue
		}
		rows += s.unshippedRowsLocked(seg)
		from := int64(segHeaderLen)
		if seg.seq == s.cursor.Segment {
			from = max(from, s.cursor.Offset)
		}
		bytes += max(0, seg.size-from)
	}
	return rows, bytes
}

// usage returns the number of segments and their bytes, for the gauges.
func (s *Spool) usage() (int, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.segs), s.total
}

// DroppedThrough returns the highest segment the drop_oldest policy has
// deleted since the spool was opened, 0 when none. A drop counts as lost
// every row of the segment after the committed cursor, including rows a
// shipper has read (or even sent) but not yet committed: the shipper must
// not send the ones it still holds, and reports the ones it had sent with
// DroppedRowsDelivered, so that dropped − delivered is exactly what was
// lost.
func (s *Spool) DroppedThrough() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.droppedThrough
}

// DroppedRowsDelivered records that n rows the spool counted as dropped
// had been delivered (acknowledged by the sink) before their segment went.
func (s *Spool) DroppedRowsDelivered(n int) {
	if n <= 0 {
		return
	}
	s.m.droppedDelivered.Add(float64(n))
	s.log.Warn("rows of a dropped segment delivered anyway: they were counted as dropped", "rows", n)
}

// Cursor returns the committed cursor.
func (s *Spool) Cursor() Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursor
}

// Close releases the files and the directory lock. Stop the writer and the
// reader (the shipper's Run) first.
func (s *Spool) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.closeFiles()
}

func (s *Spool) closeFiles() error {
	var errs []error
	if s.w != nil {
		errs = append(errs, s.w.Close())
		s.w, s.wseg = nil, nil
	}
	errs = append(errs, s.rd.closeFile())
	if s.cur != nil {
		errs = append(errs, s.cur.close())
	}
	if s.lock != nil {
		// Closing the descriptor releases the flock.
		errs = append(errs, s.lock.Close())
		s.lock = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close spool %s: %w", s.cfg.Dir, err)
	}
	return nil
}

// segAtOrAfterLocked returns the first segment whose seq is at least seq,
// its index, and nil when there is none.
func (s *Spool) segAtOrAfterLocked(seq uint64) (*segment, int) {
	i, _ := slices.BinarySearchFunc(s.segs, seq, func(g *segment, q uint64) int { return cmp.Compare(g.seq, q) })
	if i == len(s.segs) {
		return nil, i
	}
	return s.segs[i], i
}
