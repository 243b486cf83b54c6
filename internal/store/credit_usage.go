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
// in [FirstTenant, LastTenant], ordered by tenant, hour and SKU. Both
// sources are deduplicated (FINAL). Raw samples are summed per hour and
// SKU here. The hourly rollups are read as the rows FINAL keeps, one per
// tenant, hour, department and SKU, tombstones left out (samples > 0, as
// the usage query does), and TenantHours sums the departments of an hour
// and SKU, adjacent in this order, as the usage query's sums do (sum per
// meter, max for a peak, meter.Values.Add). On ClickHouse 18.16 grouping
// those rows on the server cost three to four times the sort (one batch
// of 500 tenants: 1.5-2.7 s against 0.45-0.7 s). The tenant range reads
// one stretch of usage_hourly's primary key (tenant, hour, …).
func (q tenantHoursQuery) toSQL() (string, []any) {
	args := []any{q.From.UTC(), q.To.UTC(), q.FirstTenant, q.LastTenant}
	if q.Source == usage.SourceHourly {
		return "SELECT tenant, hour, sku, " + meterColumns("") + " FROM usage_hourly FINAL" +
			" WHERE hour >= ? AND hour < ? AND tenant >= ? AND tenant <= ? AND samples > 0 ORDER BY tenant, hour, sku", args
	}
	return "SELECT tenant, toStartOfHour(start) AS bucket, sku, " + meterColumns("sum") + " FROM usage_samples FINAL" +
		" WHERE start >= ? AND start < ? AND tenant >= ? AND tenant <= ? GROUP BY tenant, bucket, sku ORDER BY tenant, bucket, sku", args
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
		if n := len(rows); n > 0 && rows[n-1].Bucket.Equal(r.Bucket) && rows[n-1].SKU == r.SKU {
			rows[n-1].Values = rows[n-1].Values.Add(r.Values) // another department's row of the hour and SKU
			return nil
		}
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
