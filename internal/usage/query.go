package usage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/rollup"
)

// Store is what the service reads (internal/store meets it).
type Store interface {
	// Usage sums every meter of q's rows (deduplicated) per group.
	Usage(ctx context.Context, q Query) ([]Row, error)
	// LoadRollupState is the hourly rollup's progress (rollup.StateKey).
	LoadRollupState(ctx context.Context, job string) (rollup.State, bool, error)
	// RawDroppedBefore is where retention dropped raw samples (zero: none).
	RawDroppedBefore(ctx context.Context) (time.Time, error)
}

// Dimension is a column usage can be grouped by.
type Dimension string

const (
	DimTenant     Dimension = "tenant"
	DimDepartment Dimension = "department"
	DimSKU        Dimension = "sku"
	// DimHost and DimWorkload exist in raw samples only; the hourly
	// rollup sums over them.
	DimHost     Dimension = "host"
	DimWorkload Dimension = "workload"
)

// Bucket is the time bucket of a query (UTC).
type Bucket string

const (
	BucketNone  Bucket = ""
	BucketHour  Bucket = "hour"
	BucketDay   Bucket = "day"
	BucketMonth Bucket = "month"
)

// Source picks the table a query reads.
type Source string

const (
	// SourceRaw reads raw samples: exact up to the last sample.
	SourceRaw Source = "raw"
	// SourceHourly reads the hourly rollup: fast, and exact up to the last
	// rollup run.
	SourceHourly Source = "hourly"
)

// Query sums every meter over [From, To), grouped by the chosen
// dimensions and time bucket. A sample belongs to the bucket of its start.
// Tenant and Department, when set, restrict the rows; Scope, when set,
// restricts them to what an API key may read, on top of any filter (the
// store applies it in SQL).
type Query struct {
	From, To   time.Time
	GroupBy    []Dimension
	Bucket     Bucket
	Tenant     string
	Department string
	Scope      auth.Scope
	Source     Source
}

// Row is one group of a Query. Grouping columns not asked for are empty;
// Bucket is zero without a bucket.
type Row struct {
	Bucket     time.Time
	Tenant     string
	Department string
	SKU        string
	Host       string
	Workload   string
	Samples    uint64
	meter.Totals
}

// Validate reports every problem with the query, each a validation
// error naming the field.
func (q Query) Validate() error {
	errs := rangeErrors(q.From, q.To)
	seen := map[Dimension]bool{}
	for _, d := range q.GroupBy {
		switch d {
		case DimTenant, DimDepartment, DimSKU:
		case DimHost, DimWorkload:
			if q.Source == SourceHourly {
				errs = append(errs, fmt.Errorf("group_by: %q is in raw samples only, not in hourly rollups", d))
			}
		default:
			errs = append(errs, fmt.Errorf("group_by: unknown dimension %q (want tenant, department, sku, host or workload)", d))
		}
		if seen[d] {
			errs = append(errs, fmt.Errorf("group_by: %q twice", d))
		}
		seen[d] = true
	}
	switch q.Bucket {
	case BucketNone, BucketHour, BucketDay, BucketMonth:
	default:
		errs = append(errs, fmt.Errorf("bucket: unknown %q (want hour, day or month)", q.Bucket))
	}
	switch q.Source {
	case SourceRaw, SourceHourly, "":
	default:
		errs = append(errs, fmt.Errorf("source: unknown %q (want raw or hourly)", q.Source))
	}
	if q.Scope.Kind != "" {
		if err := q.Scope.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return fault.Validation(errors.Join(errs...))
}

// Seen says whether tenant has any usage up to now, in the hourly rollups
// or the raw samples: a key made for a tenant never seen is likely a
// misspelt name.
func Seen(ctx context.Context, st Store, tenant string, now time.Time) (bool, error) {
	for _, src := range []Source{SourceHourly, SourceRaw} {
		rows, err := st.Usage(ctx, Query{From: collectors.MinTime, To: now.UTC(), Tenant: tenant, Source: src})
		if err != nil {
			return false, fmt.Errorf("usage of %s: %w", tenant, err)
		}
		for _, r := range rows {
			if r.Samples > 0 {
				return true, nil
			}
		}
	}
	return false, nil
}

// rangeErrors are the problems of a query's [from, to): both set, to
// after from, both storable.
func rangeErrors(from, to time.Time) []error {
	switch {
	case from.IsZero() || to.IsZero():
		return []error{errors.New("from/to: both required")}
	case !to.After(from):
		return []error{errors.New("to: must be after from")}
	case !collectors.InStorableRange(from) || !collectors.InStorableRange(to):
		return []error{errors.New("from/to: outside 1970-01-01 .. 2106-02-07")}
	}
	return nil
}
