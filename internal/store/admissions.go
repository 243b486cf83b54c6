package store

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/quota"
)

const admissionColumns = "admission_id, part, tenant, department, gpu_model, gpus, gpu_hours, spend, expires_at, released"

// The statements of this file (internal/chdbcheck runs them on chDB too).
const (
	insertAdmissionSQL = "INSERT INTO quota_admissions (" + admissionColumns + ", version)"
	heldAdmissionsSQL  = "SELECT " + admissionColumns + " FROM quota_admissions FINAL WHERE released = 0 AND expires_at > ? ORDER BY expires_at, admission_id, part"
)

var _ quota.AdmissionLog = (*Store)(nil)

// admissionLogTables are the admission log's tables, each with the column
// holding its rows' end: a closed set, the only names the pruning
// statements put into SQL.
var admissionLogTables = []struct{ table, end string }{
	{"quota_admissions", "expires_at"},
	{"credit_holds", "held_until"},
}

// The statements that prune the admission log, of a table and its end
// column from admissionLogTables (a table name with LocalSuffix on a
// cluster node).
func endedCountSQL(table, end string) string {
	return "SELECT count() FROM " + table + " WHERE " + end + " < ?"
}

func pruneEndedSQL(table, end string) string {
	return "ALTER TABLE " + table + " DELETE WHERE " + end + " < ?"
}

const (
	// tableTTLSQL counts the tables of a name (one or none) that expire
	// their rows by TTL (migration 0018, on newer servers).
	tableTTLSQL = "SELECT count() FROM system.tables WHERE database = ? AND name = ? AND engine_full LIKE '% TTL %'"
	// runningMutationsSQL counts a table's mutations not yet done.
	runningMutationsSQL = "SELECT count() FROM system.mutations WHERE database = ? AND table = ? AND is_done = 0"
)

// mutationWait bounds how long pruning waits for its delete to finish.
const mutationWait = 10 * time.Minute

// SaveAdmissions writes admission parts: held at version 1, released at 2.
func (s *Store) SaveAdmissions(ctx context.Context, as []quota.Admitted) error {
	rows := make([][]any, len(as))
	for i, a := range as {
		rows[i] = admissionRow(a)
	}
	return s.insert(ctx, "save quota admissions", insertAdmissionSQL, rows, nil)
}

func admissionRow(a quota.Admitted) []any {
	var released uint8
	version := uint64(1)
	if a.Released {
		released, version = 1, 2
	}
	// Seconds: an expiry rounded up never drops a held admission early.
	expires := a.Expires.UTC().Truncate(time.Second)
	if expires.Before(a.Expires) {
		expires = expires.Add(time.Second)
	}
	return []any{a.ID, uint16(a.Part), a.Tenant, a.Department, a.GPUModel, a.Demand.GPUs.Round(18), a.Demand.GPUHours.Round(18),
		a.Demand.Spend.Round(18), expires, released, version}
}

// HeldAdmissions lists the parts neither released nor expired at now.
func (s *Store) HeldAdmissions(ctx context.Context, now time.Time) ([]quota.Admitted, error) {
	return queryAll(ctx, s, "read held quota admissions", heldAdmissionsSQL, []any{now.UTC().Truncate(time.Second)}, func(scan scanFunc) (quota.Admitted, error) {
		var (
			a        quota.Admitted
			part     uint16
			released uint8
		)
		if err := scan(&a.ID, &part, &a.Tenant, &a.Department, &a.GPUModel, &a.Demand.GPUs, &a.Demand.GPUHours, &a.Demand.Spend,
			&a.Expires, &released); err != nil {
			return a, err
		}
		a.Part, a.Released, a.Expires = int(part), released == 1, a.Expires.UTC()
		return a, nil
	})
}

// PruneAdmissionLog deletes the quota admissions whose expiry, and the
// credit holds whose end, lie before before; on a cluster on every node.
// A table that expires its rows by TTL (migration 0018, ClickHouse 24.1 or
// newer) is left to it. Elsewhere (18.16) the delete is a mutation,
// issued only when some row is old enough, so a second run issues
// nothing; it returns the rows deleted (each replica's, on a replicated
// cluster, where a replica's delete may find its rows already gone, as
// DropRawMonth's drop repeats).
func (s *Store) PruneAdmissionLog(ctx context.Context, before time.Time) (int64, error) {
	return s.eachAdmissionLogTable(ctx, "prune", before, (*Store).pruneEnded)
}

// AdmissionLogEnded counts the rows PruneAdmissionLog(before) would
// delete now, deleting nothing (`retention --dry-run`).
func (s *Store) AdmissionLogEnded(ctx context.Context, before time.Time) (int64, error) {
	return s.eachAdmissionLogTable(ctx, "count the ended rows of", before, (*Store).countEnded)
}

// eachAdmissionLogTable runs fn on each admission log table, on every
// node of a cluster, and sums what it returns. before is taken down to
// the second: a row ending within before's second stays.
func (s *Store) eachAdmissionLogTable(ctx context.Context, what string, before time.Time,
	fn func(node *Store, ctx context.Context, table, end string, before time.Time) (int64, error)) (int64, error) {
	before = before.UTC().Truncate(time.Second)
	var total int64
	for _, t := range admissionLogTables {
		err := s.onEveryNode(ctx, t.table, func(node *Store, table string) error {
			n, err := fn(node, ctx, table, t.end, before)
			total += n
			return err
		})
		if err != nil {
			return total, fmt.Errorf("%s %s: %w", what, t.table, err)
		}
	}
	return total, nil
}

// countEnded counts table's rows whose end column lies before before, 0
// when the table expires its rows by TTL.
func (s *Store) countEnded(ctx context.Context, table, end string, before time.Time) (int64, error) {
	var ttl, n uint64
	if err := s.conn.QueryRow(ctx, tableTTLSQL, s.cfg.Database, table).Scan(&ttl); err != nil {
		return 0, fmt.Errorf("read the TTL of %s: %w", table, err)
	}
	if ttl > 0 {
		return 0, nil
	}
	if err := s.conn.QueryRow(ctx, endedCountSQL(table, end), before).Scan(&n); err != nil {
		return 0, fmt.Errorf("count ended rows: %w", err)
	}
	return int64(n), nil
}

// pruneEnded deletes table's rows whose end column lies before before,
// unless the table has a TTL, and waits for the delete to finish.
func (s *Store) pruneEnded(ctx context.Context, table, end string, before time.Time) (int64, error) {
	n, err := s.countEnded(ctx, table, end, before)
	if err != nil || n == 0 {
		return 0, err
	}
	if err := s.conn.Exec(ctx, pruneEndedSQL(table, end), before); err != nil {
		return 0, fmt.Errorf("delete %d ended rows: %w", n, err)
	}
	if err := s.waitMutations(ctx, table); err != nil {
		return 0, err
	}
	return n, nil
}

// waitMutations waits until table has no mutation left to do: 18.16 runs
// a delete in the background and has no setting to wait for it, and the
// job should report rows gone, not queued, and never stack a second delete
// on an unfinished first.
func (s *Store) waitMutations(ctx context.Context, table string) error {
	ctx, cancel := context.WithTimeout(ctx, mutationWait)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var n uint64
		if err := s.conn.QueryRow(ctx, runningMutationsSQL, s.cfg.Database, table).Scan(&n); err != nil {
			return fmt.Errorf("wait for the delete (system.mutations of %s): %w", table, err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("delete from %s not done after %s (system.mutations): %w", table, mutationWait, ctx.Err())
		case <-tick.C:
		}
	}
}
