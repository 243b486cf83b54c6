package spool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
)

// fakeClock runs timers by hand (Advance) or, when auto is set, fires each
// timer as it is made, moving the time forward by its duration.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	auto    bool
	timers  []*fakeTimer
	made    []time.Duration
	created chan struct{} // receives (coalesced) when a timer is made
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

func newFakeClock(auto bool) *fakeClock {
	return &fakeClock{now: time.Date(2025, 3, 1, 0, 5, 0, 0, time.UTC), auto: auto, created: make(chan struct{}, 1)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), c: make(chan time.Time, 1)}
	c.made = append(c.made, d)
	if c.auto {
		c.now = t.at
		t.c <- c.now
	} else {
		c.timers = append(c.timers, t)
	}
	select {
	case c.created <- struct{}{}:
	default:
	}
	return t.c, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.timers {
			if x == t {
				c.timers = append(c.timers[:i], c.timers[i+1:]...)
				return
			}
		}
	}
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.c <- c.now
	}
	c.timers = kept
}

func (c *fakeClock) durations() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.made...)
}

// fakeSink records every insert it acknowledges, fails the first failures
// calls, and sends each call's row count on calls.
type fakeSink struct {
	mu       sync.Mutex
	failures int
	attempts int
	acked    [][]collectors.Sample
	cursors  []Position // the spool's committed cursor during each call
	spool    *Spool
	calls    chan int
	// onInsert, when set, runs instead of the acknowledgement logic.
	onInsert func(ctx context.Context, samples []collectors.Sample) error
}

func (s *fakeSink) InsertSamples(ctx context.Context, samples []collectors.Sample) error {
	if s.onInsert != nil {
		return s.onInsert(ctx, samples)
	}
	s.mu.Lock()
	s.attempts++
	if s.spool != nil {
		s.cursors = append(s.cursors, s.spool.Cursor())
	}
	fail := s.attempts <= s.failures
	if !fail {
		s.acked = append(s.acked, append([]collectors.Sample(nil), samples...))
	}
	s.mu.Unlock()
	if s.calls != nil {
		s.calls <- len(samples)
	}
	if fail {
		return errors.New("clickhouse: connection refused")
	}
	return nil
}

func (s *fakeSink) ackedIDs() map[uint64]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := map[uint64]int{}
	for _, b := range s.acked {
		for _, x := range b {
			ids[x.ID]++
		}
	}
	return ids
}

func testShipperConfig() ShipperConfig {
	return ShipperConfig{BatchRows: 10_000, FlushInterval: 2 * time.Second, BackoffInitial: 100 * time.Millisecond, BackoffMax: 800 * time.Millisecond}
}

// startShipper runs a shipper until the test ends; the returned stop
// cancels it and waits for Run to return, reporting its error.
func startShipper(t *testing.T, sp *Spool, sink Sink, cfg ShipperConfig, clk clock, reg prometheus.Registerer, onCommit func(Position)) (stop func() error) {
	t.Helper()
	sh, err := newShipper(sp, sink, cfg, discardLogger(), reg, shipperHooks{clock: clk, jitter: func() float64 { return 0 }, onCommit: onCommit})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- sh.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-res
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	return stop
}

// commitsUntilDrained returns an onCommit hook and a channel closed once a
// commit leaves the spool's backlog empty.
func commitsUntilDrained(sp *Spool) (func(Position), <-chan struct{}) {
	drained := make(chan struct{})
	var once sync.Once
	return func(Position) {
		if rows, _ := sp.Backlog(); rows == 0 {
			once.Do(func() { close(drained) })
		}
	}, drained
}

