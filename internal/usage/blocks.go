package usage

import (
	"context"
	"sort"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// Tenant-month blocks. A query of one tenant's closed hours (a tenant
// key's, or one filtered to a tenant) is answered from that tenant's
// hourly rollup rows of each UTC month it touches, read once per rollup
// version and summed here: any range, bucket and grouping of the tenant
// (the portal's month to date by day, /v1/cost and its forecast) costs
// one ClickHouse read per month and rollup run, not one per distinct
// query. A ClickHouse 18.16 query of this shape costs about 4 ms of server
// CPU whether it reads 30 rows or 3,000 (docs/performance.md), so a
// smaller table (a daily rollup) alone would not reach the goal on a small
// server. Each block also keeps its days' sums, the daily rollup in
// memory: whole days in a range add one row per day and group.
//
// A block holds the table's own rows (one per hour, department and SKU,
// deduplicated with FINAL, tombstones left out), read by the store's usage
// query itself, and the sums below are the SQL's: sum per meter, max for
// a peak (meter.Totals.Add), sum of samples, wrapping on overflow like
// UInt64. TestBlocksEqualTheStore (internal/store) compares the two.
// Reads of several tenants (admin and department keys without a tenant,
// the quota snapshot) go to the store as before.

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
// version, kept compact (about 130 bytes a row): the department and SKU
// once per block, the rows in hour order, and per UTC day the day's sums
// per group, so that a query of whole days adds a day's rows once, not
// each of its hours. done is closed when the rest is set; nothing is
// changed afterwards.
type block struct {
	version uint64
	done    chan struct{}
	tenant  string
	groups  []blockGroup
	rows    []blockRow
	days    []blockDay
	err     error
}

type blockGroup struct{ department, sku string }

type blockRow struct {
	hour    int64 // Unix seconds; a day's sums: the day's first
	group   int32 // index into the block's groups
	samples uint64
	totals  meter.Totals
}

// blockDay is one UTC day of a block: rows[from:to] are its hours, sums
// their totals per group (meter.Totals.Add: sums, and maxima for peaks).
type blockDay struct {
	start    int64
	from, to int
	sums     []blockRow
}

const daySeconds = 24 * 60 * 60

// newBlock keeps the store's rows of one tenant compactly, with the sums
// of each day.
func newBlock(version uint64, tenant string, rows []Row) *block {
	b := &block{version: version, tenant: tenant, rows: make([]blockRow, len(rows))}
	index := map[blockGroup]int32{}
	for i, r := range rows {
		g := blockGroup{r.Department, r.SKU}
		n, ok := index[g]
		if !ok {
			n = int32(len(b.groups))
			index[g] = n
			b.groups = append(b.groups, g)
		}
		b.rows[i] = blockRow{hour: r.Bucket.Unix(), group: n, samples: r.Samples, totals: r.Totals}
	}
	sort.SliceStable(b.rows, func(i, j int) bool { return b.rows[i].hour < b.rows[j].hour })
	for i := 0; i < len(b.rows); {
		day := blockDay{start: b.rows[i].hour - b.rows[i].hour%daySeconds, from: i}
		at := map[int32]int{} // group → index in day.sums
		for ; i < len(b.rows) && b.rows[i].hour < day.start+daySeconds; i++ {
			r := b.rows[i]
			k, ok := at[r.group]
			if !ok {
				k = len(day.sums)
				at[r.group] = k
				day.sums = append(day.sums, blockRow{hour: day.start, group: r.group})
			}
			day.sums[k].samples += r.samples
			day.sums[k].totals = day.sums[k].totals.Add(r.totals)
		}
		day.to = i
		b.days = append(b.days, day)
	}
	return b
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
	var blocks []*block
	for m := monthStart(q.From); m.Before(q.To); m = m.AddDate(0, 1, 0) {
		b, err := s.block(ctx, blockKey{tenant: tenant, month: m.Unix()}, version)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, b)
	}
	return sumBlocks(q, blocks), nil
}

// block returns one month of the tenant's rows at version, reading it
// once: concurrent callers wait for the first one's read, and read again
// themselves when it failed.
func (s *Service) block(ctx context.Context, k blockKey, version uint64) (*block, error) {
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
				return b, nil
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
		loading := &block{version: version, done: make(chan struct{})}
		c.blocks[k] = loading
		c.mu.Unlock()
		from := time.Unix(k.month, 0).UTC()
		rows, err := s.store.Usage(ctx, Query{From: from, To: from.AddDate(0, 1, 0), Tenant: k.tenant, Source: SourceHourly,
			GroupBy: []Dimension{DimTenant, DimDepartment, DimSKU}, Bucket: BucketHour})
		c.mu.Lock()
		if err == nil {
			read := newBlock(version, k.tenant, rows)
			loading.tenant, loading.groups, loading.rows, loading.days = read.tenant, read.groups, read.rows, read.days
		}
		loading.err = err
		switch {
		case c.blocks[k] != loading: // replaced by a newer version meanwhile
		case err != nil:
			delete(c.blocks, k)
		default:
			if c.blockHeld+len(loading.rows) > maxCacheRows {
				c.evictBlocks(version)
			}
			c.blockHeld += len(loading.rows)
		}
		close(loading.done)
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return loading, nil
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
func sumBlocks(q Query, blocks []*block) []Row {
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
	from, to := q.From.Unix(), q.To.Unix()
	for _, b := range blocks {
		if q.Tenant != "" && b.tenant != q.Tenant {
			continue
		}
		// Whether each group passes the filters and the scope.
		keep := make([]bool, len(b.groups))
		for i, g := range b.groups {
			keep[i] = (q.Department == "" || g.department == q.Department) && scope.Allows(b.tenant, g.department)
		}
		for _, d := range b.days {
			if d.start+daySeconds <= from || d.start >= to {
				continue
			}
			// A whole day in range adds its sums, unless hours are asked.
			rows := b.rows[d.from:d.to]
			if q.Bucket != BucketHour && d.start >= from && d.start+daySeconds <= to {
				rows = d.sums
			}
			sumRows(q, b, rows, keep, has, from, to, sums)
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

// sumRows adds the rows of block b in [from, to) whose group keep allows
// into sums, by q's bucket and the dimensions has.
func sumRows(q Query, b *block, rows []blockRow, keep []bool, has map[Dimension]bool, from, to int64, sums map[groupKey]*Row) {
	for i := range rows {
		r := &rows[i]
		if r.hour < from || r.hour >= to || !keep[r.group] {
			continue
		}
		g := b.groups[r.group]
		var k groupKey
		switch q.Bucket {
		case BucketHour:
			k.bucket = r.hour
		case BucketDay:
			k.bucket = r.hour - r.hour%daySeconds // Unix days are UTC days
		case BucketMonth:
			k.bucket = monthStart(time.Unix(r.hour, 0)).Unix()
		}
		if has[DimTenant] {
			k.tenant = b.tenant
		}
		if has[DimDepartment] {
			k.department = g.department
		}
		if has[DimSKU] {
			k.sku = g.sku
		}
		acc, ok := sums[k]
		if !ok {
			acc = &Row{Tenant: k.tenant, Department: k.department, SKU: k.sku}
			if q.Bucket != BucketNone {
				acc.Bucket = time.Unix(k.bucket, 0).UTC()
			}
			sums[k] = acc
		}
		acc.Samples += r.samples
		acc.Totals = acc.Totals.Add(r.totals)
	}
}
