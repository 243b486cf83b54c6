// Package jobs binds `gpumeter serve`'s periodic jobs (rollup, retention,
// invoice runs, insights detection) to cron schedules: robfig/cron in
// UTC, one run of a job at a time, a panic logged, and each job's runs,
// failures and duration exported to Prometheus.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"
)

// Scheduler runs the periodic jobs of `gpumeter serve` (rollup, retention,
// later period close) on robfig/cron, in UTC, never two runs of a job at
// once, and a panic in a job is logged instead of taking the server down.
type Scheduler struct {
	cron    *cron.Cron
	logger  *slog.Logger
	runs    *prometheus.CounterVec
	fails   *prometheus.CounterVec
	lastOK  *prometheus.GaugeVec
	seconds *prometheus.HistogramVec
}

// NewScheduler registers the job metrics on reg.
func NewScheduler(logger *slog.Logger, reg prometheus.Registerer) (*Scheduler, error) {
	logger = logger.With("component", "scheduler")
	s := &Scheduler{
		cron: cron.New(cron.WithLocation(time.UTC), cron.WithChain(
			cron.Recover(cronLogger{logger}), cron.SkipIfStillRunning(cronLogger{logger}))),
		logger: logger,
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumeter_job_runs_total", Help: "Scheduled job runs."}, []string{"task"}),
		fails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumeter_job_failures_total", Help: "Scheduled job runs that returned an error."}, []string{"task"}),
		lastOK: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpumeter_job_last_success_timestamp_seconds",
			Help: "End of the last successful run; until the first one, when the job was scheduled (the server's start)."}, []string{"task"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gpumeter_job_duration_seconds", Help: "Scheduled job run time.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 8)}, []string{"task"}),
	}
	for _, c := range []prometheus.Collector{s.runs, s.fails, s.lastOK, s.seconds} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register scheduler metrics: %w", err)
		}
	}
	return s, nil
}

// Add schedules fn under a cron spec. Each run gets a context derived from
// root and bounded by timeout.
//
// The job's series exist from here on, before its first run: counters at
// 0, so that increase() sees the first failure after a restart, and the
// last-success gauge at now, so that a job that never succeeds after a
// restart ages into the lag alert instead of having no series at all.
func (s *Scheduler) Add(root context.Context, name, spec string, timeout time.Duration, fn func(context.Context) error) error {
	_, err := s.cron.AddFunc(spec, func() {
		ctx, cancel := context.WithTimeout(root, timeout)
		defer cancel()
		start := time.Now()
		err := fn(ctx)
		if errors.Is(err, ErrSkipped) {
			return // not this replica's turn: neither a run nor a failure
		}
		s.runs.WithLabelValues(name).Inc()
		s.seconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
		if err != nil {
			s.fails.WithLabelValues(name).Inc()
			s.logger.Error("job failed", "job", name, "err", err)
			return
		}
		s.lastOK.WithLabelValues(name).SetToCurrentTime()
	})
	if err != nil {
		return fmt.Errorf("schedule %s %q: %w", name, spec, err)
	}
	s.runs.WithLabelValues(name)
	s.fails.WithLabelValues(name)
	s.seconds.WithLabelValues(name)
	s.lastOK.WithLabelValues(name).SetToCurrentTime()
	return nil
}

// ErrSkipped, returned by a job, says it did not run at all (another
// replica leads): the run is not counted, and the last success stands.
var ErrSkipped = errors.New("jobs: skipped")

// Start runs the scheduler in its own goroutine.
func (s *Scheduler) Start() { s.cron.Start() }

// Stop stops scheduling and waits for running jobs to finish.
func (s *Scheduler) Stop() { <-s.cron.Stop().Done() }

// cronLogger adapts slog to cron's logger interface.
type cronLogger struct{ l *slog.Logger }

func (c cronLogger) Info(msg string, kv ...any) { c.l.Debug(msg, kv...) }
func (c cronLogger) Error(err error, msg string, kv ...any) {
	c.l.Error(msg, append(kv, "err", err)...)
}
