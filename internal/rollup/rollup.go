// Package rollup keeps the hourly rollups true to the raw samples and the
// raw samples no longer than needed: it plans and runs the app-driven
// INSERT … SELECT rollup (closed hours after the grace period, late
// samples re-opening their hours, months retention dropped left alone)
// and decides which raw months may be dropped. Invoices, usage and quotas
// read its state (State, HoursNotRolledUp). It holds rules, not SQL:
// storage sits behind the interfaces declared here (Store,
// RetentionStore), which internal/store satisfies.
package rollup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// State is the hourly rollup job's bookmark.
type State struct {
	// ClosedThrough: every hour before it has been rolled up at least once.
	ClosedThrough time.Time
	// Watermark: samples inserted (server clock) before it have been seen.
	Watermark time.Time
	// CompletedVersion is the version of the last run that finished: every
	// usage_hourly row at or below it was written by a completed run, so
	// rows above it may belong to a run still in flight.
	CompletedVersion uint64
}

// HourRange is [From, To) in whole hours.
type HourRange struct{ From, To time.Time }

// Plan is what one run does.
type Plan struct {
	Closing []HourRange // hours that closed since the last run
	Late    []time.Time // closed hours that received samples since the last run
	// InDroppedMonth: late hours whose raw month retention already
	// dropped; left alone (billing takes such samples as adjustments).
	InDroppedMonth []time.Time
	Next           State
}

// DroppedMonths is the set of months (first day, UTC) whose raw samples
// retention dropped. Months can be dropped out of order (an invoiced month
// goes while an earlier one is still open), so this is a set, not a mark.
type DroppedMonths map[time.Time]bool

// NewDroppedMonths makes the set from months given by any instant in them.
func NewDroppedMonths(months []time.Time) DroppedMonths {
	d := DroppedMonths{}
	for _, m := range months {
		d[monthOf(m)] = true
	}
	return d
}

// Contains says whether t's month (UTC) was dropped.
func (d DroppedMonths) Contains(t time.Time) bool { return d[monthOf(t)] }

// Overlapping lists the dropped months that [from, to) touches, oldest first.
func (d DroppedMonths) Overlapping(from, to time.Time) []time.Time {
	if len(d) == 0 {
		return nil
	}
	var out []time.Time
	for m := monthOf(from); m.Before(to); m = m.AddDate(0, 1, 0) {
		if d[m] {
			out = append(out, m)
		}
	}
	return out
}

// without splits r around the dropped months, leaving the hours whose raw
// samples are still there.
func (d DroppedMonths) without(r HourRange) []HourRange {
	var out []HourRange
	cur := r.From
	for _, m := range d.Overlapping(r.From, r.To) {
		if m.After(cur) {
			out = append(out, HourRange{cur, m})
		}
		if next := m.AddDate(0, 1, 0); next.After(cur) {
			cur = next
		}
	}
	if r.To.After(cur) {
		out = append(out, HourRange{cur, r.To})
	}
	return out
}

