package collectors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// LoopConfig configures the poll loop.
type LoopConfig struct {
	// Interval between polls; intervals are aligned to multiples of it
	// (10 s: :00, :10, :20 …) so that replays give the same sample ids.
	Interval time.Duration
	// Until stops the loop after the poll that reaches it; zero runs until
	// the context is done.
	Until time.Time
}

// DefaultInterval is the sampling interval of DESIGN.md.
const DefaultInterval = 10 * time.Second

// Validate reports every problem with the config.
func (c LoopConfig) Validate() error {
	var errs []error
	if c.Interval < time.Second {
		errs = append(errs, fmt.Errorf("interval: %s is below 1s", c.Interval))
	}
	if c.Interval%time.Second != 0 {
		// The store keeps whole seconds: a boundary inside a second would
		// be cut off there, and the sample's id would not match its row.
		errs = append(errs, fmt.Errorf("interval: %s is not a whole number of seconds", c.Interval))
	}
	if c.Until.Nanosecond() != 0 {
		errs = append(errs, fmt.Errorf("until: %s is not a whole second", c.Until.Format(time.RFC3339Nano)))
	}
	return errors.Join(errs...)
}

// Host is what the loop polls on one host: its sources, then its
// attributor. The simulated fleet polls several hosts in one loop.
type Host struct {
	Name       string
	Sources    []NamedSource
	Attributor Attributor // nil: nothing is attributed, all usage is unattributed
}

// NamedSource is a source with the name it is reported under.
type NamedSource struct {
	Name   string
	Source Source
}

// Observer receives what the loop measures; cmd/gpumeter exports it to
// Prometheus. Implementations must be safe for use by one goroutine at a
// time (the loop's).
type Observer interface {
	// SourceRead is called after every source read, with its duration.
	SourceRead(host, source string, d time.Duration, err error)
	// GPUFailed is called for every GPU a source could not read.
	GPUFailed(host, gpuUUID string, err error)
	// AttributionFailed is called when an attributor reported a problem.
	AttributionFailed(host string, err error)
	// Polled is called after every poll with its duration, the number of
	// samples handed to the appender and the appender's error.
	Polled(d time.Duration, samples int, err error)
}

// NopObserver ignores everything.
type NopObserver struct{}

func (NopObserver) SourceRead(string, string, time.Duration, error) {}
func (NopObserver) GPUFailed(string, string, error)                 {}
func (NopObserver) AttributionFailed(string, error)                 {}
func (NopObserver) Polled(time.Duration, int, error)                {}

// Loop is the collector's poll loop: every interval it reads each host's
// sources, attributes, apportions and appends the samples. Like
// node_exporter's runner it times each source and never lets one source's
// or one GPU's failure sink the others.
type Loop struct {
	cfg       LoopConfig
	hosts     []Host
	apportion ApportionFunc
	out       Appender
	clock     Clock
	logger    *slog.Logger
	obs       Observer
	monotonic func() time.Time // for durations; the wall clock even in simulation

	samples  []Sample     // reused between polls
	readings []GPUReading // reused between polls
}