func waitFor(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestShipperRetriesUntilTheSinkAccepts(t *testing.T) {
	sp := openSpool(t, testConfig(t.TempDir()))
	const batches = 40 // 200 rows: one flush
	var want []collectors.Sample
	for b := range batches {
		mustAppend(t, sp.Spool, testBatch(b, 5))
		want = append(want, testBatch(b, 5)...)
	}
	sink := &fakeSink{failures: 4, spool: sp.Spool}
	clk := newFakeClock(true)
	reg := prometheus.NewRegistry()
	onCommit, drained := commitsUntilDrained(sp.Spool)
	stop := startShipper(t, sp.Spool, sink, testShipperConfig(), clk, reg, onCommit)
	waitFor(t, drained, "the backlog to drain")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	ids := sink.ackedIDs()
	for _, s := range want {
		if ids[s.ID] == 0 {
			t.Fatalf("sample %x never acknowledged", s.ID)
		}
	}
	if len(sink.acked) != 1 {
		t.Errorf("%d acknowledged inserts, want 1 (the retried one)", len(sink.acked))
	}
	equalSamples(t, sink.acked[0], want)
	for i, c := range sink.cursors {
		if c.Segment != 0 || c.Offset != 0 {
			t.Errorf("attempt %d saw the cursor at %s before the sink acknowledged anything", i+1, c)
		}
	}
	// Waits: the flush interval, then backoff 50, 100, 200, 400 ms
	// (equal jitter with r = 0 halves 100, 200, 400, 800).
	wantWaits := []time.Duration{2 * time.Second, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	got := clk.durations()
	if len(got) < len(wantWaits) {
		t.Fatalf("timers %v, want %v", got, wantWaits)
	}
	for i, w := range wantWaits {
		if got[i] != w {
			t.Fatalf("timers %v, want %v first", got, wantWaits)
		}
	}
	if n := metric(t, reg, "gpumeter_shipper_send_errors_total"); n != 4 {
		t.Errorf("send_errors_total = %v, want 4", n)
	}
	if n := metric(t, reg, "gpumeter_shipper_rows_total"); n != float64(len(want)) {
		t.Errorf("rows_total = %v, want %d", n, len(want))
	}
	if n := metric(t, reg, "gpumeter_shipper_lag_rows"); n != 0 {
		t.Errorf("lag_rows = %v after draining", n)
	}
}

func TestShipperBatchesByRowsOrFlushInterval(t *testing.T) {
	sp := openSpool(t, Config{Dir: t.TempDir(), SegmentBytes: 1 << 20, MaxBytes: 1 << 30, Overflow: OverflowReject})
	for b := range 3 {
		mustAppend(t, sp.Spool, testBatch(b, 1000))
	}
	sink := &fakeSink{calls: make(chan int, 100)}
	clk := newFakeClock(false)
	onCommit, drained := commitsUntilDrained(sp.Spool)
	stop := startShipper(t, sp.Spool, sink, testShipperConfig(), clk, nil, onCommit)

	// Low traffic: 3,000 rows wait for the flush interval, and not longer.
	waitFor(t, clk.created, "the flush timer")
	clk.Advance(time.Second)
	select {
	case n := <-sink.calls:
		t.Fatalf("sent %d rows before the flush interval passed", n)
	default:
	}
	clk.Advance(time.Second)
	if n := <-sink.calls; n != 3000 {
		t.Fatalf("first insert %d rows, want 3000", n)
	}
	// Stopping before the commit would send the 3,000 again: at least once.
	waitFor(t, drained, "the commit")
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// A backlog: 25,000 rows go as 10,000 + 10,000 at once, then the rest
	// once the flush interval passed.
	for b := 3; b < 28; b++ {
		mustAppend(t, sp.Spool, testBatch(b, 1000))
	}
	clk = newFakeClock(false)
	startShipper(t, sp.Spool, sink, testShipperConfig(), clk, prometheus.NewRegistry(), nil)
	for _, want := range []int{10_000, 10_000} {
		if n := <-sink.calls; n != want {
			t.Fatalf("insert of %d rows, want %d", n, want)
		}
	}
	waitFor(t, clk.created, "the flush timer")
	select {
	case n := <-sink.calls:
		t.Fatalf("sent %d rows before the flush interval passed", n)
	default:
	}
	clk.Advance(2 * time.Second)
	if n := <-sink.calls; n != 5000 {
		t.Fatalf("last insert %d rows, want 5000", n)
	}
}

func TestShipperSplitsABatchLargerThanBatchRows(t *testing.T) {
	sp := openSpool(t, Config{Dir: t.TempDir(), SegmentBytes: 8 << 20, MaxBytes: 1 << 30, Overflow: OverflowReject})
	mustAppend(t, sp.Spool, testBatch(0, 25_000))
	sink := &fakeSink{calls: make(chan int, 100)}
	onCommit, drained := commitsUntilDrained(sp.Spool)
	startShipper(t, sp.Spool, sink, testShipperConfig(), newFakeClock(true), nil, onCommit)
	waitFor(t, drained, "the backlog to drain")
	for _, want := range []int{10_000, 10_000, 5000} {
		if n := <-sink.calls; n != want {
			t.Fatalf("insert of %d rows, want %d", n, want)
		}
	}
	equalSamples(t, samplesOf([]Batch{{Samples: append(append(sink.acked[0], sink.acked[1]...), sink.acked[2]...)}}), testBatch(0, 25_000))
}

// The process dies after ClickHouse took the insert and before the cursor
// moved: the batch is sent again after a restart, which the store's dedup
// by sample_id absorbs. The sink cancels the run to play the death.
func TestShipperResendsWhatItDiedBeforeCommitting(t *testing.T) {
	dir := t.TempDir()
	sp := openSpool(t, testConfig(dir))
	for b := range 10 {
		mustAppend(t, sp.Spool, testBatch(b, 5))
	}
	ctx, die := context.WithCancel(context.Background())
	var inserted []collectors.Sample
	dying := &fakeSink{onInsert: func(_ context.Context, samples []collectors.Sample) error {
		inserted = append(inserted, samples...)
		die()
		return context.Canceled
	}}
	sh, err := newShipper(sp.Spool, dying, testShipperConfig(), discardLogger(), nil, shipperHooks{clock: newFakeClock(true), jitter: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(inserted) != 50 {
		t.Fatalf("inserted %d rows before dying, want 50", len(inserted))
	}
	if c := sp.Cursor(); c.Segment != 0 {
		t.Fatalf("cursor moved to %s without an acknowledgement", c)
	}
	sp.Close()

	sp = openSpool(t, testConfig(dir))
	mustAppend(t, sp.Spool, testBatch(10, 5))
	sink := &fakeSink{}
	onCommit, drained := commitsUntilDrained(sp.Spool)
	startShipper(t, sp.Spool, sink, testShipperConfig(), newFakeClock(true), nil, onCommit)
	waitFor(t, drained, "the backlog to drain")
	ids := sink.ackedIDs()
	for _, s := range inserted {
		if ids[s.ID] != 1 {
			t.Fatalf("sample %x of the uncommitted insert sent %d times after the restart, want 1", s.ID, ids[s.ID])
		}
	}
	if len(ids) != 55 {
		t.Fatalf("%d distinct samples after the restart, want 55", len(ids))
	}
}

func TestShipperStopsOnCancelWhileTheSinkHangs(t *testing.T) {
	sp := openSpool(t, testConfig(t.TempDir()))
	mustAppend(t, sp.Spool, testBatch(0, 5))
	entered := make(chan struct{})
	sink := &fakeSink{onInsert: func(ctx context.Context, _ []collectors.Sample) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	}}
	stop := startShipper(t, sp.Spool, sink, testShipperConfig(), newFakeClock(true), nil, nil)
	waitFor(t, entered, "the insert")
	if err := stop(); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if rows, _ := sp.Backlog(); rows != 5 {
		t.Fatalf("backlog %d rows, want the 5 never acknowledged", rows)
	}
}

func TestShipperLagMetrics(t *testing.T) {
	sp := openSpool(t, testConfig(t.TempDir()))
	mustAppend(t, sp.Spool, testBatch(0, 5))
	mustAppend(t, sp.Spool, testBatch(1, 5))
	entered := make(chan struct{})
	release := make(chan struct{})
	sink := &fakeSink{onInsert: func(ctx context.Context, _ []collectors.Sample) error {
		close(entered)
		<-release
		return nil
	}}
	clk := newFakeClock(true)
	reg := prometheus.NewRegistry()
	onCommit, drained := commitsUntilDrained(sp.Spool)
	startShipper(t, sp.Spool, sink, testShipperConfig(), clk, reg, onCommit)
	waitFor(t, entered, "the insert")

	_, wantBytes := sp.Backlog()
	if n := metric(t, reg, "gpumeter_shipper_lag_rows"); n != 10 {
		t.Errorf("lag_rows = %v, want 10", n)
	}
	if n := metric(t, reg, "gpumeter_shipper_lag_bytes"); n != float64(wantBytes) || n == 0 {
		t.Errorf("lag_bytes = %v, want %d", n, wantBytes)
	}
	// The oldest sample ended at testBatch(0)'s End; the clock stands
	// where the flush timer left it.
	want := clk.Now().Sub(testBatch(0, 1)[0].End).Seconds()
	if n := metric(t, reg, "gpumeter_shipper_lag_seconds"); n != want {
		t.Errorf("lag_seconds = %v, want %v", n, want)
	}
	close(release)
	waitFor(t, drained, "the backlog to drain")
	for _, name := range []string{"gpumeter_shipper_lag_rows", "gpumeter_shipper_lag_bytes", "gpumeter_shipper_lag_seconds"} {
		if n := metric(t, reg, name); n != 0 {
			t.Errorf("%s = %v after draining", name, n)
		}
	}
}

func TestShipperCommitsPastACorruptRegion(t *testing.T) {
	dir := t.TempDir()
	sp := openSpool(t, testConfig(dir))
	for b := range 30 {
		mustAppend(t, sp.Spool, testBatch(b, 5))
	}
	sp.Close()
	spans := recordSpans(t, dir)
	// The last record of the first segment: nothing whole follows it there.
	i := 0
	for spans[i+1].path == spans[0].path {
		i++
	}
	flipByte(t, spans[i].path, spans[i].end-1)

	sp = openSpool(t, testConfig(dir))
	sink := &fakeSink{}
	onCommit, drained := commitsUntilDrained(sp.Spool)
	startShipper(t, sp.Spool, sink, testShipperConfig(), newFakeClock(true), nil, onCommit)
	waitFor(t, drained, "the backlog to drain")
	if ids := sink.ackedIDs(); len(ids) != 29*5 {
		t.Fatalf("%d samples shipped, want %d", len(ids), 29*5)
	}
	if files := segFiles(t, dir); len(files) != 1 {
		t.Fatalf("segments %v left after shipping everything, want the active one", files)
	}
	if n := metric(t, sp.reg, "gpumeter_spool_corrupt_regions_total"); n != 1 {
		t.Fatalf("corrupt_regions_total = %v", n)
	}
}

func TestBackoffDelay(t *testing.T) {
	const initial, ceiling = 500 * time.Millisecond, 30 * time.Second
	tests := []struct {
		name    string
		attempt int
		r       float64
		want    time.Duration
	}{
		{"first retry waits half to all of initial, low end", 0, 0, 250 * time.Millisecond},
		{"first retry waits half to all of initial, high end", 0, 0.999999, 499_999_750 * time.Nanosecond},
		{"each retry doubles", 3, 0, 2 * time.Second},
		{"the cap holds", 10, 0, 15 * time.Second},
		{"the cap holds with jitter", 60, 0.5, 22_500 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := backoffDelay(tc.attempt, initial, ceiling, tc.r); got != tc.want {
				t.Fatalf("backoffDelay(%d, r=%v) = %v, want %v", tc.attempt, tc.r, got, tc.want)
			}
		})
	}
}

func TestShipperConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*ShipperConfig)
		wantErr bool
	}{
		{"defaults are valid", func(*ShipperConfig) {}, false},
		{"batches below 10k rows are refused", func(c *ShipperConfig) { c.BatchRows = 9_999 }, true},
		{"batches above 100k rows are refused", func(c *ShipperConfig) { c.BatchRows = 100_001 }, true},
		{"the flush interval must be positive", func(c *ShipperConfig) { c.FlushInterval = 0 }, true},
		{"the flush interval is at most a minute", func(c *ShipperConfig) { c.FlushInterval = time.Minute + 1 }, true},
		{"backoff max must not be below initial", func(c *ShipperConfig) { c.BackoffMax = c.BackoffInitial - 1 }, true},
		{"backoff initial must be positive", func(c *ShipperConfig) { c.BackoffInitial = 0 }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultShipperConfig()
			tc.edit(&c)
			if err := c.Validate(); (err != nil) != tc.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tc.wantErr)
			}
		})
	}
	sp := openSpool(t, testConfig(t.TempDir()))
	if _, err := NewShipper(sp.Spool, &fakeSink{}, ShipperConfig{}, slog.New(slog.DiscardHandler), nil); err == nil {
		t.Fatal("NewShipper accepted an invalid config")
	}
}

