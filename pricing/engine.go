package pricing

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// Usage is one hour of one meter of one SKU: Quantity in the meter's unit
// over [Hour, Hour+1h). Hour is the start of a UTC hour.
type Usage struct {
	Hour     time.Time       `json:"hour"`
	SKU      string          `json:"sku"`
	Meter    Meter           `json:"meter"`
	Quantity decimal.Decimal `json:"quantity"`
}

// Input is everything Price needs; it reads nothing else.
type Input struct {
	Tenant string
	// Start and End bound the period [Start, End). Calendar months (for
	// monthly fees and commitments) are taken in Start's location, the
	// tenant's billing time zone.
	Start, End time.Time
	// Usage holds the tenant's hourly rows; a row belongs to the period when
	// its Hour lies in [Start, End). Rows for one hour, SKU and meter add up.
	Usage    []Usage
	Contract *Contract // nil: on demand only
	Book     *Book
}

// Kind says what a line charges for.
type Kind string

const (
	KindOnDemand       Kind = "on_demand"          // usage at the book's price
	KindReserved       Kind = "reserved"           // usage covered by reservations; amount 0, paid by the fee
	KindBurst          Kind = "burst"              // gpu_hours above the reservation or burst threshold
	KindReservationFee Kind = "reservation_fee"    // take-or-pay charge for reserved capacity
	KindTrueUp         Kind = "commitment_true_up" // shortfall below the minimum commitment
)

// Line is one priced line. Amount is the line's exact amount quantized to
// StoragePlaces (Currency.Quantize): the line's amount, as invoices store
// it. AmountRounded is Amount rounded once to the currency's minor unit,
// so every later check of a stored line finds the same minor units:
// 1.2349999996 is 1.235000000 and so 1.24.
type Line struct {
	SKU         string `json:"sku,omitempty"`
	Meter       Meter  `json:"meter,omitempty"` // empty for a commitment true-up
	Kind        Kind   `json:"kind"`
	Description string `json:"description"`
	// From and To bound the part of the period the line prices: one price
	// version of the book, one reservation, or the whole period.
	From          time.Time        `json:"from"`
	To            time.Time        `json:"to"`
	Quantity      decimal.Decimal  `json:"quantity"`
	Unit          string           `json:"unit,omitempty"`       // the meter, or "months" for monthly fees and commitments
	UnitPrice     *decimal.Decimal `json:"unit_price,omitempty"` // nil when Tiers break the amount down
	Tiers         []TierCharge     `json:"tiers,omitempty"`
	Amount        decimal.Decimal  `json:"amount"`
	AmountRounded decimal.Decimal  `json:"amount_rounded"`
}

// MarshalJSON writes amounts with all their places ("41.50", not "41.5"),
// as they are stored.
func (l Line) MarshalJSON() ([]byte, error) {
	type plain Line
	return json.Marshal(struct {
		plain
		Amount        string `json:"amount"`
		AmountRounded string `json:"amount_rounded"`
	}{plain(l), fixed(l.Amount), fixed(l.AmountRounded)})
}

func fixed(d decimal.Decimal) string {
	return d.StringFixed(max(0, -d.Exponent()))
}

// ReservationUsage sums, for one SKU with reservations or a burst
// threshold, how its gpu_hours were split. Unused = Reserved - Covered.
type ReservationUsage struct {
	SKU              string          `json:"sku"`
	ReservedGPUHours decimal.Decimal `json:"reserved_gpu_hours"`
	CoveredGPUHours  decimal.Decimal `json:"covered_gpu_hours"`
	UnusedGPUHours   decimal.Decimal `json:"unused_gpu_hours"`
	OnDemandGPUHours decimal.Decimal `json:"on_demand_gpu_hours"`
	BurstGPUHours    decimal.Decimal `json:"burst_gpu_hours"`
}

// UnpricedUsage is usage of a meter the book does not price for that SKU:
// not billed, but reported so nobody mistakes it for zero.
type UnpricedUsage struct {
	SKU      string          `json:"sku"`
	Meter    Meter           `json:"meter"`
	Quantity decimal.Decimal `json:"quantity"`
}

// Result is a priced period. Total is the sum of the lines' rounded amounts.
type Result struct {
	Tenant       string             `json:"tenant"`
	Start        time.Time          `json:"start"`
	End          time.Time          `json:"end"`
	BookVersion  string             `json:"book_version"`
	Currency     Currency           `json:"currency"`
	Lines        []Line             `json:"lines"`
	Total        decimal.Decimal    `json:"total"`
	Reservations []ReservationUsage `json:"reservations,omitempty"`
	Unpriced     []UnpricedUsage    `json:"unpriced,omitempty"`
}

