package spool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
)

// Sink takes delivered batches. A nil error is the acknowledgement after
// which the shipper commits; the sink must not keep or change samples. The
// shipper calls it from one goroutine at a time.
type Sink interface {
	InsertSamples(ctx context.Context, samples []collectors.Sample) error
}

// ColumnSink is a Sink that also takes rows column by column;
// internal/store.Store implements it. For a ColumnSink the shipper decodes
// the spool straight into Columns and keeps up to ShipperConfig.InFlight
// inserts running at once, so it must be safe for concurrent use.
type ColumnSink interface {
	Sink
	// InsertColumns validates cols (invalid rows: an error, nothing sent)
	// and inserts them; nil is the acknowledgement. The sink reads cols
	// only until it returns, and must not keep or change them.
	InsertColumns(ctx context.Context, cols *Columns) error
}

// Shipper defaults and bounds. ClickHouse wants few large inserts (10k to
// 100k rows); the flush interval bounds delivery delay when traffic is low.
const (
	DefaultBatchRows      = 100_000
	DefaultFlushInterval  = 2 * time.Second
	DefaultBackoffInitial = 500 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second
	DefaultInFlight       = 2

	minBatchRows     = 10_000
	maxBatchRows     = 100_000
	minFlushInterval = 10 * time.Millisecond
	maxFlushInterval = time.Minute
	minBackoff       = 10 * time.Millisecond
	maxBackoff       = 10 * time.Minute
	maxInFlight      = 8
)

// ShipperConfig tunes a Shipper.
type ShipperConfig struct {
	// BatchRows is the most rows sent in one insert; a single spooled batch
	// larger than that is sent in several inserts, committed together.
	BatchRows int `yaml:"batch_rows"`
	// FlushInterval is how long rows wait for a batch to fill before they
	// are sent anyway.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// BackoffInitial and BackoffMax bound the jittered exponential wait
	// between failed attempts.
	BackoffInitial time.Duration `yaml:"backoff_initial"`
	BackoffMax     time.Duration `yaml:"backoff_max"`
	// InFlight is how many inserts may run at once (0: DefaultInFlight),
	// for a ColumnSink; a plain Sink gets one at a time. The cursor still
	// moves only past rows the sink acknowledged, with everything before
	// them: at most InFlight inserts are read and not committed.
	InFlight int `yaml:"inserts_in_flight"`
}

// inFlight is InFlight with 0 read as the default.
func (c ShipperConfig) inFlight() int {
	if c.InFlight == 0 {
		return DefaultInFlight
	}
	return c.InFlight
}

// DefaultShipperConfig returns the defaults.
func DefaultShipperConfig() ShipperConfig {
	return ShipperConfig{
		BatchRows:      DefaultBatchRows,
		FlushInterval:  DefaultFlushInterval,
		BackoffInitial: DefaultBackoffInitial,
		BackoffMax:     DefaultBackoffMax,
		InFlight:       DefaultInFlight,
	}
}

// Validate reports every problem with the config, joined.
func (c ShipperConfig) Validate() error {
	var errs []error
	if c.BatchRows < minBatchRows || c.BatchRows > maxBatchRows {
		errs = append(errs, fmt.Errorf("batch_rows: %d is outside [%d, %d]", c.BatchRows, minBatchRows, maxBatchRows))
	}
	if c.FlushInterval < minFlushInterval || c.FlushInterval > maxFlushInterval {
		errs = append(errs, fmt.Errorf("flush_interval: %s is outside [%s, %s]", c.FlushInterval, minFlushInterval, maxFlushInterval))
	}
	if c.BackoffInitial < minBackoff || c.BackoffInitial > maxBackoff {
		errs = append(errs, fmt.Errorf("backoff_initial: %s is outside [%s, %s]", c.BackoffInitial, minBackoff, maxBackoff))
	}
	if c.BackoffMax < c.BackoffInitial || c.BackoffMax > maxBackoff {
		errs = append(errs, fmt.Errorf("backoff_max: %s is outside [backoff_initial %s, %s]", c.BackoffMax, c.BackoffInitial, maxBackoff))
	}
	if c.InFlight < 0 || c.InFlight > maxInFlight {
		errs = append(errs, fmt.Errorf("inserts_in_flight: %d is outside [1, %d] (0: %d)", c.InFlight, maxInFlight, DefaultInFlight))
	}
	return errors.Join(errs...)
}