// NewLoop checks its inputs and returns a loop.
func NewLoop(cfg LoopConfig, hosts []Host, apportion ApportionFunc, out Appender, clock Clock, logger *slog.Logger, obs Observer) (*Loop, error) {
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(hosts) == 0 {
		errs = append(errs, errors.New("hosts: none"))
	}
	for i, h := range hosts {
		if h.Name == "" {
			errs = append(errs, fmt.Errorf("hosts[%d]: name missing", i))
		}
		if len(h.Sources) == 0 {
			errs = append(errs, fmt.Errorf("hosts[%d]: no sources", i))
		}
		for j, s := range h.Sources {
			if s.Source == nil || s.Name == "" {
				errs = append(errs, fmt.Errorf("hosts[%d].sources[%d]: name or source missing", i, j))
			}
		}
	}
	if apportion == nil {
		errs = append(errs, errors.New("apportion: missing"))
	}
	if out == nil {
		errs = append(errs, errors.New("appender: missing"))
	}
	if clock == nil {
		errs = append(errs, errors.New("clock: missing"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("poll loop: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if obs == nil {
		obs = NopObserver{}
	}
	return &Loop{
		cfg: cfg, hosts: hosts, apportion: apportion, out: out, clock: clock,
		logger: logger, obs: obs, monotonic: time.Now,
	}, nil
}

// Run primes the sources, then polls at every interval boundary until ctx
// is done or Until is reached. A late wake-up (a suspended host) makes one
// longer interval, never a gap. It returns nil when stopped by ctx or
// Until; a failing poll is logged and counted, not returned.
func (l *Loop) Run(ctx context.Context) error {
	// Every boundary is a whole second (see LoopConfig.Validate): the first
	// interval starts at the next one.
	now := l.clock.Now().UTC()
	prev := now.Truncate(time.Second)
	if prev.Before(now) {
		prev = prev.Add(time.Second)
		if err := l.clock.WaitUntil(ctx, prev); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("poll loop: wait: %w", err)
		}
	}
	l.Prime(ctx, prev)
	for {
		next := prev.Truncate(l.cfg.Interval).Add(l.cfg.Interval)
		if !l.cfg.Until.IsZero() && next.After(l.cfg.Until) {
			next = l.cfg.Until
		}
		if !next.After(prev) {
			return nil
		}
		if err := l.clock.WaitUntil(ctx, next); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("poll loop: wait: %w", err)
		}
		end := next
		if now := l.clock.Now(); now.Sub(next) >= l.cfg.Interval {
			// Woke up more than an interval late: cover the gap in one
			// interval that ends at the last boundary passed.
			end = now.UTC().Truncate(l.cfg.Interval)
		}
		if _, err := l.Poll(ctx, prev, end); err != nil {
			l.logger.Error("poll failed; samples of this interval are at risk", "start", prev, "end", end, "err", err)
		}
		prev = end
		if !l.cfg.Until.IsZero() && !prev.Before(l.cfg.Until) {
			return nil
		}
	}
}

// Prime reads every source once at t to set counter baselines, and runs
// attribution on what it saw so that caches know the running processes
// (a process that exits in the first interval has no /proc entry left to
// read then). The readings make no samples.
func (l *Loop) Prime(ctx context.Context, t time.Time) {
	for _, h := range l.hosts {
		l.readings = l.readings[:0]
		for _, s := range h.Sources {
			rs, err := l.read(ctx, h.Name, s, t, t)
			if err != nil {
				l.logger.Warn("priming source failed", "host", h.Name, "source", s.Name, "err", err)
				continue
			}
			for i := range rs {
				if rs[i].Err == nil {
					l.readings = append(l.readings, rs[i])
				}
			}
		}
		if h.Attributor != nil && len(l.readings) > 0 {
			if err := l.attribute(ctx, h.Attributor); err != nil {
				l.logger.Debug("attribution while priming incomplete", "host", h.Name, "err", err)
			}
		}
	}
	clear(l.readings)
}

// Poll reads, attributes and apportions every host for [start, end) and
// appends the samples in one call. It returns the number of samples and the
// appender's error; source and attribution failures are logged and
// counted, and the rest of the poll goes on.
func (l *Loop) Poll(ctx context.Context, start, end time.Time) (int, error) {
	began := l.monotonic()
	l.samples = l.samples[:0]
	for _, h := range l.hosts {
		l.readings = l.readings[:0]
		for _, s := range h.Sources {
			rs, err := l.read(ctx, h.Name, s, start, end)
			if err != nil {
				l.logger.Error("source failed", "host", h.Name, "source", s.Name, "err", err)
				continue
			}
			for i := range rs {
				if rs[i].Err != nil {
					l.logger.Error("gpu not read; no samples for it this interval", "host", h.Name, "source", s.Name, "gpu_uuid", rs[i].GPU.UUID, "gpu_index", rs[i].GPU.Index, "err", rs[i].Err)
					l.obs.GPUFailed(h.Name, rs[i].GPU.UUID, rs[i].Err)
					continue
				}
				l.readings = append(l.readings, rs[i])
			}
		}
		if h.Attributor != nil && len(l.readings) > 0 {
			if err := l.attribute(ctx, h.Attributor); err != nil {
				l.logger.Warn("attribution incomplete; unclaimed usage stays unattributed", "host", h.Name, "err", err)
				l.obs.AttributionFailed(h.Name, err)
			}
		}
		for i := range l.readings {
			l.samples = l.apportion(l.samples, h.Name, start, end, &l.readings[i])
		}
	}
	var err error
	if len(l.samples) > 0 {
		if err = l.out.Append(ctx, l.samples); err != nil {
			err = fmt.Errorf("append %d samples: %w", len(l.samples), err)
		}
	}
	n := len(l.samples)
	l.obs.Polled(l.monotonic().Sub(began), n, err)
	// Drop references to the readings' slices so the sources may reuse them.
	clear(l.readings)
	return n, err
}

// read calls one source, timing it and turning a panic into an error.
func (l *Loop) read(ctx context.Context, host string, s NamedSource, start, end time.Time) (rs []GPUReading, err error) {
	began := l.monotonic()
	defer func() {
		if p := recover(); p != nil {
			l.logger.Error("source panicked", "host", host, "source", s.Name, "panic", p, "stack", string(debug.Stack()))
			rs, err = nil, fmt.Errorf("source %s panicked: %v", s.Name, p)
		}
		l.obs.SourceRead(host, s.Name, l.monotonic().Sub(began), err)
	}()
	rs, err = s.Source.Read(ctx, start, end)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.Name, err)
	}
	return rs, nil
}

func (l *Loop) attribute(ctx context.Context, a Attributor) (err error) {
	defer func() {
		if p := recover(); p != nil {
			l.logger.Error("attributor panicked", "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("attributor panicked: %v", p)
		}
	}()
	return a.Attribute(ctx, l.readings)
}
