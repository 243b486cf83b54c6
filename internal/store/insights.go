package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/insights"
)

// The reads below load exactly the inputs internal/insights takes
// (docs/insights.md, "Inputs and the store queries that feed them"). They
// feed money (idle cost, savings, spend), so they deduplicate with FINAL
// like every such read, and each is bounded by a validated period.

// Bounds of an insights read. Holdings come from raw samples (8.7 M rows a
// day for 1,000 GPUs at 10 s), so a quarter at most; series come from the
// hourly rollup, so more than a year (capacity and forecasts fit weeks).
const (
	MaxHoldingsRange = 93 * 24 * time.Hour
	MaxSeriesRange   = 400 * 24 * time.Hour
)

// InsightsQuery is the period [From, To) of an insights read, in whole UTC
// hours (the package's periods are), optionally of one tenant. Scope, when
// set, keeps the read to what an API key may see, by the rule /v1/usage
// follows (scopeWhere): a department key reads the rows labelled with its
// department, whatever the tenant's other rows say.
type InsightsQuery struct {
	From, To time.Time
	Tenant   string
	Scope    auth.Scope
}

// validate reports every problem; limit is the longest period allowed.
func (q InsightsQuery) validate(limit time.Duration) error {
	var errs []error
	if q.From.IsZero() || q.To.IsZero() {
		return errors.New("from/to: both required")
	}
	if !q.To.After(q.From) {
		errs = append(errs, errors.New("to: must be after from"))
	} else if q.To.Sub(q.From) > limit {
		errs = append(errs, fmt.Errorf("from/to: %s is longer than %s", q.To.Sub(q.From), limit))
	}
	if !collectors.InStorableRange(q.From) || !collectors.InStorableRange(q.To) {
		errs = append(errs, errors.New("from/to: outside 1970-01-01 .. 2106-02-07"))
	}
	for _, t := range []time.Time{q.From, q.To} {
		if !t.Equal(t.Truncate(time.Hour)) {
			errs = append(errs, fmt.Errorf("from/to: %s is not a whole UTC hour", t.UTC().Format(time.RFC3339Nano)))
		}
	}
	if q.Tenant == collectors.UnattributedTenant {
		errs = append(errs, fmt.Errorf("tenant: %q is no tenant", q.Tenant))
	}
	if q.Scope.Kind != "" {
		if err := q.Scope.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ValidateHoldings checks the query for HoldingsOf.
func (q InsightsQuery) ValidateHoldings() error { return q.validate(MaxHoldingsRange) }

// ValidateSeries checks the query for the series reads.
func (q InsightsQuery) ValidateSeries() error { return q.validate(MaxSeriesRange) }

// filter is the query's tenant and scope predicates (tenantFilter).
func (q InsightsQuery) filter() (string, []any) { return tenantFilter(q.Tenant, q.Scope) }

// tenantFilter is the predicates of an optional tenant and a scope, each
// starting with " AND ", and their arguments.
func tenantFilter(tenant string, scope auth.Scope) (string, []any) {
	var sql string
	var args []any
	if tenant != "" {
		sql += " AND tenant = ?"
		args = append(args, tenant)
	}
	conds, scopeArgs := scopeWhere(scope)
	for _, c := range conds {
		sql += " AND " + c
	}
	return sql, append(args, scopeArgs...)
}

// holdingsSQL sums a tenant's workloads per device and interval start:
// GPU and SM time add up, the memory peak is the largest, and SM activity
// is unmeasured when any workload's was (bit 1 of unmeasured). Idle
// capacity (the empty tenant) and unattributed time are no holding. Rows come in
// (gpu, instance, tenant, start) order, so a holding is complete when the
// key changes and the reader streams.
func (q InsightsQuery) holdingsSQL() (string, []any) {
	sql := "SELECT gpu_uuid, mig_uuid, tenant, start, toUInt64(toUInt64(max(end)) - toUInt64(start)) AS seconds," +
		" min(host), min(department), min(sku), sum(gpu_microseconds), sum(sm_active_microseconds)," +
		" max(mem_peak_bytes), max(bitAnd(unmeasured, 1))" +
		" FROM usage_samples FINAL WHERE start >= ? AND start < ? AND tenant != '' AND tenant != ?"
	args := []any{q.From.UTC(), q.To.UTC(), collectors.UnattributedTenant}
	f, fargs := q.filter()
	return sql + f + " GROUP BY gpu_uuid, mig_uuid, tenant, start ORDER BY gpu_uuid, mig_uuid, tenant, start", append(args, fargs...)
}

// ScanHoldings streams the holdings of [From, To): each tenant's use of
// each GPU, MIG instance or vGPU with its intervals in time order, one
// holding at a time as the rows arrive (fn's holding is its own).
func (s *Store) ScanHoldings(ctx context.Context, q InsightsQuery, fn func(insights.Holding) error) error {
	if err := q.ValidateHoldings(); err != nil {
		return fmt.Errorf("holdings query: %w", err)
	}
	if err := s.checkTimes(ctx, "holdings query", q.From, q.To.Add(-time.Second)); err != nil {
		return err
	}
	sql, args := q.holdingsSQL()
	var cur insights.Holding
	err := s.eachRow(ctx, "holdings query", sql, args, func(scan scanFunc) error {
		var (
			gpu, mig, tenant, host, dept, sku string
			start                             time.Time
			secs, gpuUS, smUS, peak           uint64
			unmeasured                        uint8
		)
		if err := scan(&gpu, &mig, &tenant, &start, &secs, &host, &dept, &sku, &gpuUS, &smUS, &peak, &unmeasured); err != nil {
			return err
		}
		if gpu != cur.GPUUUID || mig != cur.InstanceUUID || tenant != cur.Tenant {
			if len(cur.Intervals) > 0 {
				if err := fn(cur); err != nil {
					return err
				}
			}
			cur = insights.Holding{Tenant: tenant, Department: dept, Host: host, GPUUUID: gpu, InstanceUUID: mig, SKU: sku}
		}
		iv := insights.Interval{Start: start.UTC(), DurationMicros: int64(secs) * 1_000_000, GPUMicros: int64(gpuUS),
			SMActiveMicros: int64(smUS), MemPeakBytes: int64(peak), SMUnmeasured: unmeasured != 0}
		if iv.SMUnmeasured {
			// A workload without a reading leaves the interval's SM time
			// unknown; a partial sum would read as low activity.
			iv.SMActiveMicros = 0
		}
		cur.Intervals = append(cur.Intervals, iv)
		return nil
	})
	if err != nil {
		return err
	}
	if len(cur.Intervals) > 0 {
		return fn(cur)
	}
	return nil
}

// Holdings collects ScanHoldings.
func (s *Store) Holdings(ctx context.Context, q InsightsQuery) ([]insights.Holding, error) {
	var out []insights.Holding
	err := s.ScanHoldings(ctx, q, func(h insights.Holding) error {
		out = append(out, h)
		return nil
	})
	return out, err
}

// hourlyGPUSQL is each tenant's GPU time per UTC hour from the rollup
// (tombstones, samples = 0, left out after FINAL).
func (q InsightsQuery) hourlyGPUSQL() (string, []any) {
	sql := "SELECT tenant, hour, sum(gpu_microseconds) FROM usage_hourly FINAL" +
		" WHERE hour >= ? AND hour < ? AND samples > 0 AND tenant != '' AND tenant != ?"
	args := []any{q.From.UTC(), q.To.UTC(), collectors.UnattributedTenant}
	f, fargs := q.filter()
	return sql + f + " GROUP BY tenant, hour ORDER BY tenant, hour", append(args, fargs...)
}

// HourlyGPUTime is each tenant's GPU-microseconds per UTC hour over
// [From, To), by tenant, then hour. Hours without rows are absent.
func (s *Store) HourlyGPUTime(ctx context.Context, q InsightsQuery) ([]insights.HourTotal, error) {
	if err := q.ValidateSeries(); err != nil {
		return nil, fmt.Errorf("hourly series query: %w", err)
	}
	sql, args := q.hourlyGPUSQL()
	return s.hourTotals(ctx, "hourly series query", sql, args)
}

// demandSQL is each GPU model's GPU time in use per UTC hour: the SKU's
// part before '/', every tenant but idle capacity (unattributed use still
// occupies GPUs).
func (q InsightsQuery) demandSQL() (string, []any) {
	return "SELECT splitByChar('/', sku)[1] AS model, hour, sum(gpu_microseconds) FROM usage_hourly FINAL" +
			" WHERE hour >= ? AND hour < ? AND samples > 0 AND tenant != ''" +
			" GROUP BY model, hour ORDER BY model, hour",
		[]any{q.From.UTC(), q.To.UTC()}
}

// validateDemand checks a query for ModelGPUTime: a series query of the
// whole fleet.
func (q InsightsQuery) validateDemand() error {
	if err := q.ValidateSeries(); err != nil {
		return err
	}
	if q.Tenant != "" || (q.Scope.Kind != "" && q.Scope.Kind != auth.KindAdmin) {
		return fmt.Errorf("demand is the fleet's, not of tenant %q or scope %s: %w", q.Tenant, q.Scope, ErrUnscopable)
	}
	return nil
}

// ModelGPUTime is each GPU model's GPU-microseconds in use per UTC hour
// (idle capacity left out), by model, then hour. Capacity is the
// fleet's: a query narrowed to a tenant or a scope other than admin is
// refused rather than answered for the whole fleet.
func (s *Store) ModelGPUTime(ctx context.Context, q InsightsQuery) ([]insights.HourTotal, error) {
	if err := q.validateDemand(); err != nil {
		return nil, fmt.Errorf("demand query: %w", err)
	}
	sql, args := q.demandSQL()
	return s.hourTotals(ctx, "demand query", sql, args)
}

// hourTotals reads (key, hour, GPU-microseconds) rows.
func (s *Store) hourTotals(ctx context.Context, what, sql string, args []any) ([]insights.HourTotal, error) {
	if err := s.checkTimes(ctx, what, args[0].(time.Time), args[1].(time.Time).Add(-time.Second)); err != nil {
		return nil, err
	}
	return queryAll(ctx, s, what, sql, args, func(scan scanFunc) (insights.HourTotal, error) {
		var h insights.HourTotal
		err := scan(&h.Key, &h.Hour, &h.GPUMicroseconds)
		h.Hour = h.Hour.UTC()
		return h, err
	})
}

// gpusByModelSQL counts the GPUs that reported in [since, until), by model:
// every GPU-second is recorded (idle with an empty tenant), so a GPU of the
// fleet has samples in any window longer than the collector's interval.
// Counting distinct GPUs, duplicates do not matter and FINAL is not needed.
const gpusByModelSQL = "SELECT gpu_model, uniqExact(gpu_uuid) FROM usage_samples WHERE start >= ? AND start < ? GROUP BY gpu_model ORDER BY gpu_model"

// GPUsByModel is the capacity by GPU model: the GPUs that reported in
// [since, until).
func (s *Store) GPUsByModel(ctx context.Context, since, until time.Time) (map[string]int, error) {
	if !until.After(since) {
		return nil, errors.New("gpus by model: until must be after since")
	}
	counts, err := queryMap[string, uint64](ctx, s, "gpus by model", gpusByModelSQL, since.UTC(), until.UTC())
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(counts))
	for model, n := range counts {
		out[model] = int(n)
	}
	return out, nil
}

// firstHourSQL is the oldest hour of the rollup (tombstones too: a key
// that vanished was still recorded once).
const firstHourSQL = "SELECT count(), min(hour) FROM usage_hourly"

// FirstHour is the oldest hour the hourly rollup holds, or zero when it
// holds none: before it the fleet recorded nothing, so a series' hours
// before it are unknown, not zero.
func (s *Store) FirstHour(ctx context.Context) (time.Time, error) {
	var n uint64
	var t time.Time
	if err := s.conn.QueryRow(ctx, firstHourSQL).Scan(&n, &t); err != nil {
		return time.Time{}, fmt.Errorf("first rolled-up hour: %w", err)
	}
	if n == 0 {
		return time.Time{}, nil
	}
	return t.UTC(), nil
}