// MarshalJSON writes the total in the currency's minor units.
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result
	return json.Marshal(struct {
		plain
		Total string `json:"total"`
	}{plain(r), r.Total.StringFixed(r.Currency.MinorUnits)})
}

// Validate checks the input: a period, a book, a contract that fits the
// book, and rows inside the period for SKUs and meters the book knows.
func (in *Input) Validate() error {
	if err := in.validateHeader(); err != nil {
		return err
	}
	var ps problems
	sc := newSKUCache(in)
	var r row
	for i := range in.Usage {
		if !in.checkRow(&sc, i, &r) {
			in.reportRow(&ps, &sc, i)
		}
	}
	return ps.err("input", nil)
}

// skuCache remembers the SKUs looked up recently: a tenant uses a handful,
// and comparing a few strings (usually the very same string) is cheaper
// than hashing one per row. It also holds the period in whole seconds (an
// hour start is a whole second, so ceilings compare exactly).
type skuCache struct {
	names  [8]string
	index  [8]int
	n      int // entries filled
	next   int // entry to replace when full
	startS int64
	endS   int64
}

func newSKUCache(in *Input) skuCache {
	return skuCache{startS: ceilUnix(in.Start), endS: ceilUnix(in.End)}
}

func (c *skuCache) lookup(b *Book, sku string) (int, bool) {
	for k := range c.n {
		if c.names[k] == sku {
			return c.index[k], true
		}
	}
	i, ok := b.index[sku]
	if ok {
		k := c.next
		if c.n < len(c.names) {
			k = c.n
			c.n++
		} else {
			c.next = (c.next + 1) % len(c.names)
		}
		c.names[k], c.index[k] = sku, i
	}
	return i, ok
}

func (in *Input) validateHeader() error {
	var ps problems
	if in.Book == nil {
		ps.add("book", "required")
	}
	switch {
	case in.Start.IsZero() || in.End.IsZero():
		ps.add("period", "start and end are required")
	case !in.Start.Before(in.End):
		ps.add("period", "end %s is not after start %s", fmtTime(in.End), fmtTime(in.Start))
	}
	if c := in.Contract; c != nil && in.Tenant != "" && c.Tenant != "" && c.Tenant != in.Tenant {
		ps.add("tenant", "input is for %q but the contract is %q's", in.Tenant, c.Tenant)
	}
	if err := ps.err("input", nil); err != nil {
		return err
	}
	if in.Contract != nil {
		var cps problems
		in.Contract.validate(&cps)
		in.Contract.checkBook(&cps, in.Book)
		if err := cps.err("contract", in.Contract.lines); err != nil {
			return err
		}
	}
	return nil
}

// row is a usage row that passed checkRow. Its quantity is c × 10^e when
// small, else q.
type row struct {
	hour       int64 // Unix seconds
	sku, meter int
	q          decimal.Decimal
	c          int64
	e          int32
	small      bool
}

// checkRow resolves usage row i against the book into r and reports
// whether it is valid. It says nothing about why: reportRow does, off the
// hot path, so this loop over 21,600 rows per tenant-month keeps a small
// stack frame.
func (in *Input) checkRow(sc *skuCache, i int, r *row) bool {
	u := &in.Usage[i]
	r.hour = u.Hour.Unix()
	if r.hour < sc.startS || r.hour >= sc.endS || r.hour%3600 != 0 || u.Hour.Nanosecond() != 0 {
		return false
	}
	var found, known bool
	if r.sku, found = sc.lookup(in.Book, u.SKU); !found {
		return false
	}
	if r.meter, known = u.Meter.index(); !known {
		return false
	}
	// The common case (at most 18 digits, 0 to 18 places, within bounds)
	// is checked with one digit count and no allocation.
	q := u.Quantity
	if e := q.Exponent(); e <= 0 && e >= -maxPlaces {
		if nd := q.NumDigits(); nd+int(e) <= maxIntDigits && nd <= 18 {
			r.c, r.e, r.small = q.CoefficientInt64(), e, true
			return r.c >= 0
		}
	}
	q, err := checkBounds(q)
	r.q, r.small = q, false
	return err == nil && q.Sign() >= 0
}

// reportRow adds what is wrong with usage row i to ps.
func (in *Input) reportRow(ps *problems, sc *skuCache, i int) {
	u := &in.Usage[i]
	p := path("usage").index(i)
	if t := u.Hour.Unix(); t < sc.startS || t >= sc.endS {
		ps.add(p.key("hour"), "%s is outside the period [%s, %s)", fmtTime(u.Hour), fmtTime(in.Start), fmtTime(in.End))
	} else if t%3600 != 0 || u.Hour.Nanosecond() != 0 {
		ps.add(p.key("hour"), "%s is not the start of an hour", fmtTime(u.Hour))
	}
	if _, found := sc.lookup(in.Book, u.SKU); !found {
		ps.add(p.key("sku"), "unknown SKU %q (not in book %s)", u.SKU, in.Book.version)
	}
	if _, known := u.Meter.index(); !known {
		ps.add(p.key("meter"), "unknown meter %q (known: %s)", u.Meter, meterList())
	}
	q, err := checkBounds(u.Quantity)
	switch {
	case err != nil:
		ps.add(p.key("quantity"), "%v", err)
	case q.Sign() < 0:
		ps.add(p.key("quantity"), "negative quantity %s", q.String())
	}
}

