package usage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
)

// TenantHoursQuery is the usage of the tenants in [FirstTenant,
// LastTenant] (by byte order) in [From, To), per tenant, hour and SKU,
// from one source.
type TenantHoursQuery struct {
	From, To                time.Time
	FirstTenant, LastTenant string
	Source                  Source
}

// Validate reports every problem, each naming its field.
func (q TenantHoursQuery) Validate() error {
	errs := rangeErrors(q.From, q.To)
	if q.LastTenant < q.FirstTenant {
		errs = append(errs, fmt.Errorf("last_tenant %q: before first_tenant %q", clip(q.LastTenant, 64), clip(q.FirstTenant, 64)))
	}
	if q.Source != SourceRaw && q.Source != SourceHourly {
		errs = append(errs, fmt.Errorf("source: unknown %q (want raw or hourly)", q.Source))
	}
	return fault.Validation(errors.Join(errs...))
}

// TenantHoursReader streams a TenantHoursQuery tenant by tenant: each
// tenant's rows (Bucket, Tenant, SKU and the meters set), in hour and SKU
// order, go to each in tenant order once they are read; tenants without
// rows are not called, and rows is reused after each returns
// (internal/store meets it).
type TenantHoursReader interface {
	TenantHours(ctx context.Context, q TenantHoursQuery, each func(tenant string, rows []Row) error) error
}

// fleetBatchTenants is how many tenants one read of the fleet covers: the
// server groups one batch's rows at a time (a month of two SKUs: 720,000
// rows), and the service holds one batch's raw samples of the open hours.
const fleetBatchTenants = 500

// fleetTenant is a customer FleetCharges prices: its months from first.
type fleetTenant struct {
	c              billing.Customer
	loc            *time.Location
	first          billing.Period
	book           *pricing.Book
	contract       *pricing.Contract
	hourly, unread bool
}

// FleetCharges are Charges for every configured customer named in from
// (the time its charges count from), up to to (or now, if earlier), read
// for the whole fleet at once: the rollups of all of them in a few reads
// (a batch of tenants each, streamed tenant by tenant), the raw samples of
// the hours not yet rolled up in one read per batch. Each customer's
// charges go to each with the hour they run to, or
// with the error that kept them from being priced; an error of each, or
// of a read, ends the run. each is called from several goroutines at
// once (one per CPU), in no particular order, and charges is reused
// after each returns. The charges equal Charges'
// to the last digit: the same rows, split at the same hour, priced month
// by month alike.
func (s *Service) FleetCharges(ctx context.Context, from map[string]time.Time, to time.Time,
	each func(tenant string, charges []credits.Charge, asOf time.Time, err error) error) error {
	reader, ok := s.store.(TenantHoursReader)
	if !ok {
		return fault.Internal(errors.New("fleet charges: the store cannot read usage tenant by tenant"))
	}
	asOf := s.now().UTC().Truncate(time.Hour)
	if to.Before(asOf) {
		asOf = to.UTC().Truncate(time.Hour)
	}
	var fleet []*fleetTenant
	seen := map[string]bool{}
	for _, c := range s.customers.Customers {
		start, ok := from[c.Tenant]
		if !ok || seen[c.Tenant] {
			continue
		}
		seen[c.Tenant] = true
		ft, err := s.fleetTenant(c, start, asOf)
		if err != nil || ft == nil {
			if err := each(c.Tenant, nil, asOf, err); err != nil {
				return err
			}
			continue
		}
		fleet = append(fleet, ft)
	}
	slices.SortFunc(fleet, func(a, b *fleetTenant) int { return cmp.Compare(a.c.Tenant, b.c.Tenant) })
	state, err := s.RollupState(ctx)
	if err != nil {
		return err
	}
	return s.priceFleet(ctx, reader, fleet, state.ClosedThrough, asOf, each)
}

// fleetTenant is c's months from the one holding start up to asOf with
// its book and contract; nil when none has begun.
func (s *Service) fleetTenant(c billing.Customer, start, asOf time.Time) (*fleetTenant, error) {
	loc, err := c.Location()
	if err != nil {
		return nil, err
	}
	first, err := billing.MonthlyPeriod(start.In(loc).Format("2006-01"), loc)
	if err != nil || !first.Start.Before(asOf) {
		return nil, err
	}
	book, contract, err := s.pricing.Pricing(c)
	if err != nil {
		return nil, fault.Internal(err)
	}
	return &fleetTenant{c: c, loc: loc, first: first, book: book, contract: contract}, nil
}

// fleetJob is one tenant of a batch to price, with its rollup rows.
type fleetJob struct {
	ft     *fleetTenant
	hourly *rowBuffer
	raw    []hourRow // its raw rows of the open hours, the batch's own
}

// fleetQueue is how many tenants read and waiting for a pricing worker
// may be held: the reader runs this far ahead of the workers, so that the
// next batch's reads (the server starting its merge, the raw samples)
// overlap the pricing of the last tenants of a batch instead of leaving
// the workers idle (a month of two SKUs: about 0.2 MB of rows a tenant).
const fleetQueue = 64