// backoffDelay is the wait before retry number attempt (0 first): doubling
// from initial, capped at max, with equal jitter (half fixed, half random
// by r in [0, 1)) so that a fleet of collectors does not retry in step.
func backoffDelay(attempt int, initial, max time.Duration, r float64) time.Duration {
	d := initial
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d/2 + time.Duration(r*float64(d/2))
}

// clock is the shipper's time, a fake one in tests.
type clock interface {
	Now() time.Time
	// NewTimer returns a channel that receives once d has passed, and a
	// function that releases the timer.
	NewTimer(d time.Duration) (<-chan time.Time, func())
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// shipperHooks let tests see inside the loop without sleeping.
type shipperHooks struct {
	clock    clock
	jitter   func() float64
	onCommit func(Position) // after each successful commit
}

// Shipper sends spooled batches to a Sink, at least once: the cursor moves
// only after the sink acknowledged every row before it.
type Shipper struct {
	spool   *Spool
	sink    Sink
	columns ColumnSink // sink, when it takes columns
	cfg     ShipperConfig
	log     *slog.Logger
	hooks   shipperHooks
	m       shipperMetrics

	mu     sync.Mutex
	oldest time.Time // End of the oldest sample read but not yet committed
}

type shipperMetrics struct {
	batches      prometheus.Counter
	rows         prometheus.Counter
	sendErrors   prometheus.Counter
	commitErrors prometheus.Counter
	readErrors   prometheus.Counter
	invalidRows  prometheus.Counter
	sendSeconds  prometheus.Histogram
}

// NewShipper returns a shipper from sp to sink; start it with Run. Metrics
// are registered with reg when it is not nil; a nil logger discards.
func NewShipper(sp *Spool, sink Sink, cfg ShipperConfig, logger *slog.Logger, reg prometheus.Registerer) (*Shipper, error) {
	return newShipper(sp, sink, cfg, logger, reg, shipperHooks{clock: realClock{}, jitter: rand.Float64})
}

func newShipper(sp *Spool, sink Sink, cfg ShipperConfig, logger *slog.Logger, reg prometheus.Registerer, hooks shipperHooks) (*Shipper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new shipper: invalid config: %w", err)
	}
	if sp == nil || sink == nil {
		return nil, errors.New("new shipper: spool and sink are required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Shipper{spool: sp, sink: sink, cfg: cfg, log: logger.With("component", "shipper"), hooks: hooks}
	s.columns, _ = sink.(ColumnSink)
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gpumeter", Subsystem: "shipper", Name: name, Help: help})
	}
	s.m = shipperMetrics{
		batches:      c("batches_total", "Inserts the sink acknowledged."),
		rows:         c("rows_total", "Samples the sink acknowledged (at least once: a restart may send some again)."),
		sendErrors:   c("send_errors_total", "Inserts the sink failed; each is retried after a backoff."),
		commitErrors: c("commit_errors_total", "Cursor commits that failed; retried after a backoff."),
		readErrors:   c("read_errors_total", "Spool reads that failed with an I/O error (corrupt regions are counted by the spool)."),
		invalidRows:  c("invalid_rows_total", "Spooled samples the store would never accept (they fail validation), dropped so they cannot block delivery."),
		sendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "gpumeter", Subsystem: "shipper", Name: "send_duration_seconds",
			Help:    "Time the sink took per insert, failed ones included.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpumeter", Subsystem: "shipper", Name: name, Help: help}, f)
	}
	cs := []prometheus.Collector{
		s.m.batches, s.m.rows, s.m.sendErrors, s.m.commitErrors, s.m.readErrors, s.m.invalidRows, s.m.sendSeconds,
		gauge("lag_rows", "Spooled samples not yet behind the committed cursor.", func() float64 { r, _ := sp.Backlog(); return float64(r) }),
		gauge("lag_bytes", "Spooled record bytes not yet behind the committed cursor.", func() float64 { _, b := sp.Backlog(); return float64(b) }),
		gauge("lag_seconds", "Age (since its end) of the oldest sample read and not yet acknowledged; 0 when caught up.", s.lagSeconds),
	}
	if err := register(reg, cs); err != nil {
		return nil, fmt.Errorf("new shipper: %w", err)
	}
	return s, nil
}

