package billing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// RetentionConfig bounds how long raw samples are kept. Hourly rollups are
// kept for years and never dropped by this job.
type RetentionConfig struct {
	RawDays  int    `yaml:"raw_days"` // raw samples older than this many days may be dropped
	Schedule string `yaml:"schedule"` // cron spec for `gpumeter serve`
}

// DefaultRetentionConfig keeps raw samples 90 days, checked daily.
func DefaultRetentionConfig() RetentionConfig {
	return RetentionConfig{RawDays: 90, Schedule: "@daily"}
}

// Validate reports every problem.
func (c RetentionConfig) Validate() error {
	var errs []error
	if c.RawDays < 1 {
		errs = append(errs, fmt.Errorf("retention.raw_days %d: at least 1", c.RawDays))
	}
	if c.Schedule == "" {
		errs = append(errs, errors.New("retention.schedule: required"))
	}
	return errors.Join(errs...)
}

// MonthsToDrop picks the raw-sample months (partitions, given by their first
// day) that may be dropped: the whole month is older than the retention
// window, it has been invoiced (closed), and its hours have been rolled up.
// ClickHouse 18.16 has no TTL, so retention drops whole partitions.
func MonthsToDrop(months []time.Time, closed map[time.Time]bool, rolledThrough, now time.Time, rawDays int) []time.Time {
	cutoff := now.UTC().AddDate(0, 0, -rawDays)
	var out []time.Time
	for _, m := range months {
		m = time.Date(m.Year(), m.Month(), 1, 0, 0, 0, 0, time.UTC)
		end := m.AddDate(0, 1, 0)
		if end.After(cutoff) || end.After(rolledThrough) || !closed[m] {
			continue
		}
		out = append(out, m)
	}
	return out
}

// RetentionStore is what retention needs from storage.
type RetentionStore interface {
	RawMonths(ctx context.Context) ([]time.Time, error)
	ClosedPeriods(ctx context.Context) ([]time.Time, error)
	LoadRollupState(ctx context.Context, job string) (RollupState, bool, error)
	DropRawMonth(ctx context.Context, month time.Time) error
}

// Retention drops raw-sample months past the retention window.
type Retention struct {
	store  RetentionStore
	cfg    RetentionConfig
	now    func() time.Time
	logger *slog.Logger
}

// NewRetention builds the job.
func NewRetention(st RetentionStore, cfg RetentionConfig, now func() time.Time, logger *slog.Logger) *Retention {
	return &Retention{store: st, cfg: cfg, now: now, logger: logger.With("component", "retention")}
}

// Run drops what MonthsToDrop allows and returns the months dropped.
func (r *Retention) Run(ctx context.Context) ([]time.Time, error) {
	months, err := r.store.RawMonths(ctx)
	if err != nil {
		return nil, err
	}
	periods, err := r.store.ClosedPeriods(ctx)
	if err != nil {
		return nil, err
	}
	closed := map[time.Time]bool{}
	for _, p := range periods {
		closed[time.Date(p.Year(), p.Month(), 1, 0, 0, 0, 0, time.UTC)] = true
	}
	st, ok, err := r.store.LoadRollupState(ctx, rollupJob)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, nil // nothing rolled up yet: keep everything
	}
	var dropped []time.Time
	for _, m := range MonthsToDrop(months, closed, st.ClosedThrough, r.now(), r.cfg.RawDays) {
		if err := r.store.DropRawMonth(ctx, m); err != nil {
			return dropped, err
		}
		r.logger.Info("raw samples dropped", "period", m.Format("2006-01"))
		dropped = append(dropped, m)
	}
	return dropped, nil
}
