package spool

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

// settleDropped squares what a shipper holds with drops: unsent rows of
// dropped segments are discarded, sent ones reported once.
func TestSettleDropped(t *testing.T) {
	tests := []struct {
		name        string
		segs        []uint64
		sent, late  int
		dropped     uint64
		wantSegs    []uint64
		wantLate    int
		wantReports float64
	}{
		{"nothing dropped", []uint64{1, 1, 2}, 1, 0, 0, []uint64{1, 1, 2}, 0, 0},
		{"drop below what is held", []uint64{3, 3, 4}, 1, 0, 2, []uint64{3, 3, 4}, 0, 0},
		{"unsent rows of a dropped segment go", []uint64{1, 1, 2, 2, 3}, 0, 0, 2, []uint64{3}, 0, 0},
		{"sent rows are reported, unsent go", []uint64{1, 1, 2, 2, 3}, 3, 0, 2, []uint64{1, 1, 2, 3}, 3, 3},
		{"reported once", []uint64{1, 1, 2, 3}, 3, 3, 2, []uint64{1, 1, 2, 3}, 3, 0},
		{"a later drop reports the rest", []uint64{1, 1, 2, 3}, 4, 3, 3, []uint64{1, 1, 2, 3}, 4, 1},
		{"all sent, part dropped", []uint64{5, 6, 6}, 3, 0, 5, []uint64{5, 6, 6}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := openSpool(t, testConfig(t.TempDir()))
			sh, err := newShipper(o.Spool, &fakeSink{}, testShipperConfig(), discardLogger(), nil, shipperHooks{clock: newFakeClock(true), jitter: func() float64 { return 0 }})
			if err != nil {
				t.Fatal(err)
			}
			p := pending{sent: tt.sent, late: tt.late}
			for i, seg := range tt.segs {
				p.samples = append(p.samples, collectors.Sample{ID: uint64(i + 1)})
				p.segs = append(p.segs, seg)
			}
			sh.settleDropped(&p, tt.dropped)
			if !equalUints(p.segs, tt.wantSegs) || len(p.samples) != len(p.segs) {
				t.Fatalf("segments left %v (%d samples), want %v", p.segs, len(p.samples), tt.wantSegs)
			}
			if p.late != tt.wantLate || p.sent != tt.sent {
				t.Fatalf("late %d sent %d, want late %d sent %d", p.late, p.sent, tt.wantLate, tt.sent)
			}
			if got := metric(t, o.reg, "gpumeter_spool_dropped_rows_delivered_total"); got != tt.wantReports {
				t.Fatalf("dropped_rows_delivered_total = %v, want %v", got, tt.wantReports)
			}
		})
	}
}

func equalUints(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Issue 9 soak finding: under drop_oldest, a segment dropped while the
// shipper held rows read from it (read ahead, pending, or in an insert in
// flight) had those rows counted as lost and then stored as well, so
// stored + dropped over-counted. Now every appended row is stored or
// counted lost, never both: stored + dropped − delivered anyway =
// appended, exactly. (Before the fix this failed by the rows the shipper
// held when their segment went.)
func TestDropOldestUnderAShipperCountsEveryRowOnce(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxBytes = 3 * cfg.SegmentBytes
	o := openSpool(t, cfg)

	var mu sync.Mutex
	acked := map[uint64]bool{}
	var appendMu sync.Mutex
	appended, next := 0, 0
	const batches = 600
	appendOne := func() {
		appendMu.Lock()
		defer appendMu.Unlock()
		if next == batches {
			return
		}
		b := testBatch(next, 4)
		next++
		if err := o.Append(context.Background(), b); err != nil {
			t.Errorf("append: %v", err)
			return
		}
		appended += len(b)
	}
	sink := &fakeSink{onInsert: func(_ context.Context, samples []collectors.Sample) error {
		// Appends while the insert is in flight drop the segments the
		// insert is made of, and those the shipper read ahead.
		for range 12 {
			appendOne()
		}
		time.Sleep(time.Millisecond) // an insert takes time
		mu.Lock()
		for i := range samples {
			acked[samples[i].ID] = true
		}
		mu.Unlock()
		return nil
	}}
	shcfg := testShipperConfig()
	shcfg.FlushInterval = minFlushInterval
	drained := make(chan struct{})
	var once sync.Once
	stop := startShipper(t, o.Spool, sink, shcfg, realClock{}, o.reg, func(Position) {
		appendMu.Lock()
		done := next == batches
		appendMu.Unlock()
		if rows, _ := o.Backlog(); done && rows == 0 {
			once.Do(func() { close(drained) })
		}
	})
	for range 100 {
		appendOne()
	}
	waitFor(t, drained, "the shipper to drain every batch")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	dropped := metric(t, o.reg, "gpumeter_spool_dropped_rows_total")
	late := metric(t, o.reg, "gpumeter_spool_dropped_rows_delivered_total")
	mu.Lock()
	stored := len(acked)
	mu.Unlock()
	appendMu.Lock()
	total := appended
	appendMu.Unlock()
	t.Logf("appended %d, stored %d, dropped %v, of them delivered anyway %v", total, stored, dropped, late)
	if dropped == 0 {
		t.Fatal("nothing was dropped: the test did not exercise drop_oldest")
	}
	if got := float64(stored) + dropped - late; got != float64(total) {
		t.Fatalf("stored %d + dropped %v − delivered anyway %v = %v, appended %d", stored, dropped, late, got, total)
	}
}