// unpricedSum is the quantity of a SKU and meter the book does not price,
// summed without a decimal addition per row (an unpriced energy meter is
// a row per hour): the same decimal as adding the rows to zero one by one,
// digits and exponent, which is the smallest of 0 and the rows'.
type unpricedSum struct {
	sum qsum
	exp int32
}

func (u *unpricedSum) add(r *row) {
	if r.small {
		u.sum.addInt(r.c, r.e)
		u.exp = min(u.exp, r.e)
		return
	}
	u.sum.add(r.q)
	u.exp = min(u.exp, r.q.Exponent())
}

func (u *unpricedSum) value() decimal.Decimal {
	// Adding to zero at the exponent gives the sum that exponent.
	return decimal.New(0, u.exp).Add(u.sum.value())
}

// acc sums one (SKU, meter, price version) slot.
type acc struct {
	onDemand, covered, burst qsum
}

// Price prices one tenant's usage over one period. It is a pure function of
// its input: the same input always gives the same result. The semantics
// are in docs/pricing.md.
func Price(in Input) (Result, error) {
	if err := in.validateHeader(); err != nil {
		return Result{}, err
	}
	b := in.Book
	cur := b.currency
	plan := newPlan(&in)

	accs := make([]acc, b.slots)
	unpriced := map[[2]int]*unpricedSum{}
	var ps problems
	sc := newSKUCache(&in)
	var r row
	for i := range in.Usage {
		if !in.checkRow(&sc, i, &r) {
			in.reportRow(&ps, &sc, i)
			continue
		}
		mp := b.entries[r.sku].meters[r.meter]
		var sum *qsum
		switch {
		case mp == nil:
			k := [2]int{r.sku, r.meter}
			u := unpriced[k]
			if u == nil {
				u = &unpricedSum{}
				unpriced[k] = u
			}
			u.add(&r)
			continue
		case r.meter == 0 && plan.skus[r.sku] != nil:
			sum = plan.skus[r.sku].hour(r.hour)
		default:
			sum = &accs[mp.slot+mp.versionAt(r.hour)].onDemand
		}
		if r.small {
			sum.addInt(r.c, r.e)
		} else {
			sum.add(r.q)
		}
	}
	if err := ps.err("input", nil); err != nil {
		return Result{}, err
	}
	plan.splitHours(&in, accs)

	res := Result{
		Tenant:      in.Tenant,
		Start:       in.Start,
		End:         in.End,
		BookVersion: b.version,
		Currency:    cur,
		Total:       decimal.Zero,
	}
	if res.Tenant == "" && in.Contract != nil {
		res.Tenant = in.Contract.Tenant
	}
	lb := lineBuilder{in: &in, cur: cur, lines: []Line{}}
	for si := range b.entries {
		e := &b.entries[si]
		sp := plan.skus[si]
		for mi, mp := range e.meters {
			if mp == nil {
				continue
			}
			slots := accs[mp.slot : mp.slot+len(mp.versions)]
			if mi == 0 && sp != nil {
				lb.reservationLines(e, sp, slots)
			}
			lb.usageLines(e, Meter(Meters()[mi]), mp, slots)
			if mi == 0 && sp != nil {
				if ru := sp.usage(e.name, slots); !ru.empty() {
					res.Reservations = append(res.Reservations, ru)
				}
			}
		}
	}
	for si := range b.entries {
		for _, m := range Meters() {
			mi, _ := m.index()
			if u, ok := unpriced[[2]int{si, mi}]; ok {
				res.Unpriced = append(res.Unpriced, UnpricedUsage{SKU: b.entries[si].name, Meter: m, Quantity: u.value()})
			}
		}
	}
	lb.trueUp(plan)
	res.Lines = lb.lines
	for _, l := range res.Lines {
		res.Total = res.Total.Add(l.AmountRounded)
	}
	// Invoices store amounts as Decimal(38, 9): an amount with more integer
	// digits cannot be stored, so it is refused here rather than truncated
	// there.
	for i, l := range res.Lines {
		if !fitsStorage(l.Amount) {
			return Result{}, fault.Validationf("line %d (%s %s): amount %s has more than %d integer digits, beyond what invoices store", i, l.SKU, l.Meter, l.Amount, storageIntDigits)
		}
	}
	if !fitsStorage(res.Total) {
		return Result{}, fault.Validationf("total %s has more than %d integer digits, beyond what invoices store", res.Total, storageIntDigits)
	}
	return res, nil
}

