package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"github.com/gpumeter/gpumeter/collectors"
)

// Batch is one appended batch as read back.
type Batch struct {
	Samples []collectors.Sample
	// Next is the position just after the batch: commit it once the
	// samples are delivered.
	Next Position
	// Segment is the segment the samples were read from (Next may already
	// point into the next one).
	Segment uint64
}

// reader is the read side's state; the reader goroutine owns it (rmu).
type reader struct {
	pos  Position // next record to read, with its segment's rows before it
	f    *os.File // open segment pos.Segment, or nil
	fseq uint64
	buf  []byte
}

func (r *reader) closeFile() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// moveTo puts the reader at the first record of segment seq.
func (r *reader) moveTo(seq uint64) {
	r.pos = Position{Segment: seq, Offset: segHeaderLen}
}

// Read returns the next batch after the read position and moves past it.
//
//   - A batch: len(b.Samples) > 0, err nil.
//   - Caught up with the writer: no samples, err nil.
//   - A corrupt region: err wraps ErrCorruptSegment; the region is skipped
//     and counted, b.Next lies past it (commit it like any batch), and the
//     next Read goes on after it.
//   - A sealed segment whose file vanished while the spool was open: the
//     same, and its rows are logged as lost and the segment counted in
//     gpumeter_spool_missing_segments_total.
//   - Any other error (I/O): nothing moved; try again later.
//
// Read never blocks on the writer; wait on Appended for more.
func (s *Spool) Read(ctx context.Context) (Batch, error) {
	var samples []collectors.Sample
	b, _, err := s.read(ctx, func(payload []byte, rows uint32) (bool, error) {
		var err error
		samples, err = decodeBatch(payload, rows)
		return true, err
	})
	if err == nil {
		b.Samples = samples
	}
	return b, err
}

// readStatus says what read found.
type readStatus int

const (
	readCaughtUp readStatus = iota // nothing more to read now
	readBatch                      // a batch was decoded
	readLeft                       // a batch is there, but decode left it
)

// readColumns is Read into dst: it appends the next batch's rows to dst.
// A batch of more than room rows is left where it is (readLeft), unless
// dst is empty: a batch larger than a whole insert is taken alone.
func (s *Spool) readColumns(ctx context.Context, dst *Columns, room int) (Batch, readStatus, error) {
	return s.read(ctx, func(payload []byte, rows uint32) (bool, error) {
		if int64(rows) > int64(room) && dst.Len() > 0 {
			return false, nil
		}
		return true, decodeColumns(payload, rows, dst)
	})
}

// read finds the next record after the read position and hands its
// payload to decode, which either takes it (the reader moves past it,
// decoded or, on a decode error, skipped as corrupt) or leaves it. On an
// error the status means nothing.
func (s *Spool) read(ctx context.Context, decode func(payload []byte, rows uint32) (bool, error)) (Batch, readStatus, error) {
	if err := ctx.Err(); err != nil {
		return Batch{}, readCaughtUp, fmt.Errorf("read spool: %w", err)
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	r := &s.rd
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return Batch{}, readCaughtUp, fmt.Errorf("read spool: %w", ErrClosed)
		}
		seg, i := s.segAtOrAfterLocked(r.pos.Segment)
		if seg == nil {
			s.mu.Unlock()
			return Batch{Next: r.pos}, readCaughtUp, nil
		}
		if seg.seq != r.pos.Segment {
			// The reader's segment was dropped (overflow) or shipped: go on
			// with the oldest one left.
			r.moveTo(seg.seq)
		}
		size, bad, last := seg.size, seg.bad, i == len(s.segs)-1
		var nextSeq uint64
		if !last {
			nextSeq = s.segs[i+1].seq
		}
		s.mu.Unlock()

		r.pos.Offset = max(r.pos.Offset, segHeaderLen)
		if r.pos.Offset >= size {
			if last {
				return Batch{Next: r.pos}, readCaughtUp, nil
			}
			r.moveTo(nextSeq)
			continue
		}
		off := r.pos.Offset
		f, err := r.open(s.cfg.Dir, seg.seq)
		if errors.Is(err, fs.ErrNotExist) && s.gone(seg.seq) {
			continue // dropped by the writer since the look above
		}
		if errors.Is(err, fs.ErrNotExist) && !last {
			b, err := s.lost(seg, nextSeq)
			return b, readBatch, err
		}
		if err != nil {
			return Batch{Next: r.pos}, readBatch, fmt.Errorf("read spool: %w", err)
		}
		if bad {
			b, err := s.skip(f, seg.seq, size, size, last, nextSeq, fmt.Errorf("segment %d header unreadable: %w", seg.seq, ErrCorruptSegment))
			return b, readBatch, err
		}
		rh, payload, err := readRecordAt(f, off, size, &r.buf)
		if errors.Is(err, ErrCorruptSegment) {
			next, found, ferr := findNextRecord(f, off+1, size, &r.buf)
			if ferr != nil {
				return Batch{Next: r.pos}, readBatch, fmt.Errorf("read spool segment %d: %w", seg.seq, ferr)
			}
			if !found {
				next = size
			}
			b, err := s.skip(f, seg.seq, next, size, last, nextSeq, fmt.Errorf("segment %d offset %d: %w", seg.seq, off, err))
			return b, readBatch, err
		}
		if err != nil {
			return Batch{Next: r.pos}, readBatch, fmt.Errorf("read spool segment %d: %w", seg.seq, err)
		}
		taken, derr := decode(payload, rh.rows)
		if !taken {
			return Batch{Next: r.pos}, readLeft, nil
		}
		// A whole record counts towards the segment's rows even if its
		// payload does not decode: recovery counted it the same way.
		r.pos.rows += int64(rh.rows)
		end := off + recHeaderLen + int64(rh.payloadLen)
		if derr != nil {
			b, err := s.skip(f, seg.seq, end, size, last, nextSeq, fmt.Errorf("segment %d offset %d: %w", seg.seq, off, derr))
			return b, readBatch, err
		}
		r.pos.Offset = end
		return Batch{Segment: seg.seq, Next: r.settle(size, last, nextSeq)}, readBatch, nil
	}
}

