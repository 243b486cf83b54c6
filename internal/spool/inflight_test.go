package spool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
)

// fakeColumnSink is a ColumnSink for tests: safe for concurrent use, it
// records what it acknowledged and how many calls ran at once. onInsert,
// when set, decides each call's fate (nil: acknowledge).
type fakeColumnSink struct {
	onInsert func(ctx context.Context, call int, rows []collectors.Sample) error

	mu      sync.Mutex
	acked   map[uint64]int
	running int
	peak    int
	calls   int
}

var _ ColumnSink = (*fakeColumnSink)(nil)

func (s *fakeColumnSink) InsertSamples(context.Context, []collectors.Sample) error {
	return errors.New("fakeColumnSink takes columns only")
}

func (s *fakeColumnSink) InsertColumns(ctx context.Context, c *Columns) error {
	if err := c.Validate(); err != nil {
		return err
	}
	rows := c.Samples()
	if len(rows) == 0 {
		return nil // no insert at all, as the store
	}
	s.mu.Lock()
	s.calls++
	call := s.calls
	s.running++
	s.peak = max(s.peak, s.running)
	s.mu.Unlock()
	var err error
	if s.onInsert != nil {
		err = s.onInsert(ctx, call, rows)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	if err != nil {
		return err
	}
	if s.acked == nil {
		s.acked = map[uint64]int{}
	}
	for _, x := range rows {
		s.acked[x.ID]++
	}
	return nil
}

// commitGuard checks every commit of a shipper into a fakeColumnSink:
// the first commit that leaves behind the cursor a sample the sink never
// acknowledged is kept as a violation. ids are the spool's samples in
// spool order.
type commitGuard struct {
	sp        *Spool
	ids       []uint64
	sink      *fakeColumnSink
	untilDone func(Position)

	mu        sync.Mutex
	violation string
}

// newCommitGuard returns the guard and a channel closed once a commit
// leaves the backlog empty.
func newCommitGuard(sp *Spool, ids []uint64, sink *fakeColumnSink) (*commitGuard, <-chan struct{}) {
	untilDone, drained := commitsUntilDrained(sp)
	return &commitGuard{sp: sp, ids: ids, sink: sink, untilDone: untilDone}, drained
}

// onCommit is the shipper's onCommit hook.
func (g *commitGuard) onCommit(p Position) {
	backlog, _ := g.sp.Backlog()
	behind := len(g.ids) - int(backlog)
	acked := g.sink.ackedIDs()
	for _, id := range g.ids[:behind] {
		if acked[id] == 0 {
			g.mu.Lock()
			if g.violation == "" {
				g.violation = fmt.Sprintf("sample %x behind the cursor (%d rows) never acknowledged", id, behind)
			}
			g.mu.Unlock()
			break
		}
	}
	g.untilDone(p)
}

// check fails the test if a commit passed an unacknowledged sample.
func (g *commitGuard) check(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.violation != "" {
		t.Fatal(g.violation)
	}
}

// shipGuarded runs a shipper with cfg until sp's backlog of ids (in spool
// order) is committed, failing the test if a commit passed an
// unacknowledged sample or more than cfg.InFlight inserts ran at once. It
// returns the shipper's registry.
func shipGuarded(t *testing.T, sp *Spool, ids []uint64, sink *fakeColumnSink, cfg ShipperConfig) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	guard, drained := newCommitGuard(sp, ids, sink)
	startShipper(t, sp, sink, cfg, realClock{}, reg, guard.onCommit)
	waitFor(t, drained, "the backlog to drain")
	guard.check(t)
	if n := sink.peakRunning(); n > cfg.InFlight {
		t.Fatalf("%d inserts ran at once, want at most %d", n, cfg.InFlight)
	}
	return reg
}

func (s *fakeColumnSink) peakRunning() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

func (s *fakeColumnSink) ackedIDs() map[uint64]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[uint64]int, len(s.acked))
	for k, v := range s.acked {
		out[k] = v
	}
	return out
}