// hourRow is what pricing reads of a Row: a copy of a whole Row (its
// tenant, department, host and workload strings, the unmeasured times)
// was most of the cost of holding a tenant's rows for a worker.
type hourRow struct {
	bucket time.Time
	sku    string
	values meter.Values
}

// appendHourRows appends rows' hour, SKU and values to out.
func appendHourRows(out []hourRow, rows []Row) []hourRow {
	for i := range rows {
		out = append(out, hourRow{bucket: rows[i].Bucket, sku: rows[i].SKU, values: rows[i].Values})
	}
	return out
}

// rowBuffer holds a tenant's rollup rows from the stream to its pricing,
// reused from tenant to tenant (a month of two SKUs is 1,440 rows).
type rowBuffer struct{ rows []hourRow }

var rowBuffers = sync.Pool{New: func() any { return new(rowBuffer) }}

// holdRows is a pooled copy of rows (nil for none).
func holdRows(rows []Row) *rowBuffer {
	if len(rows) == 0 {
		return nil
	}
	b := rowBuffers.Get().(*rowBuffer)
	b.rows = appendHourRows(b.rows[:0], rows)
	return b
}

// all is b's rows (none for nil).
func (b *rowBuffer) all() []hourRow {
	if b == nil {
		return nil
	}
	return b.rows
}

// release hands b back to the pool once its rows are used.
func (b *rowBuffer) release() {
	if b != nil {
		b.rows = b.rows[:0]
		rowBuffers.Put(b)
	}
}

// priceFleet prices the fleet (sorted by tenant) batch by batch with
// one pricing worker per CPU for the whole run: the reads of a batch (its
// raw samples after closed, held, a few hours each, then its rollups
// before closed, streamed) go on while the workers price the tenants
// read before them, of this batch or the last. Each tenant goes to the
// workers as its rollup rows end, and those without any after the
// stream. At most fleetQueue tenants waiting and one per worker are held
// besides a batch's raw rows.
func (s *Service) priceFleet(ctx context.Context, reader TenantHoursReader, fleet []*fleetTenant, closed, asOf time.Time,
	each func(tenant string, charges []credits.Charge, asOf time.Time, err error) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		failOnce sync.Once
		failed   error
	)
	fail := func(err error) {
		failOnce.Do(func() { failed = err; cancel() })
	}
	jobs := make(chan fleetJob, fleetQueue)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var (
				scratch []pricing.Usage
				held    []credits.Charge // the last tenant's charges, each done with them
			)
			var memo usageMemo
			for j := range jobs {
				if ctx.Err() != nil {
					j.hourly.release()
					continue // failed: drain
				}
				scratch = memo.fleetUsage(scratch[:0], j.ft.first.Start, j.hourly.all(), j.raw)
				j.hourly.release()
				charges, err := j.ft.charges(held, scratch, asOf)
				if err := each(j.ft.c.Tenant, charges, asOf, err); err != nil {
					fail(err)
				}
				if charges != nil {
					held = charges
				}
			}
		}()
	}
	var err error
	for len(fleet) > 0 && err == nil {
		n := min(fleetBatchTenants, len(fleet))
		err = s.readBatch(ctx, reader, fleet[:n], closed, asOf, jobs)
		fleet = fleet[n:]
	}
	close(jobs)
	wg.Wait()
	if failed != nil {
		return failed
	}
	return err
}