// A spool written before Append validated could hold a sample the store
// refuses forever: the shipper drops it (counted) and delivers the rest.
func TestShipperDropsSpooledSamplesTheStoreCannotAccept(t *testing.T) {
	reg := prometheus.NewRegistry()
	var got []collectors.Sample
	sink := &fakeSink{onInsert: func(_ context.Context, samples []collectors.Sample) error {
		for i := range samples {
			if err := samples[i].Validate(); err != nil {
				return fmt.Errorf("insert samples: sample %d: %w", i, err)
			}
		}
		got = append(got, samples...)
		return nil
	}}
	o := openSpool(t, testConfig(t.TempDir()))
	sh, err := newShipper(o.Spool, sink, testShipperConfig(), discardLogger(), reg, shipperHooks{clock: newFakeClock(true), jitter: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	batch := testBatch(0, 10)
	batch[3].Host = "" // invalid
	batch[8].End = batch[8].Start
	var p pending
	p.add(Batch{Samples: batch, Segment: 1}, time.Now())
	if !sh.send(context.Background(), &p) {
		t.Fatal("send gave up")
	}
	if len(got) != 8 || p.sent != 8 {
		t.Fatalf("delivered %d samples (sent %d), want the 8 valid ones", len(got), p.sent)
	}
	for _, s := range got {
		if s.ID == batch[3].ID || s.ID == batch[8].ID {
			t.Fatalf("an invalid sample was delivered: %+v", s)
		}
	}
	if n := metric(t, reg, "gpumeter_shipper_invalid_rows_total"); n != 2 {
		t.Fatalf("invalid_rows_total = %v, want 2", n)
	}
}
