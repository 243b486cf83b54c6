// Package usage answers what was used: usage series over rollups and raw
// samples (Usage), a tenant's month to date and forecast priced as its
// invoice will price it (Cost), and the customers a scope may see
// (Tenants), each in the caller's scope, which the store applies in SQL.
package usage

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/pricing"
)

// Service answers usage, cost and tenants over a Store.
type Service struct {
	store     Store
	customers billing.Customers
	now       func() time.Time
	cache     cache
	// pricing holds the customers' books parsed, re-read when a file
	// changes: requests never parse YAML.
	pricing *billing.PricingCache
}

// New serves the store's usage for the configured customers; now is the
// clock of month-to-date figures.
func New(st Store, customers billing.Customers, now func() time.Time) *Service {
	return &Service{store: st, customers: customers, now: now, pricing: billing.NewPricingCache()}
}

// Limits of one request: its range, and the points of its answer
// (buckets times groups).
const (
	MaxRange = 400 * 24 * time.Hour
	// MaxPoints bounds an answer; more is a validation error asking to
	// narrow it.
	MaxPoints = 50_000
)

// Request is a usage series: Meters summed over [From, To) by Step (in
// Location) and the GroupBy dimensions, in the caller's Scope.
type Request struct {
	Scope    auth.Scope
	From, To time.Time
	Step     string // hour, day or month
	GroupBy  []Dimension
	Meters   []pricing.Meter
	Location *time.Location
}

// Validate reports every problem, each naming its field.
func (r Request) Validate() error {
	var errs []error
	switch {
	case r.From.IsZero() || r.To.IsZero():
		errs = append(errs, errors.New("from/to: both required"))
	case !r.To.After(r.From):
		errs = append(errs, errors.New("to: must be after from"))
	case r.To.Sub(r.From) > MaxRange:
		errs = append(errs, fmt.Errorf("from..to spans %s; at most %d days per request", r.To.Sub(r.From).Round(time.Hour), int(MaxRange.Hours()/24)))
	}
	if !r.From.IsZero() && !r.To.IsZero() && (r.From.Year() < 1971 || r.To.Year() > 2105) {
		errs = append(errs, errors.New("from/to: outside 1971..2105"))
	}
	if r.From.Truncate(time.Hour) != r.From || r.To.Truncate(time.Hour) != r.To {
		errs = append(errs, errors.New("from/to: must be whole hours (usage is kept per hour)"))
	}
	if r.Location == nil {
		errs = append(errs, errors.New("tz: required"))
	} else if len(errs) == 0 {
		// Within a bounded range only: the check walks its zone periods.
		if at, off, ok := wholeHourOffsets(r.From, r.To, r.Location); !ok {
			errs = append(errs, fmt.Errorf("tz %s: offset %s at %s is not a whole hour; usage is kept per UTC hour",
				r.Location, time.Duration(off)*time.Second, at.In(r.Location).Format(time.RFC3339)))
		}
	}
	switch r.Step {
	case "hour", "day", "month":
	default:
		errs = append(errs, fmt.Errorf("step %q: want hour, day or month", clip(r.Step, 32)))
	}
	seen := map[Dimension]bool{}
	for _, d := range r.GroupBy {
		switch d {
		case DimTenant, DimDepartment, DimSKU, DimHost, DimWorkload:
		default:
			errs = append(errs, fmt.Errorf("group_by %q: want tenant, department, sku, host or workload", clip(string(d), 32)))
			continue
		}
		if seen[d] {
			errs = append(errs, fmt.Errorf("group_by: %q twice", d))
		}
		seen[d] = true
	}
	seenMeter := map[pricing.Meter]bool{}
	for _, m := range r.Meters {
		if seenMeter[m] {
			errs = append(errs, fmt.Errorf("meters: %q twice", m))
		}
		seenMeter[m] = true
	}
	return fault.Validation(errors.Join(errs...))
}

// wholeHourOffsets checks loc's UTC offset over every zone period that
// overlaps [from, to], not only at from: a zone may switch to a
// half-hour offset inside the range (Australia/Lord_Howe's daylight
// time is +10:30). It returns the first offending time and offset.
func wholeHourOffsets(from, to time.Time, loc *time.Location) (time.Time, int, bool) {
	for t := from; !t.After(to); {
		_, off := t.In(loc).Zone()
		if off%3600 != 0 {
			return t, off, false
		}
		_, end := t.In(loc).ZoneBounds()
		if end.IsZero() || !end.After(t) {
			break // the zone lasts forever
		}
		t = end
	}
	return time.Time{}, 0, true
}