// gone reports whether segment seq has left the spool's list.
func (s *Spool) gone(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	seg, _ := s.segAtOrAfterLocked(seq)
	return seg == nil || seg.seq != seq
}

// skip moves the reader past a corrupt region of segment seq (file f),
// from its position to to, counts and logs it with the rows its record
// headers claim, and returns err for Read to report.
func (s *Spool) skip(f io.ReaderAt, seq uint64, to, size int64, last bool, nextSeq uint64, err error) (Batch, error) {
	r := &s.rd
	from := r.pos.Offset
	rows, rerr := claimedRows(f, from, to)
	s.m.corruptRegions.Inc()
	s.m.corruptBytes.Add(float64(to - from))
	s.m.corruptRows.Add(float64(rows))
	attrs := []any{"segment", seq, "offset", from, "bytes", to - from, "rows", rows, "err", err}
	if rerr != nil {
		attrs = append(attrs, "rows_err", rerr)
	}
	s.log.Error("spool skipped a corrupt region: its samples are lost", attrs...)
	r.pos.Offset = to
	return Batch{Next: r.settle(size, last, nextSeq)}, fmt.Errorf("read spool: %d bytes skipped: %w", to-from, err)
}

// lost handles a sealed segment whose file vanished under the open spool
// (deleted by hand or by a stray tool): its rows after the read position
// are lost. It logs and counts them, drops the segment from the spool and
// moves the reader to the next one. The error wraps ErrCorruptSegment, so
// a caller commits past it like a corrupt region.
func (s *Spool) lost(seg *segment, nextSeq uint64) (Batch, error) {
	r := &s.rd
	s.mu.Lock()
	_, i := s.segAtOrAfterLocked(seg.seq)
	if i < len(s.segs) && s.segs[i] == seg {
		s.segs = slices.Delete(s.segs, i, i+1)
		s.total -= seg.size
	}
	s.mu.Unlock()
	rows := seg.rows - r.pos.rows
	bytes := seg.size - max(r.pos.Offset, segHeaderLen)
	s.m.missingSegments.Inc()
	s.log.Error("spool segment missing: its samples are lost", "segment", seg.seq, "rows", rows, "bytes", bytes)
	r.moveTo(nextSeq)
	return Batch{Next: r.pos}, fmt.Errorf("read spool: segment %d missing, %d rows lost: %w", seg.seq, rows, ErrCorruptSegment)
}

// settle moves a reader that reached the end of a sealed segment to the
// start of the next one, so that committing its position lets the sealed
// segment be deleted. It returns the (new) position.
func (r *reader) settle(size int64, last bool, nextSeq uint64) Position {
	if r.pos.Offset >= size && !last {
		r.moveTo(nextSeq)
	}
	return r.pos
}

// open returns a read descriptor for segment seq, reusing the open one.
func (r *reader) open(dir string, seq uint64) (*os.File, error) {
	if r.f != nil && r.fseq == seq {
		return r.f, nil
	}
	if err := r.closeFile(); err != nil {
		return nil, fmt.Errorf("close segment %d: %w", r.fseq, err)
	}
	f, err := os.Open(segPath(dir, seq))
	if err != nil {
		return nil, fmt.Errorf("open segment %d: %w", seq, err)
	}
	r.f, r.fseq = f, seq
	return f, nil
}

// Commit durably records that every batch before pos was delivered, then
// deletes the segments wholly behind it. pos must come from a Batch this
// spool returned and must not lie before the committed cursor.
func (s *Spool) Commit(ctx context.Context, pos Position) error {
	_, err := s.commit(ctx, pos)
	return err
}

// commit is Commit that also returns DroppedThrough as of the moment the
// cursor moved: a drop before it counted the rows behind pos as lost, a
// drop after it did not.
func (s *Spool) commit(ctx context.Context, pos Position) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("commit cursor %s: %w", pos, err)
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.mu.Lock()
	cur, closed, dropped := s.cursor, s.closed, s.droppedThrough
	s.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("commit cursor %s: %w", pos, ErrClosed)
	}
	if pos.Before(cur) {
		return 0, fmt.Errorf("commit cursor %s: before the committed %s", pos, cur)
	}
	if pos.Segment == cur.Segment && pos.Offset == cur.Offset {
		return dropped, nil
	}
	if err := s.cur.commit(pos); err != nil {
		return 0, fmt.Errorf("commit cursor: %w", err)
	}
	s.mu.Lock()
	s.cursor = pos
	dropped = s.droppedThrough
	s.removeShippedLocked()
	s.mu.Unlock()
	return dropped, nil
}

// Rewind moves the reader back to the committed cursor, so that batches
// read but never committed are read again (a shipper restarting in the
// same process).
func (s *Spool) Rewind() {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.mu.Lock()
	s.rd.pos = s.cursor
	s.mu.Unlock()
}
