package store

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/gpumeter/gpumeter/internal/rollup"
)

var _ rollup.RetentionStore = (*Store)(nil)

// The statements of this file (internal/chdbcheck runs them on chDB too).
const (
	// rawMonthsSQL lists a single-node database's raw partitions; its
	// argument is the database.
	rawMonthsSQL           = "SELECT DISTINCT partition FROM system.parts WHERE database = ? AND table = 'usage_samples' AND active"
	closedPeriodsSQL       = "SELECT DISTINCT period_start FROM closed_periods ORDER BY period_start"
	insertClosedPeriodSQL  = "INSERT INTO closed_periods (period_start, closed_at)"
	rawDroppedMonthsSQL    = "SELECT DISTINCT month FROM raw_dropped_months WHERE table_name = 'usage_samples' ORDER BY month"
	insertRawDroppedSQL    = "INSERT INTO raw_dropped_months (table_name, month, recorded_at)"
	rawDroppedBeforeSQL    = "SELECT dropped_before FROM raw_retention FINAL WHERE table_name = 'usage_samples'"
	insertRawDroppedBefore = "INSERT INTO raw_retention (table_name, dropped_before, version)"
)

// dropPartitionSQL drops month's partition of table (a toYYYYMM id built
// from the month's digits, never from user text).
func dropPartitionSQL(table string, month time.Time) string {
	id := month.UTC().Year()*100 + int(month.UTC().Month())
	return "ALTER TABLE " + table + " DROP PARTITION " + strconv.Itoa(id)
}

// closedPeriodRow is insertClosedPeriodSQL's row.
func closedPeriodRow(periodStart, closedAt time.Time) []any {
	return []any{periodStart.UTC(), closedAt.UTC()}
}

// rawDroppedBeforeRow is insertRawDroppedBefore's row.
func rawDroppedBeforeRow(t time.Time, version uint64) []any {
	return []any{"usage_samples", t.UTC(), version}
}

// rawDroppedRow is insertRawDroppedSQL's row for month, recorded at at.
func rawDroppedRow(month, at time.Time) []any {
	m := time.Date(month.UTC().Year(), month.UTC().Month(), 1, 0, 0, 0, 0, time.UTC)
	return []any{"usage_samples", m, at.UTC()}
}

// RawMonths lists the months (first day, UTC) that have raw-sample parts.
func (s *Store) RawMonths(ctx context.Context) ([]time.Time, error) {
	cluster, err := s.ClusterName(ctx)
	if err != nil {
		return nil, err
	}
	// Parts are per node; on a cluster, ask every node through cluster().
	// The name is a validated identifier (ClusterLayout), as cluster()
	// takes it only as a literal.
	query := rawMonthsSQL
	if cluster != "" {
		if !validIdentifier(cluster) {
			return nil, fmt.Errorf("list raw partitions: cluster name %q", cluster)
		}
		query = "SELECT DISTINCT partition FROM cluster('" + cluster + "', system, parts)" +
			" WHERE database = ? AND table = 'usage_samples" + LocalSuffix + "' AND active"
	}
	var out []time.Time
	err = s.eachRow(ctx, "list raw partitions", query, []any{s.cfg.Database}, func(scan scanFunc) error {
		var p string
		if err := scan(&p); err != nil {
			return err
		}
		m, err := monthFromPartition(p)
		if err != nil {
			return fmt.Errorf("list raw partitions: %w", err)
		}
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out, nil
}

// monthFromPartition reads a toYYYYMM partition id such as "202611".
func monthFromPartition(p string) (time.Time, error) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 197001 || n%100 < 1 || n%100 > 12 {
		return time.Time{}, fmt.Errorf("partition %q is not YYYYMM", p)
	}
	return time.Date(n/100, time.Month(n%100), 1, 0, 0, 0, 0, time.UTC), nil
}

// DropRawMonth drops one month of raw samples. The partition id is built
// from the month's digits, never from user text.
func (s *Store) DropRawMonth(ctx context.Context, month time.Time) error {
	id := month.UTC().Year()*100 + int(month.UTC().Month())
	// On a cluster each node drops its own part of the month (a replicated
	// drop repeats harmlessly on the other replicas).
	err := s.onEveryNode(ctx, "usage_samples", func(node *Store, table string) error {
		return node.conn.Exec(ctx, dropPartitionSQL(table, month))
	})
	if err != nil {
		return fmt.Errorf("drop raw month %d: %w", id, err)
	}
	return nil
}

// ClosedPeriods lists the first days of invoiced (closed) billing months.
func (s *Store) ClosedPeriods(ctx context.Context) ([]time.Time, error) {
	return s.utcTimes(ctx, "list closed periods", closedPeriodsSQL)
}

// MarkPeriodClosed records that a billing month has been invoiced.
func (s *Store) MarkPeriodClosed(ctx context.Context, periodStart, closedAt time.Time) error {
	return s.insert(ctx, "mark period closed", insertClosedPeriodSQL, [][]any{closedPeriodRow(periodStart, closedAt)}, nil)
}

// RawDroppedMonths lists the months (first day, UTC) whose raw samples
// retention dropped, oldest first.
func (s *Store) RawDroppedMonths(ctx context.Context) ([]time.Time, error) {
	months, err := s.utcTimes(ctx, "list dropped raw months", rawDroppedMonthsSQL)
	for i, d := range months {
		months[i] = time.Date(d.Year(), d.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	return months, err
}

// MarkRawMonthDropped records that a month's raw samples are (about to be)
// dropped. Recording it twice changes nothing.
func (s *Store) MarkRawMonthDropped(ctx context.Context, month, at time.Time) error {
	m := time.Date(month.UTC().Year(), month.UTC().Month(), 1, 0, 0, 0, 0, time.UTC)
	return s.insert(ctx, "record dropped raw month "+m.Format("2006-01"), insertRawDroppedSQL, [][]any{rawDroppedRow(month, at)}, nil)
}

// RawDroppedBefore is the end of the newest month retention dropped, zero
// when nothing has been dropped: the single mark raw_retention kept before
// raw_dropped_months. Only binaries from before migration 0006 decide by
// it; retention still raises it for them.
func (s *Store) RawDroppedBefore(ctx context.Context) (time.Time, error) {
	floors, err := s.utcTimes(ctx, "read retention floor", rawDroppedBeforeSQL)
	if err != nil || len(floors) == 0 {
		return time.Time{}, err
	}
	return floors[len(floors)-1], nil
}

// SetRawDroppedBefore records the retention floor (see RawDroppedBefore);
// version must grow.
func (s *Store) SetRawDroppedBefore(ctx context.Context, t time.Time, version uint64) error {
	return s.insert(ctx, "record retention floor", insertRawDroppedBefore, [][]any{rawDroppedBeforeRow(t, version)}, nil)
}
