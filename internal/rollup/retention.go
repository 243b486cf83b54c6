package rollup

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
// window, it has been invoiced (closed), its hours have been rolled up, and
// no late sample in it is still waiting for the next rollup run.
// ClickHouse 18.16 has no TTL, so retention drops whole partitions.
func MonthsToDrop(months []time.Time, closed map[time.Time]bool, rolledThrough, now time.Time, rawDays int, pendingLate []time.Time) []time.Time {
	waiting := map[time.Time]bool{}
	for _, h := range pendingLate {
		waiting[time.Date(h.Year(), h.Month(), 1, 0, 0, 0, 0, time.UTC)] = true
	}
	cutoff := now.UTC().AddDate(0, 0, -rawDays)
	var out []time.Time
	for _, m := range months {
		m = time.Date(m.Year(), m.Month(), 1, 0, 0, 0, 0, time.UTC)
		end := m.AddDate(0, 1, 0)
		if end.After(cutoff) || end.After(rolledThrough) || !closed[m] || waiting[m] {
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
	LoadRollupState(ctx context.Context, job string) (State, bool, error)
	HoursInsertedSince(ctx context.Context, since, before time.Time) ([]time.Time, error)
	DropRawMonth(ctx context.Context, month time.Time) error
	MarkRawMonthDropped(ctx context.Context, month, at time.Time) error
	// The single mark kept before dropped months were a set: still raised
	// so that binaries from before it never recompute a dropped month.
	RawDroppedBefore(ctx context.Context) (time.Time, error)
	SetRawDroppedBefore(ctx context.Context, t time.Time, version uint64) error
	// PruneAdmissionLog deletes the admission log's rows (quota
	// admissions and credit holds) whose end lies before before, where
	// the server does not expire them by TTL itself, and returns how many
	// it deleted. Running it again deletes nothing more.
	PruneAdmissionLog(ctx context.Context, before time.Time) (int64, error)
	// AdmissionLogEnded counts what PruneAdmissionLog(before) would
	// delete now, deleting nothing.
	AdmissionLogEnded(ctx context.Context, before time.Time) (int64, error)
}

// AdmissionLogRetention is how long after its end (an admission part's
// expiry, a credit hold's Until) the admission log keeps a row. A new
// leader's rebuild reads parts not yet expired and credit holds that
// ended less than a day ago (internal/quota), so a row past this is never
// read again; the six days beyond that day absorb clocks that disagree
// and leave a week of the log for looking into a failover. Migration
// 0018 sets the same TTL on newer servers.
const AdmissionLogRetention = 7 * 24 * time.Hour

// Retention drops raw-sample months past the retention window, and the
// admission log's rows past AdmissionLogRetention.
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

// Plan lists the months Run would drop now, dropping nothing
// (`retention --dry-run`): the same decision Run takes.
func (r *Retention) Plan(ctx context.Context) ([]time.Time, error) {
	months, _, err := r.plan(ctx)
	return months, err
}

// PlanAdmissionLog says how many of the admission log's rows Run would
// delete now, those that ended before the time it returns, deleting
// nothing (`retention --dry-run`). Rows a TTL expires are not counted.
func (r *Retention) PlanAdmissionLog(ctx context.Context) (rows int64, before time.Time, err error) {
	before = r.now().Add(-AdmissionLogRetention).UTC().Truncate(time.Second)
	rows, err = r.store.AdmissionLogEnded(ctx, before)
	return rows, before, err
}

// Run drops what MonthsToDrop allows and returns the months dropped, then
// prunes the admission log. A failure of either does not stop the other.
func (r *Retention) Run(ctx context.Context) ([]time.Time, error) {
	dropped, err := r.dropRawMonths(ctx)
	return dropped, errors.Join(err, r.pruneAdmissionLog(ctx))
}

// pruneAdmissionLog deletes the admission log's rows that ended more than
// AdmissionLogRetention ago.
func (r *Retention) pruneAdmissionLog(ctx context.Context) error {
	n, err := r.store.PruneAdmissionLog(ctx, r.now().Add(-AdmissionLogRetention))
	if err != nil {
		return err
	}
	if n > 0 {
		r.logger.Info("admission log pruned", "rows", n, "retention", AdmissionLogRetention.String())
	}
	return nil
}

func (r *Retention) dropRawMonths(ctx context.Context) ([]time.Time, error) {
	months, floor, err := r.plan(ctx)
	if err != nil {
		return nil, err
	}
	var dropped []time.Time
	for _, m := range months {
		// Record the month first: the rollup must never recompute an hour
		// whose raw samples may be gone, even if the drop fails half-way.
		if err := r.store.MarkRawMonthDropped(ctx, m, r.now()); err != nil {
			return dropped, err
		}
		if end := m.AddDate(0, 1, 0); end.After(floor) {
			if err := r.store.SetRawDroppedBefore(ctx, end, uint64(r.now().UnixNano())); err != nil {
				return dropped, err
			}
			floor = end
		}
		if err := r.store.DropRawMonth(ctx, m); err != nil {
			return dropped, err
		}
		r.logger.Info("raw samples dropped", "period", m.Format("2006-01"))
		dropped = append(dropped, m)
	}
	return dropped, nil
}

// plan is the months to drop and the retention floor as stored.
func (r *Retention) plan(ctx context.Context) ([]time.Time, time.Time, error) {
	var floor time.Time
	months, err := r.store.RawMonths(ctx)
	if err != nil {
		return nil, floor, err
	}
	periods, err := r.store.ClosedPeriods(ctx)
	if err != nil {
		return nil, floor, err
	}
	closed := map[time.Time]bool{}
	for _, p := range periods {
		closed[time.Date(p.Year(), p.Month(), 1, 0, 0, 0, 0, time.UTC)] = true
	}
	st, ok, err := r.store.LoadRollupState(ctx, stateKey)
	if err != nil {
		return nil, floor, err
	}
	if !ok {
		return nil, floor, nil // nothing rolled up yet: keep everything
	}
	late, err := HoursNotRolledUp(ctx, r.store, st)
	if err != nil {
		return nil, floor, err
	}
	if floor, err = r.store.RawDroppedBefore(ctx); err != nil {
		return nil, floor, err
	}
	return MonthsToDrop(months, closed, st.ClosedThrough, r.now(), r.cfg.RawDays, late), floor, nil
}
