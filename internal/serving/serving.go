// Package serving holds the services the HTTP API calls (internal/server
// declares them): usage series and invoices over the store, each query in
// the caller's scope, which the store applies in SQL.
package serving

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/pricing"
)

// Store is what the services read.
type Store interface {
	RawDroppedBefore(ctx context.Context) (time.Time, error)
	Usage(ctx context.Context, q store.UsageQuery) ([]store.UsageRow, error)
	LoadRollupState(ctx context.Context, job string) (billing.RollupState, bool, error)
}

// Service implements the API's services.
type Service struct {
	store      Store
	issuer     string
	customers  billing.Customers
	chargeback billing.ChargebackConfig
	now        func() time.Time
	cache      usageCache
	// pricing holds the customers' books parsed, re-read when a file
	// changes: requests never parse YAML.
	pricing *billing.PricingCache
}

var _ server.UsageService = (*Service)(nil)

// New serves the store's data for the configured customers (whose issuer
// names the invoice ledger) and chargeback; now is the clock of
// month-to-date figures.
func New(st Store, customers billing.Customers, cb billing.ChargebackConfig, now func() time.Time) *Service {
	return &Service{store: st, issuer: customers.Issuer.ID, customers: customers, chargeback: cb, now: now, pricing: billing.NewPricingCache()}
}

// Usage sums the request's meters per bucket and group: hours the rollup
// has closed from usage_hourly, later hours from raw samples (exact up to
// the last sample), merged. Grouping by host or workload reads raw
// samples for the whole range, since rollups sum over them. Buckets are
// the step's in the request's zone.
func (s *Service) Usage(ctx context.Context, q server.UsageRequest) (server.UsageResult, error) {
	if err := q.Scope.Validate(); err != nil {
		return server.UsageResult{}, fmt.Errorf("usage: %w", err)
	}
	state, err := s.rollupState(ctx)
	if err != nil {
		return server.UsageResult{}, err
	}
	through := state.ClosedThrough
	var dims []store.Dimension
	rawOnly := false
	for _, d := range q.GroupBy {
		dims = append(dims, store.Dimension(d))
		rawOnly = rawOnly || d == "host" || d == "workload"
	}
	bucket := store.BucketHour
	if q.Location == time.UTC || q.Location.String() == "UTC" {
		bucket = store.Bucket(q.Step) // the server's buckets are UTC's
	}
	if rawOnly {
		// Host and workload live in raw samples only: where retention
		// dropped them, an answer would be silently short.
		dropped, err := s.store.RawDroppedBefore(ctx)
		if err != nil {
			return server.UsageResult{}, err
		}
		if q.From.Before(dropped) {
			return server.UsageResult{}, fault.Validationf("group_by host or workload reads raw samples, and retention dropped those before %s",
				dropped.UTC().Format(time.RFC3339))
		}
	}
	rows, err := s.read(ctx, store.UsageQuery{From: q.From, To: q.To, GroupBy: dims, Bucket: bucket, Scope: q.Scope}, state, rawOnly)
	if err != nil {
		return server.UsageResult{}, inputError(err)
	}
	if len(rows) > 4*server.MaxUsagePoints {
		return server.UsageResult{}, tooManyPoints()
	}
	pts := points(rows, q)
	if len(pts) > server.MaxUsagePoints {
		return server.UsageResult{}, tooManyPoints()
	}
	return server.UsageResult{Points: pts, RolledUpThrough: through}, nil
}

// read runs q over [q.From, q.To): hourly rollups for the hours the
// rollup has closed (none when rawOnly), raw samples after them, both
// through the cache. q.Source is set here.
func (s *Service) read(ctx context.Context, q store.UsageQuery, state billing.RollupState, rawOnly bool) ([]store.UsageRow, error) {
	split := q.From
	if !rawOnly && state.ClosedThrough.After(q.From) {
		split = state.ClosedThrough
		if split.After(q.To) {
			split = q.To
		}
	}
	var rows []store.UsageRow
	for _, part := range []struct {
		from, to time.Time
		src      store.Source
	}{{q.From, split, store.SourceHourly}, {split, q.To, store.SourceRaw}} {
		if !part.to.After(part.from) {
			continue
		}
		pq := q
		pq.From, pq.To, pq.Source = part.from, part.to, part.src
		r, err := s.usage(ctx, pq, state.CompletedVersion)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

func tooManyPoints() error {
	return fault.Validationf("the answer would hold more than %d points: use a larger step, a shorter range or fewer group_by dimensions",
		server.MaxUsagePoints)
}

// inputError puts a store error the request caused (a time the server
// cannot hold) in the validation category: the store has no category of
// its own yet.
func inputError(err error) error {
	if errors.Is(err, store.ErrTimeOutOfRange) {
		return fault.Validation(err)
	}
	return err
}

type pointKey struct {
	bucket                                  int64
	tenant, department, sku, host, workload string
}

// points merges rows into the request's buckets (in its zone) and groups.
func points(rows []store.UsageRow, q server.UsageRequest) []server.UsagePoint {
	sums := map[pointKey]*struct {
		b       time.Time
		samples uint64
		m       meter.Totals
	}{}
	for _, r := range rows {
		b := bucketStart(r.Bucket, q.Step, q.Location)
		k := pointKey{b.Unix(), r.Tenant, r.Department, r.SKU, r.Host, r.Workload}
		acc, ok := sums[k]
		if !ok {
			acc = &struct {
				b       time.Time
				samples uint64
				m       meter.Totals
			}{b: b}
			sums[k] = acc
		}
		acc.samples += r.Samples
		acc.m = acc.m.Add(r.Totals)
	}
	keys := make([]pointKey, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.bucket != b.bucket {
			return a.bucket < b.bucket
		}
		if a.tenant != b.tenant {
			return a.tenant < b.tenant
		}
		if a.department != b.department {
			return a.department < b.department
		}
		if a.sku != b.sku {
			return a.sku < b.sku
		}
		if a.host != b.host {
			return a.host < b.host
		}
		return a.workload < b.workload
	})
	out := make([]server.UsagePoint, 0, len(keys))
	for _, k := range keys {
		acc := sums[k]
		p := server.UsagePoint{Bucket: acc.b, Tenant: k.tenant, Department: k.department, SKU: k.sku, Host: k.host,
			Workload: k.workload, Samples: acc.samples, Quantities: map[pricing.Meter]decimal.Decimal{}}
		for _, m := range q.Meters {
			p.Quantities[m] = acc.m.Quantity(m.Spec())
		}
		out = append(out, p)
	}
	return out
}

// bucketStart is the start, in loc, of the step holding t.
func bucketStart(t time.Time, step string, loc *time.Location) time.Time {
	l := t.In(loc)
	switch step {
	case "day":
		return time.Date(l.Year(), l.Month(), l.Day(), 0, 0, 0, 0, loc)
	case "month":
		return time.Date(l.Year(), l.Month(), 1, 0, 0, 0, 0, loc)
	}
	return l.Truncate(time.Hour)
}