func (s *Shipper) lagSeconds() float64 {
	s.mu.Lock()
	oldest := s.oldest
	s.mu.Unlock()
	if oldest.IsZero() {
		return 0
	}
	return max(0, s.hooks.clock.Now().Sub(oldest).Seconds())
}

// pending is one insert's worth of rows read and not yet committed: being
// filled, being sent, or acknowledged and waiting for the inserts before
// it. Its rows are in samples for a plain Sink, in cols for a ColumnSink.
type pending struct {
	samples []collectors.Sample
	cols    *Columns
	segs    []uint64  // segs[i] is the segment row i was read from (ascending)
	sent    int       // rows [:sent] acknowledged
	late    int       // rows [:late] are sent rows of dropped segments already reported
	next    Position  // commit this once all are sent (and every pending before)
	moved   bool      // next lies past the committed cursor
	left    bool      // the next spooled batch did not fit: full
	done    bool      // acknowledged whole (set by Run, not by the sender)
	firstAt time.Time // when the first row was read
	oldest  time.Time
}

// rows is how many rows p holds.
func (p *pending) rows() int { return len(p.segs) }

// grow makes room for n rows in all.
func (p *pending) grow(n int) {
	n -= p.rows()
	if n <= 0 {
		return
	}
	p.segs = slices.Grow(p.segs, n)
	if p.cols != nil {
		p.cols.Grow(n)
	} else {
		p.samples = slices.Grow(p.samples, n)
	}
}

// add appends a batch read with Read.
func (p *pending) add(b Batch, now time.Time) {
	if p.rows() == 0 {
		p.firstAt = now
	}
	if p.cols != nil {
		p.cols.AppendSamples(b.Samples)
	} else {
		p.samples = append(p.samples, b.Samples...)
	}
	for range b.Samples {
		p.segs = append(p.segs, b.Segment)
	}
	p.oldest = earliest(p.oldest, oldestEnd(b.Samples))
	p.next, p.moved = b.Next, true
}

// addColumns records a batch that readColumns appended to p.cols from row
// from on.
func (p *pending) addColumns(b Batch, from int, now time.Time) {
	if p.rows() == 0 {
		p.firstAt = now
	}
	c := p.cols
	for range c.Len() - from {
		p.segs = append(p.segs, b.Segment)
	}
	if from < c.Len() {
		k := from
		for i := from + 1; i < c.Len(); i++ {
			if c.EndSeconds[i] < c.EndSeconds[k] || (c.EndSeconds[i] == c.EndSeconds[k] && c.EndNanos[i] < c.EndNanos[k]) {
				k = i
			}
		}
		p.oldest = earliest(p.oldest, c.End(k))
	}
	p.next, p.moved = b.Next, true
}

// deleteRows removes rows [lo, hi).
func (p *pending) deleteRows(lo, hi int) {
	if p.cols != nil {
		p.cols.deleteRows(lo, hi)
	} else {
		clear(p.samples[lo:hi])
		p.samples = slices.Delete(p.samples, lo, hi)
	}
	p.segs = slices.Delete(p.segs, lo, hi)
}

// row returns row i as a sample.
func (p *pending) row(i int) collectors.Sample {
	if p.cols != nil {
		return p.cols.Row(i)
	}
	return p.samples[i]
}

// oldestEnd is the earliest End among samples, zero when there is none.
func oldestEnd(samples []collectors.Sample) time.Time {
	var t time.Time
	for i := range samples {
		t = earliest(t, samples[i].End)
	}
	return t
}

