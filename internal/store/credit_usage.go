package store

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/usage"
)

var _ usage.TenantHoursReader = (*Store)(nil)

// tenantHoursQuery is usage.TenantHoursQuery as the store runs it.
type tenantHoursQuery usage.TenantHoursQuery

// toSQL is TenantHours' statement and arguments: the usage of each tenant
// in [FirstTenant, LastTenant] per hour and SKU, ordered by tenant, hour
// and SKU. Both sources are deduplicated (FINAL); the hourly rollups
// leave tombstones out (samples > 0, as the usage query does), and their
// sums per hour and SKU over departments are the sums the usage query's
// rows give (sum per meter, max for a peak). The tenant range reads one
// stretch of usage_hourly's primary key (tenant, hour, …), so a batch of
// tenants costs the server the grouping of its own rows only.
func (q tenantHoursQuery) toSQL() (string, []any) {
	table, timeCol, extra := "usage_samples", "start", ""
	if q.Source == usage.SourceHourly {
		table, timeCol, extra = "usage_hourly", "hour", " AND samples > 0"
	}
	return "SELECT tenant, toStartOfHour(" + timeCol + ") AS bucket, sku, " + meterColumns("sum") +
			" FROM " + table + " FINAL WHERE " + timeCol + " >= ? AND " + timeCol + " < ? AND tenant >= ? AND tenant <= ?" + extra +
			" GROUP BY tenant, bucket, sku ORDER BY tenant, bucket, sku",
		[]any{q.From.UTC(), q.To.UTC(), q.FirstTenant, q.LastTenant}
}

// TenantHours streams the usage of the tenants in [q.FirstTenant,
// q.LastTenant] in [q.From, q.To) from q.Source, per hour and SKU: each
// tenant's rows, in hour and SKU order, go to each once its last row has
// been read, so only one tenant's rows are held at a time. rows is reused
// after each returns. Tenants without rows are not called.
func (s *Store) TenantHours(ctx context.Context, q usage.TenantHoursQuery, each func(tenant string, rows []usage.Row) error) error {
	if err := q.Validate(); err != nil {
		return fmt.Errorf("tenant hours: %w", err)
	}
	if err := s.checkTimes(ctx, "tenant hours", q.From, q.To.Add(-time.Second)); err != nil {
		return err
	}
	sql, args := tenantHoursQuery(q).toSQL()
	what := fmt.Sprintf("tenant hours %s %s..%s", q.Source, q.From.UTC().Format(time.RFC3339), q.To.UTC().Format(time.RFC3339))
	var (
		tenant, current string
		r               usage.Row
		rows            []usage.Row
	)
	dest := meterDest([]any{&tenant, &r.Bucket, &r.SKU}, &r.Values)
	err := s.eachRow(ctx, what, sql, args, func(scan scanFunc) error {
		if err := scan(dest...); err != nil {
			return err
		}
		if tenant != current && len(rows) > 0 {
			if err := each(current, rows); err != nil {
				return err
			}
			rows = rows[:0]
		}
		current = tenant
		r.Tenant, r.Bucket = tenant, r.Bucket.UTC()
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		return err
	}
	if len(rows) > 0 {
		return each(current, rows)
	}
	return nil
}
