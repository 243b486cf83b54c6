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
// in [FirstTenant, LastTenant]. Both sources are deduplicated (FINAL).
// Raw samples are summed per hour and SKU here, ordered by tenant, hour
// and SKU. The hourly rollups are read as the rows FINAL keeps, one per
// tenant, hour, department and SKU, tombstones left out (samples > 0, as
// the usage query does), in usage_hourly's key order (tenant, hour,
// department, SKU), and TenantHours sums the departments of an hour and
// SKU as the usage query's sums do (sum per meter, max for a peak,
// meter.Values.Add). On ClickHouse 18.16 grouping those rows on the
// server cost three to four times the sort (one batch of 500 tenants:
// 1.5-2.7 s against 0.45-0.7 s). The tenant range reads one stretch of
// usage_hourly's primary key (tenant, hour, …).
func (q tenantHoursQuery) toSQL() (string, []any) {
	if q.Source == usage.SourceHourly {
		sql, args := q.finalOrderSQL()
		return sql + " ORDER BY tenant, hour, department, sku", args
	}
	args := []any{q.From.UTC(), q.To.UTC(), q.FirstTenant, q.LastTenant}
	return "SELECT tenant, toStartOfHour(start) AS bucket, sku, " + meterColumns("sum") + " FROM usage_samples FINAL" +
		" WHERE start >= ? AND start < ? AND tenant >= ? AND tenant <= ? GROUP BY tenant, bucket, sku ORDER BY tenant, bucket, sku", args
}

// finalOrderSQL is the hourly read without its ORDER BY, for servers
// whose FINAL already gives the rows in key order: before 19.x it reads
// all parts through one merge in the table's key order, across parts and
// partitions (18.16: a batch of 500 tenants in 0.14 s against 0.36-0.45 s
// with the sort). TenantHours checks the order all the same.
func (q tenantHoursQuery) finalOrderSQL() (string, []any) {
	args := []any{q.From.UTC(), q.To.UTC(), q.FirstTenant, q.LastTenant}
	return "SELECT tenant, hour, sku, " + meterColumns("") + " FROM usage_hourly FINAL" +
		" WHERE hour >= ? AND hour < ? AND tenant >= ? AND tenant <= ? AND samples > 0", args
}

// finalInKeyOrder is whether a server of version v reads FINAL in the
// table's key order (see finalOrderSQL): 18.x, the version tests run.
func finalInKeyOrder(v Version) bool { return v.Major < 19 }

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
	if q.Source == usage.SourceHourly {
		v, err := s.ServerVersion(ctx)
		if err != nil {
			return fmt.Errorf("tenant hours: %w", err)
		}
		if finalInKeyOrder(v) {
			sql, args = tenantHoursQuery(q).finalOrderSQL()
		}
	}
	what := fmt.Sprintf("tenant hours %s %s..%s", q.Source, q.From.UTC().Format(time.RFC3339), q.To.UTC().Format(time.RFC3339))
	var (
		tenant string
		r      usage.Row
		acc    tenantRows
	)
	dest := meterDest([]any{&tenant, &r.Bucket, &r.SKU}, &r.Values)
	err := s.eachRow(ctx, what, sql, args, func(scan scanFunc) error {
		if err := scan(dest...); err != nil {
			return err
		}
		r.Tenant, r.Bucket = tenant, r.Bucket.UTC()
		done, rows, err := acc.add(r)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if rows != nil {
			return each(done, rows)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if tenant, rows := acc.flush(); rows != nil {
		return each(tenant, rows)
	}
	return nil
}

// tenantRows gathers rows that come in tenant and hour order (of any
// department and SKU order within an hour) into each tenant's rows per
// hour and SKU, in hour and SKU order, the rows of an hour and SKU summed
// (meter.Values.Add: sums, a peak's maximum).
type tenantRows struct {
	tenant      string
	rows, spare []usage.Row // spare: the rows last handed out
	hourStart   int         // rows[hourStart:] are the current hour's
}

// add takes r; when r begins another tenant it returns the previous
// tenant and its rows, which stay as they are until the next tenant's
// rows are handed out. Rows out of tenant or hour order are an error.
func (t *tenantRows) add(r usage.Row) (done string, rows []usage.Row, err error) {
	if len(t.rows) > 0 && r.Tenant != t.tenant {
		if r.Tenant < t.tenant {
			return "", nil, fmt.Errorf("rows out of order: tenant %q after %q", r.Tenant, t.tenant)
		}
		done, rows = t.flush()
	}
	t.tenant = r.Tenant
	if n := len(t.rows); n > 0 && !r.Bucket.Equal(t.rows[n-1].Bucket) {
		if r.Bucket.Before(t.rows[n-1].Bucket) {
			return "", nil, fmt.Errorf("rows out of order: %s hour %s after %s", r.Tenant,
				r.Bucket.Format(time.RFC3339), t.rows[n-1].Bucket.Format(time.RFC3339))
		}
		t.hourStart = n
	}
	hour := t.rows[t.hourStart:]
	for i := range hour {
		if hour[i].SKU == r.SKU { // another department's row of the hour and SKU
			hour[i].Values = hour[i].Values.Add(r.Values)
			return done, rows, nil
		}
	}
	// In SKU order within the hour (a few SKUs: an insertion).
	t.rows = append(t.rows, r)
	for i := len(t.rows) - 1; i > t.hourStart && t.rows[i].SKU < t.rows[i-1].SKU; i-- {
		t.rows[i], t.rows[i-1] = t.rows[i-1], t.rows[i]
	}
	return done, rows, nil
}

// flush returns the tenant and its rows gathered so far (nil for none)
// and starts the next tenant's.
func (t *tenantRows) flush() (string, []usage.Row) {
	tenant, rows := t.tenant, t.rows
	t.rows, t.spare, t.hourStart = t.spare[:0], rows, 0
	if len(rows) == 0 {
		return tenant, nil
	}
	return tenant, rows
}