// earliest returns the earlier of two times, a zero time counting as none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// reset empties p for reuse, keeping its buffers.
func (p *pending) reset() {
	clear(p.samples) // let the strings go
	if p.cols != nil {
		p.cols.Reset()
	}
	*p = pending{samples: p.samples[:0], cols: p.cols, segs: p.segs[:0]}
}

// settleDropped squares p with the spool's drop_oldest deletions, every
// segment up to dropped being gone and its rows after the cursor counted
// as lost. Rows of those segments not yet sent are discarded, so that they
// are lost as counted rather than stored as well; rows already sent are
// reported to the spool once, as counted but delivered.
func (s *Shipper) settleDropped(p *pending, dropped uint64) {
	if dropped == 0 || len(p.segs) == 0 || p.segs[0] > dropped {
		return
	}
	k, _ := slices.BinarySearch(p.segs, dropped+1) // rows [:k] come from dropped segments
	if late := min(p.sent, k); late > p.late {
		s.spool.DroppedRowsDelivered(late - p.late)
		p.late = late
	}
	if k > p.sent {
		s.log.Debug("shipper discards rows of dropped segments", "rows", k-p.sent)
		p.deleteRows(p.sent, k)
	}
}

// Run ships until ctx is cancelled, then returns nil. It starts from the
// committed cursor, so batches an earlier run read but did not commit are
// sent again. Sink and commit failures are retried with backoff, never
// returned; only a closed spool ends Run with an error.
//
// One goroutine (this one) reads the spool, hands each full (or due)
// pending to a sender goroutine and commits; the senders only insert. The
// pendings handed out and not yet committed form a window in read order,
// at most InFlight long (one for a plain Sink). The cursor moves to the
// end of the longest run of acknowledged pendings at the window's head,
// so it never passes a row that is not acknowledged, whatever order the
// inserts finish in.
func (s *Shipper) Run(ctx context.Context) error {
	s.spool.Rewind()
	defer s.setOldest(time.Time{})
	inFlight := 1
	if s.columns != nil {
		inFlight = s.cfg.inFlight()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // before the Wait: the senders stop with ctx
	// Buffered: the senders running never outnumber inFlight, and each
	// reports once.
	done := make(chan sendResult, inFlight)
	var window, free []*pending
	fill := s.newPending(&free)
	readAttempt := 0
	for {
		if ctx.Err() != nil {
			return nil
		}
		if err := s.fill(ctx, fill); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrClosed) {
				return fmt.Errorf("ship: %w", err)
			}
			s.m.readErrors.Inc()
			s.log.Error("shipper cannot read the spool", "err", err, "attempt", readAttempt+1)
			if !s.wait(ctx, backoffDelay(readAttempt, s.cfg.BackoffInitial, s.cfg.BackoffMax, s.hooks.jitter())) {
				return nil
			}
			readAttempt++
			continue
		}
		readAttempt = 0
		s.setOldest(heldOldest(window, fill))

		now := s.hooks.clock.Now()
		full := fill.rows() >= s.cfg.BatchRows || fill.left
		due := fill.rows() > 0 && !now.Before(fill.firstAt.Add(s.cfg.FlushInterval))
		switch {
		case (full || due) && len(window) < inFlight:
			window = append(window, fill)
			p := fill
			wg.Go(func() {
				// Buffered (see done).
				done <- sendResult{p: p, ok: s.send(ctx, p)}
			})
			fill = s.newPending(&free)
			if full {
				// A full batch means a backlog: the next one will most
				// likely fill too, so it gets its room at once rather than
				// by doubling, which allocates and copies about twice over.
				fill.grow(s.cfg.BatchRows)
			}
			continue
		case fill.rows() == 0 && fill.moved && len(window) == 0:
			// Only a skipped corrupt region: commit past it so its segment
			// can go.
			window = append(window, fill)
			fill.done = true
			fill = s.newPending(&free)
		default:
			r, ok := s.waitForEvent(ctx, fill, len(window) > 0, full, done, now)
			if !ok {
				return nil
			}
			if r.p == nil {
				continue
			}
			// Take what else has finished, then commit the acknowledged head.
			for more := true; more; {
				if !r.ok {
					return nil // the sender gave up because ctx ended
				}
				r.p.done = true
				select {
				case r = <-done:
				default:
					more = false
				}
			}
		}
		k := 0
		for k < len(window) && window[k].done {
			k++
		}
		if k == 0 {
			continue
		}
		committed := window[k-1].next
		dropped, ok, err := s.commit(ctx, committed)
		if !ok {
			return err
		}
		for _, p := range window[:k] {
			s.settleDropped(p, dropped)
			p.reset()
			free = append(free, p)
		}
		window = slices.Delete(window, 0, k)
		s.setOldest(heldOldest(window, fill))
		if s.hooks.onCommit != nil {
			s.hooks.onCommit(committed)
		}
	}
}

