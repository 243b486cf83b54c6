package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/rollup"
)

var _ rollup.Store = (*Store)(nil)

// rollupSQL recomputes usage_hourly for [from, to) from deduplicated raw
// samples. Hours are whole, so a re-run rewrites the same keys with a newer
// version and reads with FINAL see exactly one row per key. Keys that are
// gone from the raw samples (a sample re-imported with another department
// replaces its old row) are not in its result: tombstoneSQL clears them.
var rollupSQL = `INSERT INTO usage_hourly (hour, tenant, department, sku, samples,
    ` + meterColumns("") + `,
    ` + unmeasuredColumns("") + `,
    version)
SELECT toStartOfHour(start) AS hour, tenant, department, sku, count(),
    ` + meterColumns("sum") + `,
    ` + unmeasuredSums() + `, ?
FROM usage_samples FINAL
WHERE start >= ? AND start < ?
GROUP BY hour, tenant, department, sku`

// tombstoneSQL runs after rollupSQL with the same version and range: every
// key whose current (FINAL) row is older than this run was not in the raw
// samples this run read, so it gets a row at this run's version with no
// samples and every meter zero. FINAL then gives exactly the raw data's
// keys plus such tombstones, which add nothing to any sum; a reader that
// lists keys leaves out rows with samples = 0 (no real row has them: every
// group of rollupSQL counts at least one sample). Tombstones already in
// place are not rewritten. FINAL is applied before WHERE here (no PREWHERE
// is moved in front of FINAL, on 18.16 or newer servers), so the row tested
// is the current one.
//
// Only hours that still have raw samples get tombstones. Re-imports replace
// raw rows but never empty an hour, so an hour without any is one whose raw
// month retention dropped (the caller never recomputes those, but a drop
// can land while a run is under way): its rows are kept, not zeroed.
// GLOBAL IN reads the subquery once across the cluster in cluster mode;
// on a single node it is a plain IN.
var tombstoneSQL = `INSERT INTO usage_hourly (hour, tenant, department, sku, samples,
    ` + meterColumns("") + `,
    ` + unmeasuredColumns("") + `,
    version)
SELECT hour, tenant, department, sku, 0,
    ` + strings.Repeat("0, ", int(meter.Count)+meter.NumGroups) + `
    ?
FROM usage_hourly FINAL
WHERE hour >= ? AND hour < ? AND version < ? AND samples > 0
    AND hour GLOBAL IN (SELECT DISTINCT toStartOfHour(start) FROM usage_samples WHERE start >= ? AND start < ?)`

// RollupRange recomputes usage_hourly for every hour in [from, to); both
// must be whole hours. version must grow from run to run (the caller uses
// the run's start time in nanoseconds).
func (s *Store) RollupRange(ctx context.Context, from, to time.Time, version uint64) error {
	if !from.Equal(from.Truncate(time.Hour)) || !to.Equal(to.Truncate(time.Hour)) || !to.After(from) {
		return fmt.Errorf("rollup %s..%s: want whole hours, from before to", from, to)
	}
	// Recomputed rows first, then tombstones for the keys they left out: a
	// run that fails between the two leaves the old keys (as before it
	// ran), and its caller repeats it.
	if err := s.conn.Exec(ctx, rollupSQL, version, from.UTC(), to.UTC()); err != nil {
		return fmt.Errorf("rollup %s..%s: %w", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), err)
	}
	if err := s.conn.Exec(ctx, tombstoneSQL, version, from.UTC(), to.UTC(), version, from.UTC(), to.UTC()); err != nil {
		return fmt.Errorf("rollup %s..%s: clear vanished keys: %w", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), err)
	}
	return nil
}

// RollupHours recomputes the given hours, merging adjacent ones into ranges
// so that a day of hours is one statement.
func (s *Store) RollupHours(ctx context.Context, hours []time.Time, version uint64) error {
	for _, r := range HourRanges(hours) {
		if err := s.RollupRange(ctx, r[0], r[1], version); err != nil {
			return err
		}
	}
	return nil
}