// monthOf is the first instant of t's month, UTC.
func monthOf(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// InsertSlack is how far the watermark trails the server clock: an insert
// that started before a run but became visible after its scan carries an
// inserted_at up to this much earlier, and must still be seen next time.
const InsertSlack = 5 * time.Minute

// NewPlan decides which hours a run rolls up. It is pure.
//
// Hours in dropped months (where retention dropped the raw samples) are
// never recomputed, whether late samples reopen them or they would close:
// a late sample there would replace the whole hour with itself. Hours of
// every other month are, even when a later month is dropped.
//
// An hour H closes once serverNow >= H + 1h + grace. Closed hours are rolled
// up once when they close; afterwards only late samples (inserted since the
// watermark) reopen their hour, which the next run recomputes. Open hours
// are never rolled up: the API reads them from raw samples.
func NewPlan(prev State, hasPrev bool, earliest, serverNow time.Time, grace time.Duration, late []time.Time, dropped DroppedMonths) Plan {
	closeBefore := serverNow.Add(-grace).UTC().Truncate(time.Hour)
	start := prev.ClosedThrough
	if !hasPrev {
		start = closeBefore
		if !earliest.IsZero() {
			start = earliest.UTC().Truncate(time.Hour)
		}
	}
	plan := Plan{Next: State{ClosedThrough: start, Watermark: serverNow.Add(-InsertSlack).UTC()}}
	if hasPrev && prev.Watermark.After(plan.Next.Watermark) {
		plan.Next.Watermark = prev.Watermark
	}
	if closeBefore.After(start) {
		// Normally nothing closing is dropped (retention waits for a
		// month's rollup), but a lost rollup state restarts at the
		// earliest sample, which may be a late one in a dropped month.
		plan.Closing = dropped.without(HourRange{start, closeBefore})
		plan.Next.ClosedThrough = closeBefore
	}
	seen := map[time.Time]bool{}
	for _, h := range late {
		h = h.UTC().Truncate(time.Hour)
		// Hours about to close are recomputed anyway; open hours wait.
		if !h.Before(start) || seen[h] {
			continue
		}
		if dropped.Contains(h) {
			plan.InDroppedMonth = append(plan.InDroppedMonth, h)
			seen[h] = true
			continue
		}
		seen[h] = true
		plan.Late = append(plan.Late, h)
	}
	return plan
}

// hoursInserter lists the hours of samples inserted since a time.
type hoursInserter interface {
	HoursInsertedSince(ctx context.Context, since, before time.Time) ([]time.Time, error)
}

// HoursNotRolledUp lists the closed hours holding samples inserted after
// the last rollup run (st) started: usage_hourly does not have them yet.
// That run started InsertSlack after its watermark; the second it started
// is left to it, which scanned it. Invoice runs wait for these hours and
// retention keeps their months.
func HoursNotRolledUp(ctx context.Context, s hoursInserter, st State) ([]time.Time, error) {
	if st.ClosedThrough.IsZero() {
		return nil, nil
	}
	return s.HoursInsertedSince(ctx, st.Watermark.Add(InsertSlack+time.Second), st.ClosedThrough)
}

// Store is what the rollup needs from storage.
type Store interface {
	ServerNow(ctx context.Context) (time.Time, error)
	EarliestSample(ctx context.Context) (time.Time, error)
	LoadRollupState(ctx context.Context, job string) (State, bool, error)
	SaveRollupState(ctx context.Context, job string, st State, version uint64) error
	HoursInsertedSince(ctx context.Context, since, before time.Time) ([]time.Time, error)
	RollupRange(ctx context.Context, from, to time.Time, version uint64) error
	RollupHours(ctx context.Context, hours []time.Time, version uint64) error
	MaxRollupVersion(ctx context.Context) (uint64, error)
	RawDroppedMonths(ctx context.Context) ([]time.Time, error)
}

// Config tunes the hourly rollup.
type Config struct {
	// Grace is how long after its end an hour stays open for late samples
	// before its first rollup.
	Grace time.Duration `yaml:"grace"`
	// Schedule is a cron spec for `gpumeter serve`.
	Schedule string `yaml:"schedule"`
}

// DefaultConfig: hours close 15 minutes after they end; the job runs
// every 5 minutes.
func DefaultConfig() Config {
	return Config{Grace: 15 * time.Minute, Schedule: "@every 5m"}
}

// Validate reports every problem.
func (c Config) Validate() error {
	var errs []error
	if c.Grace < 0 || c.Grace > 7*24*time.Hour {
		errs = append(errs, fmt.Errorf("rollup.grace %s: want 0 to 7 days", c.Grace))
	}
	if c.Schedule == "" {
		errs = append(errs, errors.New("rollup.schedule: required"))
	}
	return errors.Join(errs...)
}

// Service runs the hourly rollup job.
type Service struct {
	store  Store
	cfg    Config
	now    func() time.Time
	logger *slog.Logger
	last   uint64
}

const stateKey = "usage_hourly"

// StateKey names the hourly rollup's state in rollup_state.
const StateKey = stateKey

// New builds the job; now supplies versions (nanoseconds).
func New(st Store, cfg Config, now func() time.Time, logger *slog.Logger) *Service {
	return &Service{store: st, cfg: cfg, now: now, logger: logger.With("component", "rollup")}
}

// version is above every version in usage_hourly and grows from run to
// run: the highest version wins in ClickHouse, so a version taken from a
// clock that lags another machine's would hide this run's results.
func (r *Service) version(ctx context.Context) (uint64, error) {
	stored, err := r.store.MaxRollupVersion(ctx)
	if err != nil {
		return 0, err
	}
	v := max(uint64(r.now().UnixNano()), stored+1, r.last+1)
	r.last = v
	return v, nil
}

// RunResult says what a run did.
type RunResult struct {
	Closed []HourRange
	Late   []time.Time
}

// Run rolls up newly closed hours and hours reopened by late samples. It is
// safe to run at any time and to run twice. Newly closed hours go a day at
// a time, the state saved after each, so a long backlog (a first run, a
// large backfill) makes progress even when one run cannot finish it.
func (r *Service) Run(ctx context.Context) (RunResult, error) {
	serverNow, err := r.store.ServerNow(ctx)
	if err != nil {
		return RunResult{}, err
	}
	prev, hasPrev, err := r.store.LoadRollupState(ctx, stateKey)
	if err != nil {
		return RunResult{}, err
	}
	droppedMonths, err := r.store.RawDroppedMonths(ctx)
	if err != nil {
		return RunResult{}, err
	}
	dropped := NewDroppedMonths(droppedMonths)
	var earliest time.Time
	var late []time.Time
	if hasPrev {
		late, err = r.store.HoursInsertedSince(ctx, prev.Watermark, prev.ClosedThrough)
	} else {
		earliest, err = r.store.EarliestSample(ctx)
	}
	if err != nil {
		return RunResult{}, err
	}
	plan := NewPlan(prev, hasPrev, earliest, serverNow, r.cfg.Grace, late, dropped)
	if len(plan.InDroppedMonth) > 0 {
		r.logger.Warn("late samples for hours whose raw data retention dropped; hourly rollups keep their earlier totals",
			"hours", len(plan.InDroppedMonth), "first", plan.InDroppedMonth[0])
	}
	v, err := r.version(ctx)
	if err != nil {
		return RunResult{}, err
	}
	if err := r.store.RollupHours(ctx, plan.Late, v); err != nil {
		return RunResult{}, err
	}
	// Until the last chunk is done the watermark stays where it was, so a
	// run cut short loses no late sample.
	progress := State{Watermark: prev.Watermark, CompletedVersion: prev.CompletedVersion}
	for _, hr := range plan.Closing {
		for from := hr.From; from.Before(hr.To); {
			to := from.Add(24 * time.Hour)
			if to.After(hr.To) {
				to = hr.To
			}
			if err := r.store.RollupRange(ctx, from, to, v); err != nil {
				return RunResult{}, err
			}
			progress.ClosedThrough = to
			if to.Before(hr.To) {
				if err := r.store.SaveRollupState(ctx, stateKey, progress, v); err != nil {
					return RunResult{}, err
				}
			}
			from = to
		}
	}
	plan.Next.CompletedVersion = v
	if err := r.store.SaveRollupState(ctx, stateKey, plan.Next, v); err != nil {
		return RunResult{}, err
	}
	if len(plan.Closing) > 0 || len(plan.Late) > 0 {
		r.logger.Info("rollup done", "closed", len(plan.Closing), "late_hours", len(plan.Late),
			"closed_through", plan.Next.ClosedThrough)
	}
	return RunResult{Closed: plan.Closing, Late: plan.Late}, nil
}

// RangeMark is the state after a range rollup of [from, to) (whole
// hours) at version v, and whether it differs from prev. It is pure.
//
// A range rollup closes the hours it rolled up that are past the grace,
// when every hour before them is closed too: the range starts at or
// before the mark (or, before the first run, no raw sample is older than
// the range). Otherwise the mark cannot move without claiming hours that
// were never rolled up, and the scheduled job closes them. The watermark
// stays where it was (the range saw no late hours outside it, so the next
// scheduled run still looks for them); before the first run it starts
// where the scheduled job's first run would put it.
func RangeMark(prev State, hasPrev bool, earliest, serverNow time.Time, grace time.Duration, from, to time.Time, v uint64) (State, bool) {
	end := serverNow.Add(-grace).UTC().Truncate(time.Hour)
	if to.Before(end) {
		end = to
	}
	next := prev
	switch {
	case hasPrev:
		if from.After(prev.ClosedThrough) || !end.After(prev.ClosedThrough) {
			return prev, false
		}
	case !earliest.IsZero() && earliest.Before(from), !end.After(from):
		return prev, false
	default:
		next.Watermark = serverNow.Add(-InsertSlack).UTC()
	}
	next.ClosedThrough = end
	next.CompletedVersion = max(prev.CompletedVersion, v)
	return next, true
}

// RollupRange recomputes [from, to) by hand (`gpumeter rollup`), whole hours,
// and closes what RangeMark allows. A range that touches a month whose raw
// samples retention dropped is refused: recomputing it would lose those
// hours. Months around a dropped one are rolled up by ranges of their own.
func (r *Service) RollupRange(ctx context.Context, from, to time.Time) error {
	from, to = from.UTC().Truncate(time.Hour), to.UTC()
	if t := to.Truncate(time.Hour); !t.Equal(to) {
		to = t.Add(time.Hour)
	}
	if !to.After(from) {
		return fault.Validationf("rollup range: to must be after from")
	}
	months, err := r.store.RawDroppedMonths(ctx)
	if err != nil {
		return err
	}
	if in := NewDroppedMonths(months).Overlapping(from, to); len(in) > 0 {
		names := make([]string, len(in))
		for i, m := range in {
			names[i] = m.Format("2006-01")
		}
		return fault.Preconditionf("rollup range: retention dropped the raw samples of %s; recomputing would lose those hours (roll up the months around them separately)",
			strings.Join(names, ", "))
	}
	// Server time and the mark are read before the rollup: hours it closes
	// hold every sample inserted InsertSlack before it began.
	serverNow, err := r.store.ServerNow(ctx)
	if err != nil {
		return err
	}
	prev, hasPrev, err := r.store.LoadRollupState(ctx, stateKey)
	if err != nil {
		return err
	}
	var earliest time.Time
	if !hasPrev {
		if earliest, err = r.store.EarliestSample(ctx); err != nil {
			return err
		}
	}
	v, err := r.version(ctx)
	if err != nil {
		return err
	}
	if err := r.store.RollupRange(ctx, from, to, v); err != nil {
		return err
	}
	next, moved := RangeMark(prev, hasPrev, earliest, serverNow, r.cfg.Grace, from, to, v)
	if !moved {
		return nil
	}
	if err := r.store.SaveRollupState(ctx, stateKey, next, v); err != nil {
		return fmt.Errorf("rollup range: rolled up, but closing the hours failed: %w", err)
	}
	r.logger.Info("range rollup closed hours", "closed_through", next.ClosedThrough)
	return nil
}

// StateReader reads the rollup job's bookmark.
type StateReader interface {
	LoadRollupState(ctx context.Context, job string) (State, bool, error)
}

// RolledUpThrough is the hour before which usage_hourly is complete (zero
// before the first rollup run): readers take later hours from raw samples.
func RolledUpThrough(ctx context.Context, st StateReader) (time.Time, error) {
	s, _, err := st.LoadRollupState(ctx, stateKey)
	return s.ClosedThrough, err
}