// lineBuilder appends lines and rounds each exactly once.
type lineBuilder struct {
	in    *Input
	cur   Currency
	lines []Line
}

// add sets the line's amounts from its exact amount: Amount is exact
// quantized to the 9 places invoices store, and AmountRounded is that
// Amount rounded to minor units, the one value every check rounds.
func (lb *lineBuilder) add(l Line, exact decimal.Decimal) {
	l.Amount = lb.cur.Quantize(exact)
	l.AmountRounded = lb.cur.Round(l.Amount)
	lb.lines = append(lb.lines, l)
}

func (lb *lineBuilder) subtotal() decimal.Decimal {
	s := decimal.Zero
	for _, l := range lb.lines {
		s = s.Add(l.AmountRounded)
	}
	return s
}

// versionSpan is the part of the period in which price version v applies.
func (lb *lineBuilder) versionSpan(mp *meterPrice, v int) (time.Time, time.Time) {
	from, to := lb.in.Start, lb.in.End
	if f := mp.versions[v].from; v > 0 && f.After(from) {
		from = f
	}
	if v+1 < len(mp.versions) && mp.versions[v+1].from.Before(to) {
		to = mp.versions[v+1].from
	}
	return from, to
}

// usageLines prices the on-demand and burst quantities of one SKU and meter.
// Each is one stream across the period's price versions: graduated tiers
// count from the period's first unit, volume tiers are chosen by the
// period's total (see docs/pricing.md, "Price changes").
func (lb *lineBuilder) usageLines(e *skuEntry, m Meter, mp *meterPrice, slots []acc) {
	onDemand := make([]decimal.Decimal, len(slots))
	burst := make([]decimal.Decimal, len(slots))
	for v := range slots {
		onDemand[v], burst[v] = slots[v].onDemand.value(), slots[v].burst.value()
	}
	for v, c := range streamCharges(mp, onDemand) {
		if onDemand[v].Sign() <= 0 {
			continue
		}
		from, to := lb.versionSpan(mp, v)
		l := Line{SKU: e.name, Meter: m, Kind: KindOnDemand, From: from, To: to, Quantity: onDemand[v], Unit: m.Spec().Unit,
			Description: e.name + " " + m.Spec().Noun}
		lb.setPrice(&l, &mp.versions[v].sched, c, decimal.NewFromInt(1))
		lb.add(l, c.amount)
	}
	for v, c := range streamCharges(mp, burst) {
		if burst[v].Sign() <= 0 {
			continue
		}
		pv := &mp.versions[v]
		from, to := lb.versionSpan(mp, v)
		l := Line{SKU: e.name, Meter: m, Kind: KindBurst, From: from, To: to, Quantity: burst[v], Unit: m.Spec().Unit}
		if pv.burst.hasPrice {
			p := pv.burst.unitPrice
			l.UnitPrice = &p
			l.Description = fmt.Sprintf("%s %s above the reservation, at the burst price", e.name, m.Spec().Noun)
			lb.add(l, burst[v].Mul(p))
			continue
		}
		l.Description = fmt.Sprintf("%s %s above the reservation, at %s× the on-demand price", e.name, m.Spec().Noun, pv.burst.multiplier.String())
		c = c.scale(pv.burst.multiplier)
		lb.setPrice(&l, &pv.sched, c, pv.burst.multiplier)
		lb.add(l, c.amount)
	}
}

// setPrice shows a plain unit price, or the tier breakdown.
func (lb *lineBuilder) setPrice(l *Line, s *schedule, c charge, multiplier decimal.Decimal) {
	if c.tiers == nil && s.simple() {
		p := s.tiers[0].unitPrice.Mul(multiplier)
		l.UnitPrice = &p
		return
	}
	l.Tiers = c.tiers
}

// streamCharges prices quantities[v] under price version v for every
// version, counting tiers across the whole period.
func streamCharges(mp *meterPrice, quantities []decimal.Decimal) []charge {
	total := decimal.Zero
	for _, q := range quantities {
		total = total.Add(q)
	}
	out := make([]charge, len(quantities))
	before := decimal.Zero
	for v, q := range quantities {
		if q.Sign() <= 0 {
			continue
		}
		s := &mp.versions[v].sched
		if s.mode == Volume {
			out[v] = s.volume(q, total)
		} else {
			out[v] = s.graduated(before, before.Add(q))
		}
		before = before.Add(q)
	}
	return out
}