// HourRanges sorts hours and merges runs of consecutive hours into
// [from, to) ranges.
func HourRanges(hours []time.Time) [][2]time.Time {
	if len(hours) == 0 {
		return nil
	}
	hs := make([]time.Time, len(hours))
	for i, h := range hours {
		hs[i] = h.UTC().Truncate(time.Hour)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].Before(hs[j]) })
	var out [][2]time.Time
	cur := [2]time.Time{hs[0], hs[0].Add(time.Hour)}
	for _, h := range hs[1:] {
		switch {
		case h.Before(cur[1]): // duplicate
		case h.Equal(cur[1]):
			cur[1] = h.Add(time.Hour)
		default:
			out = append(out, cur)
			cur = [2]time.Time{h, h.Add(time.Hour)}
		}
	}
	return append(out, cur)
}

// hoursInsertedSinceSQL is HoursInsertedSince's statement; its arguments
// are since and before.
const hoursInsertedSinceSQL = "SELECT DISTINCT toStartOfHour(start) AS hour FROM usage_samples WHERE inserted_at >= ? AND start < ? ORDER BY hour"

// HoursInsertedSince lists the hours of samples inserted at or after since
// (server time) whose start is before `before`: the hours late data reopened.
func (s *Store) HoursInsertedSince(ctx context.Context, since, before time.Time) ([]time.Time, error) {
	return s.utcTimes(ctx, "find late hours", hoursInsertedSinceSQL, since.UTC(), before.UTC())
}

// EarliestSample is the start of the oldest raw sample, or zero when none.
func (s *Store) EarliestSample(ctx context.Context) (time.Time, error) {
	var n uint64
	var t time.Time
	if err := s.conn.QueryRow(ctx, "SELECT count(), min(start) FROM usage_samples").Scan(&n, &t); err != nil {
		return time.Time{}, fmt.Errorf("earliest sample: %w", err)
	}
	if n == 0 {
		return time.Time{}, nil
	}
	return t.UTC(), nil
}

// ServerNow is the server's clock, the clock inserted_at is written with.
func (s *Store) ServerNow(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := s.conn.QueryRow(ctx, "SELECT now()").Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("server time: %w", err)
	}
	return t.UTC(), nil
}

// LoadRollupState reads the job's state; ok is false before the first run.
func (s *Store) LoadRollupState(ctx context.Context, job string) (st rollup.State, ok bool, err error) {
	err = s.eachRow(ctx, "load rollup state "+job, "SELECT closed_through, watermark, completed_version FROM rollup_state FINAL WHERE job = ?",
		[]any{job}, func(scan scanFunc) error {
			ok = true
			return scan(&st.ClosedThrough, &st.Watermark, &st.CompletedVersion)
		})
	if err != nil {
		return rollup.State{}, false, err
	}
	st.ClosedThrough, st.Watermark = st.ClosedThrough.UTC(), st.Watermark.UTC()
	return st, ok, nil
}

// SaveRollupState records the job's state with a version that must grow.
func (s *Store) SaveRollupState(ctx context.Context, job string, st rollup.State, version uint64) error {
	return s.insert(ctx, "save rollup state "+job, "INSERT INTO rollup_state (job, closed_through, watermark, completed_version, version)",
		[][]any{{job, st.ClosedThrough.UTC(), st.Watermark.UTC(), st.CompletedVersion, version}}, nil)
}

// MaxRollupVersion is the highest version in usage_hourly (0 when empty).
// New runs write above it, so a recompute is never hidden behind rows a
// machine with a faster clock wrote earlier.
func (s *Store) MaxRollupVersion(ctx context.Context) (uint64, error) {
	var v uint64
	if err := s.conn.QueryRow(ctx, "SELECT max(version) FROM usage_hourly").Scan(&v); err != nil {
		return 0, fmt.Errorf("max rollup version: %w", err)
	}
	return v, nil
}
