package spool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
)

// splitFixture is one 100,000-row insert in the spool (100 batches of
// 1,000), read by a sink that takes blocks of 1,000 rows and records each
// call's rows.
type splitFixture struct {
	sp    opened
	ids   []uint64       // sample ids in spool order
	order map[uint64]int // sample id -> place in spool order
	sink  *fakeColumnSink

	mu    sync.Mutex
	calls map[int][]collectors.Sample // call -> rows it inserted, each attempt
}

func newSplitFixture(t *testing.T) *splitFixture {
	f := &splitFixture{
		sp:    openSpool(t, Config{Dir: t.TempDir(), SegmentBytes: 4 << 20, MaxBytes: 1 << 30, Overflow: OverflowReject}),
		order: map[uint64]int{},
		calls: map[int][]collectors.Sample{},
	}
	for b := range 100 {
		x := testBatch(b, 1000)
		mustAppend(t, f.sp.Spool, x)
		for _, s := range x {
			f.order[s.ID] = len(f.ids)
			f.ids = append(f.ids, s.ID)
		}
	}
	f.sink = &fakeColumnSink{blockRows: 1000}
	return f
}

func (f *splitFixture) record(call int, rows []collectors.Sample) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[call] = rows
}

// waitForCall returns an onBlock hook under which call waiting, after its
// first block, holds on until call other has taken a block, or patience
// has passed.
func waitForCall(waiting, other int, patience time.Duration) func(context.Context, int, []collectors.Sample) error {
	started := make(chan struct{})
	var once sync.Once
	giveUp := time.After(patience)
	return func(ctx context.Context, call int, _ []collectors.Sample) error {
		switch call {
		case other:
			once.Do(func() { close(started) })
		case waiting:
			select {
			case <-started:
			case <-giveUp: // and closed for the later blocks
				once.Do(func() { close(started) })
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
}

func splitConfig(inFlight int) ShipperConfig {
	cfg := testShipperConfig()
	cfg.BatchRows = 100_000
	cfg.InFlight = inFlight
	cfg.BackoffInitial, cfg.BackoffMax = minBackoff, minBackoff
	return cfg
}

// With the spool caught up and one insert running, the idle slot takes
// over part of its blocks: two inserts, each of an ascending run of the
// batch's rows (so each part stays sorted), together every row once, and
// one commit past all of them. With one slot there is no helper.
func TestShipperIdleSlotHelpsTheRunningInsert(t *testing.T) {
	for _, tc := range []struct {
		inFlight, wantCalls int
	}{{2, 2}, {1, 1}} {
		t.Run(fmt.Sprintf("in flight %d", tc.inFlight), func(t *testing.T) {
			f := newSplitFixture(t)
			patience := 20 * time.Second
			if tc.wantCalls == 1 {
				patience = 200 * time.Millisecond // long enough for a helper to show
			}
			f.sink.onBlock = waitForCall(1, 2, patience)
			f.sink.onInsert = func(_ context.Context, call int, rows []collectors.Sample) error {
				f.record(call, rows)
				return nil
			}
			reg := prometheus.NewRegistry()
			var commits []Position
			var mu sync.Mutex
			onCommit, drained := commitsUntilDrained(f.sp.Spool)
			startShipper(t, f.sp.Spool, f.sink, splitConfig(tc.inFlight), realClock{}, reg, func(p Position) {
				mu.Lock()
				commits = append(commits, p)
				mu.Unlock()
				onCommit(p)
			})
			waitFor(t, drained, "the backlog to drain")

			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.calls) != tc.wantCalls {
				t.Fatalf("%d inserts, want %d", len(f.calls), tc.wantCalls)
			}
			if n := f.sink.peakRunning(); n != tc.wantCalls {
				t.Fatalf("%d inserts ran at once, want %d", n, tc.wantCalls)
			}
			for call, rows := range f.calls {
				if len(rows) == 0 {
					t.Fatalf("call %d inserted nothing", call)
				}
				for i := 1; i < len(rows); i++ {
					if f.order[rows[i].ID] <= f.order[rows[i-1].ID] {
						t.Fatalf("call %d: row %d comes before the row ahead of it in the batch", call, i)
					}
				}
			}
			acked := f.sink.ackedIDs()
			if len(acked) != len(f.order) {
				t.Fatalf("%d samples acknowledged, want %d", len(acked), len(f.order))
			}
			for id, n := range acked {
				if n != 1 {
					t.Fatalf("sample %x acknowledged %d times, want once", id, n)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(commits) != 1 {
				t.Fatalf("commits %v, want one past the whole batch", commits)
			}
			if got, want := metric(t, reg, "gpumeter_shipper_split_inserts_total"), float64(tc.wantCalls-1); got != want {
				t.Fatalf("split_inserts_total %v, want %v", got, want)
			}
			if got := metric(t, reg, "gpumeter_shipper_batches_total"); got != float64(tc.wantCalls) {
				t.Fatalf("batches_total %v, want %d", got, tc.wantCalls)
			}
		})
	}
}

// A helper's insert fails while the insert it helped succeeds: the batch
// is not acknowledged, the cursor stays put, and the whole batch is sent
// again; nothing is lost (the rows the first insert stored arrive twice,
// which reads deduplicate).
func TestShipperSplitInsertFailingSendsTheBatchAgain(t *testing.T) {
	f := newSplitFixture(t)
	f.sink.onBlock = waitForCall(1, 2, 20*time.Second)
	var mu sync.Mutex
	var firstRows []collectors.Sample
	f.sink.onInsert = func(_ context.Context, call int, rows []collectors.Sample) error {
		switch call {
		case 1:
			mu.Lock()
			firstRows = rows
			mu.Unlock()
		case 2:
			return errors.New("clickhouse: connection reset")
		}
		return nil
	}
	reg := prometheus.NewRegistry()
	guard, drained := newCommitGuard(f.sp.Spool, f.ids, f.sink)
	startShipper(t, f.sp.Spool, f.sink, splitConfig(2), realClock{}, reg, guard.onCommit)
	waitFor(t, drained, "the backlog to drain")
	guard.check(t)
	mu.Lock()
	defer mu.Unlock()
	if len(firstRows) == 0 || len(firstRows) == len(f.order) {
		t.Fatalf("the first insert took %d of %d rows, want a share", len(firstRows), len(f.order))
	}
	if n := metric(t, reg, "gpumeter_shipper_send_errors_total"); n != 1 {
		t.Fatalf("send_errors_total %v, want 1", n)
	}
	first := map[uint64]bool{}
	for _, x := range firstRows {
		first[x.ID] = true
	}
	acked := f.sink.ackedIDs()
	for id := range f.order {
		want := 1
		if first[id] {
			want = 2 // stored by the first attempt and by the retry
		}
		if acked[id] != want {
			t.Fatalf("sample %x acknowledged %d times, want %d", id, acked[id], want)
		}
	}
}

// Three 100,000-row inserts with three slots, inserts (helpers too)
// failing at random: the third waits until an idle slot helps it. Never more than three inserts run at once, no
// commit passes a row that was not acknowledged, and every row arrives.
func TestShipperHelpersUnderFailuresKeepTheBounds(t *testing.T) {
	sp := openSpool(t, Config{Dir: t.TempDir(), SegmentBytes: 4 << 20, MaxBytes: 1 << 30, Overflow: OverflowReject})
	var order []uint64 // sample ids in spool order
	slow := map[uint64]bool{}
	for b := range 300 {
		x := testBatch(b, 1000)
		mustAppend(t, sp.Spool, x)
		for _, s := range x {
			order = append(order, s.ID)
			slow[s.ID] = b >= 200 // the third insert
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var rngMu sync.Mutex
	sink := &fakeColumnSink{blockRows: 5000}
	// The third insert's calls hold on after each block until a second
	// call has taken one of its blocks: a helper joined (or 20 s passed).
	var slowMu sync.Mutex
	slowCalls := map[int]bool{}
	joined := make(chan struct{})
	var once sync.Once
	giveUp := time.After(20 * time.Second)
	sink.onBlock = func(ctx context.Context, call int, block []collectors.Sample) error {
		if !slow[block[0].ID] {
			return nil
		}
		slowMu.Lock()
		slowCalls[call] = true
		calls := len(slowCalls)
		slowMu.Unlock()
		if calls > 1 {
			once.Do(func() { close(joined) })
		}
		select {
		case <-joined:
		case <-giveUp:
			once.Do(func() { close(joined) })
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	sink.onInsert = func(context.Context, int, []collectors.Sample) error {
		rngMu.Lock()
		fail := rng.IntN(4) == 0
		rngMu.Unlock()
		if fail {
			return errors.New("clickhouse: connection reset")
		}
		return nil
	}
	reg := shipGuarded(t, sp.Spool, order, sink, splitConfig(3))
	if n := metric(t, reg, "gpumeter_shipper_split_inserts_total"); n == 0 {
		t.Fatal("no insert was split: the test did not exercise helpers")
	}
	acked := sink.ackedIDs()
	for _, id := range order {
		if acked[id] == 0 {
			t.Fatalf("sample %x never acknowledged", id)
		}
	}
}