// readBatch reads one batch of tenants (sorted by tenant) and sends each
// to jobs: its raw samples after closed first (held), then its rollups
// before closed, streamed.
func (s *Service) readBatch(ctx context.Context, reader TenantHoursReader, batch []*fleetTenant, closed, asOf time.Time,
	jobs chan<- fleetJob) error {
	from := batch[0].first.Start
	index := make(map[string]*fleetTenant, len(batch))
	for _, ft := range batch {
		from = minTime(from, ft.first.Start)
		ft.unread = true
		index[ft.c.Tenant] = ft
	}
	first, last := batch[0].c.Tenant, batch[len(batch)-1].c.Tenant
	raw := map[string][]hourRow{}
	if rawFrom := maxTime(from, closed); asOf.After(rawFrom) {
		q := TenantHoursQuery{From: rawFrom, To: asOf, FirstTenant: first, LastTenant: last, Source: SourceRaw}
		err := reader.TenantHours(ctx, q, func(tenant string, rows []Row) error {
			if index[tenant] != nil {
				raw[tenant] = appendHourRows(nil, rows)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	send := func(ft *fleetTenant, hourly []Row) error {
		ft.unread = false
		held := holdRows(hourly) // the reader reuses hourly
		select {
		case jobs <- fleetJob{ft: ft, hourly: held, raw: raw[ft.c.Tenant]}:
			return nil
		case <-ctx.Done():
			held.release()
			return ctx.Err()
		}
	}
	return s.streamBatch(ctx, reader, batch, index, from, minTime(closed, asOf), send)
}

// streamBatch sends each tenant of the batch with its rollup rows in
// [from, to), in tenant order, then those without any; send copies the
// rows it keeps.
func (s *Service) streamBatch(ctx context.Context, reader TenantHoursReader, batch []*fleetTenant, index map[string]*fleetTenant,
	from, to time.Time, send func(*fleetTenant, []Row) error) error {
	next := 0 // batch[:next] are sent or have rollup rows coming
	if to.After(from) {
		q := TenantHoursQuery{From: from, To: to, FirstTenant: batch[0].c.Tenant, LastTenant: batch[len(batch)-1].c.Tenant, Source: SourceHourly}
		err := reader.TenantHours(ctx, q, func(tenant string, rows []Row) error {
			ft := index[tenant]
			if ft == nil {
				return nil // usage of a tenant that is no customer in the range
			}
			// Tenants before this one have no rollup rows: send them first.
			for ; next < len(batch) && batch[next].c.Tenant < tenant; next++ {
				if batch[next].unread {
					if err := send(batch[next], nil); err != nil {
						return err
					}
				}
			}
			return send(ft, rows)
		})
		if err != nil {
			return err
		}
	}
	for _, ft := range batch {
		if ft.unread {
			if err := send(ft, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// usageMemo is pricing.UsageOf's meters by SKU and values, without the
// hour: a fleet's hours repeat the same few (a GPU held all hour), and
// UsageOf's decimal division is the same for each. A worker's own; it
// is emptied when it grows past usageMemoSize. The last few found are
// looked at before the map: an hour's rows take turns between a tenant's
// few SKUs, and hashing each row's key cost more than comparing it.
type usageMemo struct {
	byKey  map[usageKey][]pricing.Usage
	recent [usageMemoRecent]usageMemoEntry
	next   int // recent[next] is replaced next
}

type usageKey struct {
	sku    string
	values meter.Values
}

type usageMemoEntry struct {
	key    usageKey
	meters []pricing.Usage // nil: none yet
}

const (
	usageMemoSize   = 1 << 14
	usageMemoRecent = 4
)

// meters is pricing.UsageOf(_, k.sku, k.values), remembered.
func (m *usageMemo) meters(k usageKey) []pricing.Usage {
	for i := range m.recent {
		if e := &m.recent[i]; e.meters != nil && e.key == k {
			return e.meters
		}
	}
	meters, ok := m.byKey[k]
	if !ok {
		if m.byKey == nil || len(m.byKey) >= usageMemoSize {
			m.byKey = map[usageKey][]pricing.Usage{}
		}
		meters = pricing.UsageOf(time.Time{}, k.sku, k.values)
		if meters == nil {
			meters = []pricing.Usage{} // remembered as none
		}
		m.byKey[k] = meters
	}
	m.recent[m.next] = usageMemoEntry{key: k, meters: meters}
	m.next = (m.next + 1) % usageMemoRecent
	return meters
}

// fleetUsage appends the hourly rows from start on, then the raw ones, as
// the engine's usage (both in hour and SKU order, raw hours after the
// rollups'), to out: pricing.UsageOf of each row.
func (m *usageMemo) fleetUsage(out []pricing.Usage, start time.Time, hourly, raw []hourRow) []pricing.Usage {
	for _, rows := range [][]hourRow{hourly, raw} {
		for i := range rows {
			r := &rows[i]
			if r.bucket.Before(start) {
				continue
			}
			for _, u := range m.meters(usageKey{r.sku, r.values}) {
				u.Hour = r.bucket
				out = append(out, u)
			}
		}
	}
	return out
}

// charges prices each month of ft from its first up to asOf from usage
// (in hour order), as its invoice prices it, and spreads each into hourly
// charges appended to out[:0] (a worker's, reused from tenant to tenant):
// Charges' loop over usage already read. No charges are nil, as Charges
// gives them.
func (ft *fleetTenant) charges(out []credits.Charge, usage []pricing.Usage, asOf time.Time) ([]credits.Charge, error) {
	out = out[:0]
	for p := ft.first; p.Start.Before(asOf); {
		end := minTime(p.End, asOf)
		// The month's rows: usage is in hour order. Capped, so that
		// nothing the engine appends can reach the next month's.
		i := 0
		for i < len(usage) && usage[i].Hour.Before(end) {
			i++
		}
		rows := usage[:i:i]
		usage = usage[i:]
		if len(rows) == 0 {
			rows = nil // as Charges reads an empty month
		}
		priced, err := pricing.Price(pricing.Input{Tenant: ft.c.Tenant, Start: p.Start.In(ft.loc), End: end.In(ft.loc), Usage: rows,
			Book: ft.book, Contract: ft.contract})
		if err != nil {
			return nil, fault.Internal(err)
		}
		out = credits.AppendChargesOf(out, priced, rows, ft.c.TaxRate)
		if p, err = billing.MonthlyPeriod(p.End.In(ft.loc).Format("2006-01"), ft.loc); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