// newPending returns a pending to fill, reusing a committed one.
func (s *Shipper) newPending(free *[]*pending) *pending {
	if n := len(*free); n > 0 {
		p := (*free)[n-1]
		*free = (*free)[:n-1]
		return p
	}
	p := &pending{}
	if s.columns != nil {
		p.cols = &Columns{}
	}
	return p
}

// heldOldest is the End of the oldest row read and not committed.
func heldOldest(window []*pending, fill *pending) time.Time {
	t := fill.oldest
	for _, p := range window {
		t = earliest(t, p.oldest)
	}
	return t
}

// fill reads whole batches into p until it holds BatchRows rows, the next
// batch would overfill it (left in the spool for the next pending), or the
// spool is caught up.
func (s *Shipper) fill(ctx context.Context, p *pending) error {
	for p.rows() < s.cfg.BatchRows && !p.left {
		room := s.cfg.BatchRows - p.rows()
		var b Batch
		var st readStatus
		var err error
		from := 0
		if p.cols != nil {
			from = p.cols.Len()
			b, st, err = s.spool.readColumns(ctx, p.cols, room)
		} else {
			var samples []collectors.Sample
			b, st, err = s.spool.read(ctx, func(payload []byte, rows uint32) (bool, error) {
				if int64(rows) > int64(room) && p.rows() > 0 {
					return false, nil
				}
				var err error
				samples, err = decodeBatch(payload, rows)
				return true, err
			})
			b.Samples = samples
		}
		if errors.Is(err, ErrCorruptSegment) {
			// The spool logged and counted it; move past it.
			p.next, p.moved = b.Next, true
			continue
		}
		if err != nil {
			return err
		}
		switch st {
		case readCaughtUp:
			return nil
		case readLeft:
			p.left = true
			return nil
		}
		if p.cols != nil {
			p.addColumns(b, from, s.hooks.clock.Now())
		} else {
			p.add(b, s.hooks.clock.Now())
		}
	}
	return nil
}

// sendResult is a sender's report: ok false means ctx ended before the
// sink acknowledged p.
type sendResult struct {
	p  *pending
	ok bool
}

// waitForEvent waits for an append (unless fill is full), fill's flush
// deadline, a sender finishing, or ctx. It returns the sender's report,
// if that is what came, and false when ctx ended. The flush deadline is
// armed only while no insert runs: with one running, its end wakes the
// loop anyway, and a deadline passed in the meantime is seen then.
func (s *Shipper) waitForEvent(ctx context.Context, fill *pending, sending, full bool, done <-chan sendResult, now time.Time) (sendResult, bool) {
	var deadline <-chan time.Time
	if fill.rows() > 0 && !sending {
		c, stop := s.hooks.clock.NewTimer(fill.firstAt.Add(s.cfg.FlushInterval).Sub(now))
		defer stop()
		deadline = c
	}
	var appended <-chan struct{}
	if !full {
		appended = s.spool.Appended()
	}
	var finished <-chan sendResult
	if sending {
		finished = done
	}
	select {
	case <-ctx.Done():
		return sendResult{}, false
	case <-appended:
	case <-deadline:
	case r := <-finished:
		return r, true
	}
	return sendResult{}, true
}

