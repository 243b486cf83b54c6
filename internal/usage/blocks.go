package usage

import (
	"context"
	"sort"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
)

// Tenant-month blocks. A query of one tenant's closed hours is answered
// from that tenant's hourly rollup rows of each UTC month it touches, read
// once per rollup version and summed here, so any range, bucket and
// grouping of the tenant (the portal's month to date by day, its cost and
// forecast, the quota snapshot's month) costs one ClickHouse read per
// month and rollup run, not one per distinct query. A ClickHouse 18.16
// query of this shape costs about 4 ms of server CPU whether it reads 30
// rows or 3,000 (docs/performance.md), so a smaller table alone would not
// reach the goal on a small server.
//
// A block holds the table's own rows (one per hour, department and SKU,
// deduplicated with FINAL, tombstones left out), read by the store's usage
// query itself, and the sums below are the SQL's: sum per meter, max for
// a peak (meter.Totals.Add), sum of samples, wrapping on overflow like
// UInt64. TestBlocksEqualTheStore (internal/store) compares the two.

// blockMaxMonths bounds the months a block-served query may touch; wider
// reads go to the store directly.
const blockMaxMonths = 15

// blockLimit: months ending after it go to the store, which checks the
// server's time range and names its limit.
var blockLimit = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

type blockKey struct {
	tenant string
	month  int64 // Unix seconds of the month's first instant, UTC
}

// block is one tenant's hourly rollup rows of one month at a rollup
// version. done is closed when rows or err are set; rows are never
// changed afterwards.
type block struct {
	version uint64
	done    chan struct{}
	rows    []Row
	err     error
}

// blockTenant is the one tenant q reads, when it is answerable from
// blocks: valid, a tenant filter or tenant key, a bounded range.
func blockTenant(q Query) (string, bool) {
	if q.Source != SourceHourly || q.Validate() != nil {
		return "", false
	}
	tenant := q.Tenant
	if tenant == "" {
		tenant = q.Scope.Tenant()
	}
	if tenant == "" {
		return "", false
	}
	months := 0
	for m := monthStart(q.From); m.Before(q.To); m = m.AddDate(0, 1, 0) {
		if months++; months > blockMaxMonths || m.AddDate(0, 1, 0).After(blockLimit) {
			return "", false
		}
	}
	return tenant, true
}

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// blockRows answers q (blockTenant said yes) from tenant's month blocks at
// the rollup's completed version.
func (s *Service) blockRows(ctx context.Context, q Query, tenant string, version uint64) ([]Row, error) {
	var blocks [][]Row
	for m := monthStart(q.From); m.Before(q.To); m = m.AddDate(0, 1, 0) {
		rows, err := s.block(ctx, blockKey{tenant: tenant, month: m.Unix()}, version)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, rows)
	}
	return sumBlocks(q, blocks), nil
}

// block returns one month of the tenant's rows at version, reading it
// once: concurrent callers wait for the first one's read, and read again
// themselves when it failed.
func (s *Service) block(ctx context.Context, k blockKey, version uint64) ([]Row, error) {
	c := &s.cache
	for {
		c.mu.Lock()
		b, ok := c.blocks[k]
		if ok && b.version == version {
			c.mu.Unlock()
			select {
			case <-b.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if b.err == nil {
				return b.rows, nil
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue // that read failed and was dropped: read again
		}
		if c.blocks == nil {
			c.blocks = map[blockKey]*block{}
		}
		if ok && isDone(b.done) {
			c.blockHeld -= len(b.rows)
		}
		b = &block{version: version, done: make(chan struct{})}
		c.blocks[k] = b
		c.mu.Unlock()
		from := time.Unix(k.month, 0).UTC()
		rows, err := s.store.Usage(ctx, Query{From: from, To: from.AddDate(0, 1, 0), Tenant: k.tenant, Source: SourceHourly,
			GroupBy: []Dimension{DimTenant, DimDepartment, DimSKU}, Bucket: BucketHour})
		c.mu.Lock()
		b.rows, b.err = rows, err
		switch {
		case c.blocks[k] != b: // replaced by a newer version meanwhile
		case err != nil:
			delete(c.blocks, k)
		default:
			if c.blockHeld+len(rows) > maxCacheRows {
				c.evictBlocks(version)
			}
			c.blockHeld += len(rows)
		}
		close(b.done)
		c.mu.Unlock()
		return rows, err
	}
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// evictBlocks drops finished blocks of other versions, and every finished
// block when that frees too little. Blocks being read stay: their readers
// count them in when they finish.
func (c *cache) evictBlocks(version uint64) {
	for _, all := range []bool{false, true} {
		for k, b := range c.blocks {
			if isDone(b.done) && (all || b.version != version) {
				c.blockHeld -= len(b.rows)
				delete(c.blocks, k)
			}
		}
		if c.blockHeld <= maxCacheRows/2 {
			return
		}
	}
}

// groupKey is a row's group: its bucket and the dimensions asked for.
type groupKey struct {
	bucket                  int64
	tenant, department, sku string
}

// sumBlocks sums the blocks' rows in [q.From, q.To) that q's filters and
// scope keep, per q's bucket and grouping, as the store's usage query
// does: rows ordered by bucket, tenant, department, SKU; with neither a
// bucket nor a grouping, one row even when nothing matched.
func sumBlocks(q Query, blocks [][]Row) []Row {
	has := map[Dimension]bool{}
	for _, d := range q.GroupBy {
		has[d] = true
	}
	grouped := q.Bucket != BucketNone || len(q.GroupBy) > 0
	sums := map[groupKey]*Row{}
	scope := q.Scope
	if scope.Kind == "" {
		scope.Kind = auth.KindAdmin // no scope: the operator's, everything
	}
	for _, rows := range blocks {
		for i := range rows {
			r := &rows[i]
			if r.Bucket.Before(q.From) || !r.Bucket.Before(q.To) ||
				(q.Tenant != "" && r.Tenant != q.Tenant) || (q.Department != "" && r.Department != q.Department) ||
				!scope.Allows(r.Tenant, r.Department) {
				continue
			}
			var k groupKey
			var bucket time.Time
			switch q.Bucket {
			case BucketHour:
				bucket = r.Bucket
			case BucketDay:
				bucket = r.Bucket.Truncate(24 * time.Hour) // Unix days are UTC days
			case BucketMonth:
				bucket = monthStart(r.Bucket)
			}
			if q.Bucket != BucketNone {
				k.bucket = bucket.Unix()
			}
			if has[DimTenant] {
				k.tenant = r.Tenant
			}
			if has[DimDepartment] {
				k.department = r.Department
			}
			if has[DimSKU] {
				k.sku = r.SKU
			}
			acc, ok := sums[k]
			if !ok {
				acc = &Row{Tenant: k.tenant, Department: k.department, SKU: k.sku}
				if q.Bucket != BucketNone {
					acc.Bucket = bucket
				}
				sums[k] = acc
			}
			acc.Samples += r.Samples
			acc.Totals = acc.Totals.Add(r.Totals)
		}
	}
	if !grouped && len(sums) == 0 {
		return []Row{{}}
	}
	keys := make([]groupKey, 0, len(sums))
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
		return a.sku < b.sku
	})
	out := make([]Row, len(keys))
	for i, k := range keys {
		out[i] = *sums[k]
	}
	return out
}