// clip cuts s to n bytes, for echoing input in a message.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Point is one bucket of one group.
type Point struct {
	Bucket     time.Time
	Tenant     string
	Department string
	SKU        string
	Host       string
	Workload   string
	Samples    uint64
	Quantities map[pricing.Meter]decimal.Decimal
}

// Result is a usage series: points sorted by bucket, then group.
// RolledUpThrough says up to when hourly rollups served it; later hours
// came from raw samples.
type Result struct {
	Points          []Point
	RolledUpThrough time.Time
}

// Usage sums the request's meters per bucket and group: hours the rollup
// has closed from usage_hourly, later hours from raw samples (exact up to
// the last sample), merged. Grouping by host or workload reads raw
// samples for the whole range, since rollups sum over them. Buckets are
// the step's in the request's zone.
func (s *Service) Usage(ctx context.Context, q Request) (Result, error) {
	if err := q.Scope.Validate(); err != nil {
		return Result{}, fmt.Errorf("usage: %w", err)
	}
	if err := q.Validate(); err != nil {
		return Result{}, err
	}
	state, err := s.RollupState(ctx)
	if err != nil {
		return Result{}, err
	}
	through := state.ClosedThrough
	rawOnly := false
	for _, d := range q.GroupBy {
		rawOnly = rawOnly || d == DimHost || d == DimWorkload
	}
	bucket := BucketHour
	if q.Location == time.UTC || q.Location.String() == "UTC" {
		bucket = Bucket(q.Step) // the store's buckets are UTC's
	}
	if rawOnly {
		// Host and workload live in raw samples only: where retention
		// dropped them, an answer would be silently short.
		dropped, err := s.store.RawDroppedBefore(ctx)
		if err != nil {
			return Result{}, err
		}
		if q.From.Before(dropped) {
			return Result{}, fault.Validationf("group_by host or workload reads raw samples, and retention dropped those before %s",
				dropped.UTC().Format(time.RFC3339))
		}
	}
	rows, err := s.read(ctx, Query{From: q.From, To: q.To, GroupBy: q.GroupBy, Bucket: bucket, Scope: q.Scope}, state, rawOnly)
	if err != nil {
		return Result{}, err
	}
	if len(rows) > 4*MaxPoints {
		return Result{}, tooManyPoints()
	}
	pts := points(rows, q)
	if len(pts) > MaxPoints {
		return Result{}, tooManyPoints()
	}
	return Result{Points: pts, RolledUpThrough: through}, nil
}

// Rows runs q over [q.From, q.To) as of the rollup's state: hourly
// rollups for the hours it has closed, raw samples after them, both
// through the cache (q.Source is set here). The quota snapshot reads
// month-to-date usage through it.
func (s *Service) Rows(ctx context.Context, q Query, state rollup.State) ([]Row, error) {
	return s.read(ctx, q, state, false)
}

// read is Rows, from raw samples only when rawOnly.
func (s *Service) read(ctx context.Context, q Query, state rollup.State, rawOnly bool) ([]Row, error) {
	split := q.From
	if !rawOnly && state.ClosedThrough.After(q.From) {
		split = state.ClosedThrough
		if split.After(q.To) {
			split = q.To
		}
	}
	var rows []Row
	for _, part := range []struct {
		from, to time.Time
		src      Source
	}{{q.From, split, SourceHourly}, {split, q.To, SourceRaw}} {
		if !part.to.After(part.from) {
			continue
		}
		pq := q
		pq.From, pq.To, pq.Source = part.from, part.to, part.src
		r, err := s.rows(ctx, pq, state.CompletedVersion)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

func tooManyPoints() error {
	return fault.Validationf("the answer would hold more than %d points: use a larger step, a shorter range or fewer group_by dimensions",
		MaxPoints)
}

type pointKey struct {
	bucket                                  int64
	tenant, department, sku, host, workload string
}

// points merges rows into the request's buckets (in its zone) and groups.
func points(rows []Row, q Request) []Point {
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
	out := make([]Point, 0, len(keys))
	for _, k := range keys {
		acc := sums[k]
		p := Point{Bucket: acc.b, Tenant: k.tenant, Department: k.department, SKU: k.sku, Host: k.host,
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