// send delivers p's rows from p.sent on in inserts of at most BatchRows,
// retrying each failed insert after a backoff. It returns false when ctx
// ended first.
func (s *Shipper) send(ctx context.Context, p *pending) bool {
	for attempt := 0; ; {
		s.settleDropped(p, s.spool.DroppedThrough())
		if p.sent >= p.rows() {
			return true
		}
		hi := min(p.rows(), p.sent+s.cfg.BatchRows)
		start := s.hooks.clock.Now()
		var err error
		if p.cols != nil {
			chunk := p.cols.View(p.sent, hi)
			err = s.columns.InsertColumns(ctx, &chunk)
		} else {
			err = s.sink.InsertSamples(ctx, p.samples[p.sent:hi])
		}
		s.m.sendSeconds.Observe(s.hooks.clock.Now().Sub(start).Seconds())
		if err == nil {
			s.m.batches.Inc()
			s.m.rows.Add(float64(hi - p.sent))
			p.sent = hi
			attempt = 0
			// A drop during the insert counted these rows as lost.
			s.settleDropped(p, s.spool.DroppedThrough())
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		if n := s.dropInvalid(p, hi); n > 0 {
			// Retrying would fail forever; what is left is sent at once.
			continue
		}
		s.m.sendErrors.Inc()
		delay := backoffDelay(attempt, s.cfg.BackoffInitial, s.cfg.BackoffMax, s.hooks.jitter())
		// Warn, not Error: the rows are safe in the spool while we retry.
		s.log.Warn("shipper insert failed, retrying", "rows", hi-p.sent, "attempt", attempt+1, "retry_in", delay, "err", err)
		attempt++
		if !s.wait(ctx, delay) {
			return false
		}
	}
}

// dropInvalid removes the rows of p in [p.sent, hi) that fail validation
// (spools written before Append validated could hold some), logging and
// counting them, and returns how many it removed.
func (s *Shipper) dropInvalid(p *pending, hi int) int {
	var bad []int
	for i := p.sent; i < hi; i++ {
		x := p.row(i)
		if err := x.Validate(); err != nil {
			s.log.Error("shipper drops a spooled sample the store cannot accept", "sample_id", x.ID, "err", err)
			bad = append(bad, i)
		}
	}
	for _, i := range slices.Backward(bad) {
		p.deleteRows(i, i+1)
	}
	s.m.invalidRows.Add(float64(len(bad)))
	return len(bad)
}

// commit moves the cursor to pos, retrying after a backoff on failure. It
// returns false when ctx ended first (err nil: the rows are then sent again
// by the next run, which the store's dedup by sample_id absorbs) or when the
// spool was closed (err says so).
func (s *Shipper) commit(ctx context.Context, pos Position) (uint64, bool, error) {
	for attempt := 0; ; attempt++ {
		dropped, err := s.spool.commit(ctx, pos)
		if err == nil {
			return dropped, true, nil
		}
		if errors.Is(err, ErrClosed) {
			return 0, false, fmt.Errorf("ship: %w", err)
		}
		if ctx.Err() != nil {
			return 0, false, nil
		}
		s.m.commitErrors.Inc()
		delay := backoffDelay(attempt, s.cfg.BackoffInitial, s.cfg.BackoffMax, s.hooks.jitter())
		s.log.Error("shipper cannot commit the spool cursor, shipped rows will be sent again after a restart", "cursor", pos.String(), "attempt", attempt+1, "retry_in", delay, "err", err)
		if !s.wait(ctx, delay) {
			return 0, false, nil
		}
	}
}

func (s *Shipper) wait(ctx context.Context, d time.Duration) bool {
	c, stop := s.hooks.clock.NewTimer(d)
	defer stop()
	select {
	case <-ctx.Done():
		return false
	case <-c:
		return true
	}
}

func (s *Shipper) setOldest(t time.Time) {
	s.mu.Lock()
	s.oldest = t
	s.mu.Unlock()
}
