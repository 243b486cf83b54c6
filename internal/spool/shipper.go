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

// Sink takes delivered batches. internal/store.Store implements it with one
// ClickHouse insert per call. A nil error is the acknowledgement after
// which the shipper commits; the sink must not keep or change samples.
type Sink interface {
	InsertSamples(ctx context.Context, samples []collectors.Sample) error
}

// Shipper defaults and bounds. ClickHouse wants few large inserts (10k to
// 100k rows); the flush interval bounds delivery delay when traffic is low.
const (
	DefaultBatchRows      = 50_000
	DefaultFlushInterval  = 2 * time.Second
	DefaultBackoffInitial = 500 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second

	minBatchRows     = 10_000
	maxBatchRows     = 100_000
	minFlushInterval = 10 * time.Millisecond
	maxFlushInterval = time.Minute
	minBackoff       = 10 * time.Millisecond
	maxBackoff       = 10 * time.Minute
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
}

// DefaultShipperConfig returns the defaults.
func DefaultShipperConfig() ShipperConfig {
	return ShipperConfig{
		BatchRows:      DefaultBatchRows,
		FlushInterval:  DefaultFlushInterval,
		BackoffInitial: DefaultBackoffInitial,
		BackoffMax:     DefaultBackoffMax,
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
	spool *Spool
	sink  Sink
	cfg   ShipperConfig
	log   *slog.Logger
	hooks shipperHooks
	m     shipperMetrics

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

// pending is what has been read and not yet committed.
type pending struct {
	samples []collectors.Sample
	segs    []uint64  // segs[i] is the segment samples[i] was read from (ascending)
	sent    int       // samples[:sent] acknowledged
	late    int       // samples[:late] are sent rows of dropped segments already reported
	next    Position  // commit this once all are sent
	moved   bool      // next lies past the committed cursor
	firstAt time.Time // when the first of samples was read
	oldest  time.Time
}

func (p *pending) add(b Batch, now time.Time) {
	if len(p.samples) == 0 {
		p.firstAt = now
	}
	p.samples = append(p.samples, b.Samples...)
	for range b.Samples {
		p.segs = append(p.segs, b.Segment)
	}
	p.oldest = earliest(p.oldest, oldestEnd(b.Samples))
	p.next, p.moved = b.Next, true
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

func (p *pending) reset() {
	clear(p.samples) // let the strings go
	*p = pending{samples: p.samples[:0], segs: p.segs[:0]}
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
	k, _ := slices.BinarySearch(p.segs, dropped+1) // samples[:k] come from dropped segments
	if late := min(p.sent, k); late > p.late {
		s.spool.DroppedRowsDelivered(late - p.late)
		p.late = late
	}
	if k > p.sent {
		s.log.Debug("shipper discards rows of dropped segments", "rows", k-p.sent)
		clear(p.samples[p.sent:k])
		p.samples = slices.Delete(p.samples, p.sent, k)
		p.segs = slices.Delete(p.segs, p.sent, k)
	}
}

// Run ships until ctx is cancelled, then returns nil. It starts from the
// committed cursor, so batches an earlier run read but did not commit are
// sent again. Sink and commit failures are retried with backoff, never
// returned; only a closed spool ends Run with an error.
func (s *Shipper) Run(ctx context.Context) error {
	s.spool.Rewind()
	defer s.setOldest(time.Time{})
	var p pending
	var carry *Batch       // read, but it would overfill p
	var ahead []readResult // read ahead during the last send, not yet in p
	readAttempt := 0
	for {
		if ctx.Err() != nil {
			return nil
		}
		if err := s.fill(ctx, &p, &carry, &ahead); err != nil {
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
		oldest := p.oldest
		if carry != nil {
			oldest = earliest(oldest, oldestEnd(carry.Samples))
		}
		s.setOldest(oldest)

		now := s.hooks.clock.Now()
		full := len(p.samples) >= s.cfg.BatchRows || carry != nil
		due := len(p.samples) > 0 && !now.Before(p.firstAt.Add(s.cfg.FlushInterval))
		switch {
		case full || due:
			// Read ahead while the insert runs, so that decoding the spool
			// and the insert (and ClickHouse) use both cores.
			prefetched := s.readAhead(ctx, ahead)
			ok := s.send(ctx, &p)
			ahead = <-prefetched
			if !ok {
				return nil
			}
		case len(p.samples) == 0 && p.moved:
			// Only a skipped corrupt region: commit past it so its segment
			// can go.
		default:
			if !s.waitForData(ctx, &p, now) {
				return nil
			}
			continue
		}
		committed := p.next
		dropped, ok, err := s.commit(ctx, committed)
		if !ok {
			return err
		}
		s.settleDropped(&p, dropped)
		p.reset()
		if carry != nil {
			p.add(*carry, s.hooks.clock.Now())
			carry = nil
		}
		s.setOldest(p.oldest)
		if s.hooks.onCommit != nil {
			s.hooks.onCommit(committed)
		}
	}
}

// fill reads whole batches into p until it holds BatchRows rows, the next
// batch would overfill it (kept in *carry), or the spool is caught up.
func (s *Shipper) fill(ctx context.Context, p *pending, carry **Batch, ahead *[]readResult) error {
	for len(p.samples) < s.cfg.BatchRows && *carry == nil {
		var b Batch
		var err error
		if len(*ahead) > 0 {
			b, err = (*ahead)[0].batch, (*ahead)[0].err
			(*ahead)[0] = readResult{} // let the samples go once p holds them
			*ahead = (*ahead)[1:]
		} else {
			b, err = s.spool.Read(ctx)
		}
		if errors.Is(err, ErrCorruptSegment) {
			// The spool logged and counted it; move past it.
			p.next, p.moved = b.Next, true
			continue
		}
		if err != nil {
			return err
		}
		if len(b.Samples) == 0 {
			return nil
		}
		if len(p.samples) > 0 && len(p.samples)+len(b.Samples) > s.cfg.BatchRows {
			*carry = &b
			return nil
		}
		p.add(b, s.hooks.clock.Now())
	}
	return nil
}

// readResult is one spool.Read, kept for later.
type readResult struct {
	batch Batch
	err   error
}

// readAhead reads up to a batch's worth of rows from the spool in its own
// goroutine while the caller sends; the caller receives them (in order,
// errors included) before it touches the spool again. Reading ahead only
// moves the read position, never the committed cursor.
func (s *Shipper) readAhead(ctx context.Context, queued []readResult) <-chan []readResult {
	out := make(chan []readResult, 1)
	rows := 0
	for _, r := range queued {
		rows += len(r.batch.Samples)
	}
	if rows >= s.cfg.BatchRows || (len(queued) > 0 && queued[len(queued)-1].err != nil) {
		out <- queued
		return out
	}
	go func() {
		for rows < s.cfg.BatchRows && ctx.Err() == nil {
			b, err := s.spool.Read(ctx)
			if err == nil && len(b.Samples) == 0 {
				break // caught up
			}
			queued = append(queued, readResult{b, err})
			if err != nil && !errors.Is(err, ErrCorruptSegment) {
				break
			}
			rows += len(b.Samples)
		}
		out <- queued
	}()
	return out
}

// waitForData waits for an append, the flush deadline of p, or ctx.
func (s *Shipper) waitForData(ctx context.Context, p *pending, now time.Time) bool {
	var deadline <-chan time.Time
	if len(p.samples) > 0 {
		c, stop := s.hooks.clock.NewTimer(p.firstAt.Add(s.cfg.FlushInterval).Sub(now))
		defer stop()
		deadline = c
	}
	select {
	case <-ctx.Done():
		return false
	case <-s.spool.Appended():
	case <-deadline:
	}
	return true
}

// send delivers p.samples[p.sent:] in inserts of at most BatchRows,
// retrying each failed insert after a backoff. It returns false when ctx
// ended first.
func (s *Shipper) send(ctx context.Context, p *pending) bool {
	for attempt := 0; ; {
		s.settleDropped(p, s.spool.DroppedThrough())
		if p.sent >= len(p.samples) {
			return true
		}
		chunk := p.samples[p.sent:min(len(p.samples), p.sent+s.cfg.BatchRows)]
		start := s.hooks.clock.Now()
		err := s.sink.InsertSamples(ctx, chunk)
		s.m.sendSeconds.Observe(s.hooks.clock.Now().Sub(start).Seconds())
		if err == nil {
			p.sent += len(chunk)
			attempt = 0
			s.m.batches.Inc()
			s.m.rows.Add(float64(len(chunk)))
			// A drop during the insert counted these rows as lost.
			s.settleDropped(p, s.spool.DroppedThrough())
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		if n := s.dropInvalid(p, chunk); n > 0 {
			// Retrying would fail forever; what is left is sent at once.
			continue
		}
		s.m.sendErrors.Inc()
		delay := backoffDelay(attempt, s.cfg.BackoffInitial, s.cfg.BackoffMax, s.hooks.jitter())
		// Warn, not Error: the rows are safe in the spool while we retry.
		s.log.Warn("shipper insert failed, retrying", "rows", len(chunk), "attempt", attempt+1, "retry_in", delay, "err", err)
		attempt++
		if !s.wait(ctx, delay) {
			return false
		}
	}
}

// dropInvalid removes from p the samples of chunk that fail validation
// (spools written before Append validated could hold some), logging and
// counting them, and returns how many it removed.
func (s *Shipper) dropInvalid(p *pending, chunk []collectors.Sample) int {
	kept, keptSegs := p.samples[:p.sent], p.segs[:p.sent]
	dropped := 0
	for i := range chunk {
		if err := chunk[i].Validate(); err != nil {
			s.log.Error("shipper drops a spooled sample the store cannot accept", "sample_id", chunk[i].ID, "err", err)
			dropped++
			continue
		}
		kept = append(kept, chunk[i])
		keptSegs = append(keptSegs, p.segs[p.sent+i])
	}
	if dropped == 0 {
		return 0
	}
	kept = append(kept, p.samples[p.sent+len(chunk):]...)
	keptSegs = append(keptSegs, p.segs[p.sent+len(chunk):]...)
	p.samples, p.segs = kept, keptSegs
	s.m.invalidRows.Add(float64(dropped))
	return dropped
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