// Two inserts in flight, the later one acknowledged first: the cursor
// stays before the earlier one until it is acknowledged too, and then
// moves past both at once.
func TestShipperInFlightCommitsOnlyPastAcknowledgedRows(t *testing.T) {
	sp := openSpool(t, Config{Dir: t.TempDir(), SegmentBytes: 1 << 20, MaxBytes: 1 << 30, Overflow: OverflowReject})
	for b := range 20 { // 20,000 rows: two inserts of 10,000
		mustAppend(t, sp.Spool, testBatch(b, 1000))
	}
	releaseFirst := make(chan struct{})
	firstRunning := make(chan struct{})
	secondDone := make(chan Position, 1)
	sink := &fakeColumnSink{}
	sink.onInsert = func(ctx context.Context, call int, rows []collectors.Sample) error {
		if rows[0].ID == testBatch(0, 1)[0].ID {
			close(firstRunning)
			select {
			case <-releaseFirst:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// Both in flight: the second may be handed to the sink before the
		// first's goroutine has reached it; without this wait it could
		// finish before the first began, and never overlap it.
		select {
		case <-firstRunning:
		case <-ctx.Done():
			return ctx.Err()
		}
		secondDone <- sp.Cursor()
		return nil
	}
	var commits []Position
	var mu sync.Mutex
	onCommit, drained := commitsUntilDrained(sp.Spool)
	cfg := testShipperConfig()
	cfg.InFlight = 2
	startShipper(t, sp.Spool, sink, cfg, newFakeClock(true), nil, func(p Position) {
		mu.Lock()
		commits = append(commits, p)
		mu.Unlock()
		onCommit(p)
	})
	cursor := <-secondDone
	if cursor != (Position{}) {
		t.Fatalf("cursor %s while the first insert is unacknowledged, want it unmoved", cursor)
	}
	// The second insert returns; wait until the shipper has seen it.
	deadline := time.Now().Add(10 * time.Second)
	for len(sink.ackedIDs()) < 10_000 {
		if time.Now().After(deadline) {
			t.Fatal("the second insert was never acknowledged")
		}
		time.Sleep(time.Millisecond)
	}
	if c := sp.Cursor(); c != (Position{}) {
		t.Fatalf("cursor moved to %s past an unacknowledged insert", c)
	}
	if rows, _ := sp.Backlog(); rows != 20_000 {
		t.Fatalf("backlog %d rows, want all 20,000", rows)
	}
	close(releaseFirst)
	waitFor(t, drained, "the backlog to drain")
	mu.Lock()
	defer mu.Unlock()
	if len(commits) != 1 {
		t.Fatalf("commits %v, want one past both inserts", commits)
	}
	if n := sink.peakRunning(); n != 2 {
		t.Fatalf("%d inserts ran at once, want 2", n)
	}
	acked := sink.ackedIDs()
	for b := range 20 {
		for _, x := range testBatch(b, 1000) {
			if n := acked[x.ID]; n != 1 {
				t.Fatalf("sample %x acknowledged %d times, want 1", x.ID, n)
			}
		}
	}
}

// A ColumnSink gets exactly what was appended, column for column.
func TestShipperColumnSinkGetsWhatWasAppended(t *testing.T) {
	sp := openSpool(t, testConfig(t.TempDir()))
	var want []collectors.Sample
	for b := range 60 {
		want = append(want, testBatch(b, 7)...)
		mustAppend(t, sp.Spool, testBatch(b, 7))
	}
	var mu sync.Mutex
	var got []collectors.Sample
	sink := &fakeColumnSink{onInsert: func(_ context.Context, _ int, rows []collectors.Sample) error {
		mu.Lock()
		got = append(got, rows...)
		mu.Unlock()
		return nil
	}}
	onCommit, drained := commitsUntilDrained(sp.Spool)
	startShipper(t, sp.Spool, sink, testShipperConfig(), newFakeClock(true), nil, onCommit)
	waitFor(t, drained, "the backlog to drain")
	mu.Lock()
	defer mu.Unlock()
	equalSamples(t, got, want)
}

// With several inserts in flight failing at random and finishing in any
// order, every commit leaves behind it only rows the sink acknowledged,
// no more than InFlight inserts run at once, and everything arrives.
func TestShipperInFlightUnderFailuresNeverCommitsPastAGap(t *testing.T) {
	sp := openSpool(t, Config{Dir: t.TempDir(), SegmentBytes: 256 << 10, MaxBytes: 1 << 30, Overflow: OverflowReject})
	const batches, rows = 300, 400 // 120,000 rows: twelve inserts of 10,000
	var order []uint64             // sample ids in spool order
	for b := range batches {
		x := testBatch(b, rows)
		mustAppend(t, sp.Spool, x)
		for _, s := range x {
			order = append(order, s.ID)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var rngMu sync.Mutex
	sink := &fakeColumnSink{onInsert: func(ctx context.Context, _ int, _ []collectors.Sample) error {
		rngMu.Lock()
		fail, pause := rng.IntN(3) == 0, time.Duration(rng.IntN(3))*time.Millisecond
		rngMu.Unlock()
		time.Sleep(pause) // inserts finish out of order
		if fail {
			return errors.New("clickhouse: connection reset")
		}
		return nil
	}}
	cfg := testShipperConfig()
	cfg.InFlight = 3
	cfg.BackoffInitial, cfg.BackoffMax = minBackoff, minBackoff
	reg := shipGuarded(t, sp.Spool, order, sink, cfg)
	if n := metric(t, reg, "gpumeter_shipper_send_errors_total"); n == 0 {
		t.Fatal("no insert failed: the test did not exercise retries")
	}
	acked := sink.ackedIDs()
	for _, id := range order {
		if acked[id] != 1 {
			t.Fatalf("sample %x acknowledged %d times, want 1", id, acked[id])
		}
	}
}

// The shipper's own SIGKILL test with inserts in flight: the child's
// first insert hangs (ClickHouse took it, no acknowledgement yet) while the
// second is acknowledged, and the child is killed. The cursor must not
// have moved past the first, so after a restart both are sent again and
// nothing is lost. The child is runInFlightChild.
func TestSIGKILLWithInsertsInFlightKeepsTheCursorBehindTheUnacknowledged(t *testing.T) {
	dir := t.TempDir()
	fillCrashSpool(t, dir)

	lines := runUntilKilled(t, "inflight", dir, 0, 0, func(string) bool {
		// The shipper may be committing if it were wrong: give it the chance.
		time.Sleep(50 * time.Millisecond)
		return true
	})
	if lines[0] != "acked second" {
		t.Fatalf("child said %q, want it to acknowledge the second insert", lines[0])
	}

	resendAfterKill(t, dir, 20_000, 50_000, "the first insert was never acknowledged", &fakeColumnSink{}, func(b int) int {
		// Inserts 1 and 2 went out before the kill and again after.
		if b*crashRows < 20_000 {
			return 2
		}
		return 1
	})
}

// runInFlightChild ships sp with two inserts in flight into dir's file of
// ids: the insert holding batch 0 writes its ids and hangs until killed,
// the other is acknowledged and announced on stdout.
func runInFlightChild(ctx context.Context, sp *Spool, dir string) error {
	f, err := openIDFile(dir)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	first := testBatch(0, 1)[0].ID
	sink := &fakeColumnSink{onInsert: func(ctx context.Context, _ int, rows []collectors.Sample) error {
		mu.Lock()
		err := appendIDs(f, rows)
		mu.Unlock()
		if err != nil {
			return err
		}
		if rows[0].ID == first {
			<-ctx.Done() // inserted, never acknowledged
			return ctx.Err()
		}
		defer fmt.Fprint(os.Stdout, "acked second\n")
		return nil
	}}
	cfg := crashShipperConfig()
	cfg.InFlight = 2
	sh, err := NewShipper(sp, sink, cfg, discardLogger(), nil)
	if err != nil {
		return err
	}
	return sh.Run(ctx) // until killed
}
