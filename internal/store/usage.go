package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// dimensions in the order rows hold them.
var dimensions = []usage.Dimension{usage.DimTenant, usage.DimDepartment, usage.DimSKU, usage.DimHost, usage.DimWorkload}

// usageQuery is usage.Query as the store runs it: checked against the
// columns and times the tables hold (Validate), then turned into SQL.
type usageQuery usage.Query

var (
	_ usage.Store     = (*Store)(nil)
	_ quota.LiveStore = (*Store)(nil)
)

// toSQL builds the statement and its arguments. Identifiers come only from
// the closed enums above; every value is a bind parameter.
func (q usageQuery) toSQL() (string, []any) {
	table, timeCol := "usage_samples", "start"
	count := "count()"
	if q.Source == usage.SourceHourly {
		table, timeCol = "usage_hourly", "hour"
		count = "sum(samples)"
	}
	var sel, group []string
	switch q.Bucket {
	case usage.BucketHour:
		sel = append(sel, "toStartOfHour("+timeCol+") AS bucket")
		group = append(group, "bucket")
	case usage.BucketDay:
		sel = append(sel, "toStartOfDay("+timeCol+") AS bucket")
		group = append(group, "bucket")
	case usage.BucketMonth:
		// toStartOfMonth returns a Date; keep every bucket a DateTime.
		sel = append(sel, "toDateTime(toStartOfMonth("+timeCol+")) AS bucket")
		group = append(group, "bucket")
	default:
		sel = append(sel, "toDateTime(0) AS bucket")
	}
	has := map[usage.Dimension]bool{}
	for _, d := range q.GroupBy {
		has[d] = true
	}
	for _, d := range dimensions {
		if has[d] {
			sel = append(sel, string(d))
			group = append(group, string(d))
		} else {
			// Not "AS tenant": ClickHouse resolves aliases in WHERE, so the
			// literal would shadow the column of a tenant = ? predicate.
			sel = append(sel, "'' AS no_"+string(d))
		}
	}
	sel = append(sel, count+" AS sample_count", meterColumns("sum"))
	if q.Source == usage.SourceHourly {
		sel = append(sel, unmeasuredColumns("sum"))
	} else {
		sel = append(sel, unmeasuredSums())
	}

	where := []string{timeCol + " >= ?", timeCol + " < ?"}
	args := []any{q.From.UTC(), q.To.UTC()}
	if q.Tenant != "" {
		where = append(where, "tenant = ?")
		args = append(args, q.Tenant)
	}
	if q.Department != "" {
		where = append(where, "department = ?")
		args = append(args, q.Department)
	}
	conds, scopeArgs := scopeWhere(q.Scope)
	where, args = append(where, conds...), append(args, scopeArgs...)
	if q.Source == usage.SourceHourly {
		// A recompute leaves a tombstone (samples = 0, every meter zero) where a
		// key vanished from raw. WHERE runs after FINAL, so the tombstone
		// replaces the stale row first and then is filtered out itself.
		where = append(where, "samples > 0")
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	b.WriteString(strings.Join(sel, ", "))
	b.WriteString(" FROM " + table + " FINAL WHERE ")
	b.WriteString(strings.Join(where, " AND "))
	if len(group) > 0 {
		b.WriteString(" GROUP BY " + strings.Join(group, ", "))
		b.WriteString(" ORDER BY " + strings.Join(group, ", "))
	}
	return b.String(), args
}

// Usage runs a usage query. Reads deduplicate by sample_id (FINAL), so a
// sample delivered twice counts once.
func (s *Store) Usage(ctx context.Context, query usage.Query) ([]usage.Row, error) {
	q := usageQuery(query)
	if err := query.Validate(); err != nil {
		return nil, fmt.Errorf("usage query: %w", err)
	}
	// A To of exactly the limit's next second is fine: the range is [from, to).
	if err := s.checkTimes(ctx, "usage query", q.From, q.To.Add(-time.Second)); err != nil {
		return nil, err
	}
	sql, args := q.toSQL()
	// One destination list for every row (each scan sets every field):
	// building it per row was most of the allocations of reading a
	// tenant's month (internal/usage's blocks).
	var r usage.Row
	dest := totalsDest([]any{&r.Bucket, &r.Tenant, &r.Department, &r.SKU, &r.Host, &r.Workload, &r.Samples}, &r.Totals)
	return queryAll(ctx, s, "usage query", sql, args, func(scan scanFunc) (usage.Row, error) {
		err := scan(dest...)
		if q.Bucket == usage.BucketNone {
			r.Bucket = time.Time{}
		} else {
			r.Bucket = r.Bucket.UTC()
		}
		return r, err
	})
}

// liveConcurrencySQL is LatestHoldings' statement; its arguments are
// since and until.
const liveConcurrencySQL = "SELECT tenant, gpu_model, argMax(gpu_microseconds, end), toUInt64(argMax(toUInt64(end) - toUInt64(start), end))" +
	" FROM usage_samples WHERE end >= ? AND end <= ? AND tenant != '' GROUP BY gpu_uuid, mig_uuid, tenant, gpu_model"

// LatestHoldings is, per GPU and MIG instance, the latest sample of a
// tenant ending in [since, until] (a sample cannot end in the future):
// what it held and for how long. Idle capacity (tenant "") is left out.
func (s *Store) LatestHoldings(ctx context.Context, since, until time.Time) ([]quota.Holding, error) {
	return queryAll(ctx, s, "latest holdings", liveConcurrencySQL, []any{since.UTC(), until.UTC()}, func(scan scanFunc) (quota.Holding, error) {
		var h quota.Holding
		err := scan(&h.Tenant, &h.GPUModel, &h.GPUMicroseconds, &h.Seconds)
		return h, err
	})
}

// SlurmJobUsage is the GPU time the collectors measured for one Slurm
// job's workload ("slurm/<job id>") and tenant.
type SlurmJobUsage struct {
	JobID           string
	Tenant          string
	GPUMicroseconds uint64
}

// slurmJobUsageSQL sums measured GPU time per Slurm job in [from, to),
// deduplicated. Rows `import --from-sacct` made (devices SLURM-…) are
// allocations, not measurements, and stay out.
const slurmJobUsageSQL = `SELECT substring(workload, 7) AS job, tenant, sum(gpu_microseconds)
FROM usage_samples FINAL
WHERE start >= ? AND start < ? AND startsWith(workload, 'slurm/') AND NOT startsWith(gpu_uuid, 'SLURM-')
GROUP BY job, tenant
ORDER BY job, tenant`

// SlurmJobUsage reads what the collectors measured per Slurm job in
// [from, to) (the sacct comparison, docs/slurm.md).
func (s *Store) SlurmJobUsage(ctx context.Context, from, to time.Time) ([]SlurmJobUsage, error) {
	if !to.After(from) {
		return nil, fmt.Errorf("slurm job usage: from %s must be before to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	if err := s.checkTimes(ctx, "slurm job usage", from, to.Add(-time.Second)); err != nil {
		return nil, err
	}
	return queryAll(ctx, s, "slurm job usage", slurmJobUsageSQL, []any{from.UTC(), to.UTC()}, func(scan scanFunc) (SlurmJobUsage, error) {
		var u SlurmJobUsage
		err := scan(&u.JobID, &u.Tenant, &u.GPUMicroseconds)
		return u, err
	})
}
