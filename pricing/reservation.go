package pricing

import (
	"fmt"
	"sort"
	"time"

	"github.com/shopspring/decimal"
)

// plan is the contract resolved against the book and clipped to the period.
type plan struct {
	skus []*skuPlan // by SKU index; nil: the SKU's gpu_hours are all on demand

	// term is the part of the period inside the contract term (the whole
	// period without a contract).
	termStart, termEnd time.Time

	minMonthly decimal.Decimal
	hasMin     bool
}

// skuPlan holds the reservations and burst threshold of one SKU; its
// gpu_hours are summed per hour so coverage can be decided hour by hour.
type skuPlan struct {
	res          []planRes
	threshold    qsum
	hasThreshold bool
	hours        []hourSum // in row order until splitHours sorts and merges them
}

type hourSum struct {
	start int64 // Unix seconds
	q     qsum
}

// hour returns a sum for the hour starting at start (Unix seconds). Rows
// of one hour usually arrive together and share a sum; any others are
// merged by mergeHours. Appending beats a map by several times here.
func (sp *skuPlan) hour(start int64) *qsum {
	if n := len(sp.hours); n > 0 && sp.hours[n-1].start == start {
		return &sp.hours[n-1].q
	}
	sp.hours = append(sp.hours, hourSum{start: start})
	return &sp.hours[len(sp.hours)-1].q
}

// mergeHours sorts the hours and adds up entries for the same hour.
func (sp *skuPlan) mergeHours() {
	if !sort.SliceIsSorted(sp.hours, func(i, j int) bool { return sp.hours[i].start < sp.hours[j].start }) {
		sort.SliceStable(sp.hours, func(i, j int) bool { return sp.hours[i].start < sp.hours[j].start })
	}
	out := sp.hours[:0]
	for _, h := range sp.hours {
		if n := len(out); n > 0 && out[n-1].start == h.start {
			out[n-1].q.addSum(h.q)
			continue
		}
		out = append(out, h)
	}
	sp.hours = out
}

// planRes is one reservation clipped to the period.
type planRes struct {
	r        *Reservation
	gpus     decimal.Decimal
	from, to time.Time
}

func newPlan(in *Input) *plan {
	b := in.Book
	p := &plan{skus: make([]*skuPlan, len(b.entries)), termStart: in.Start, termEnd: in.End}
	p.minMonthly, p.hasMin = b.minMonthly, b.hasMin
	c := in.Contract
	if c == nil {
		return p
	}
	if !c.Start.IsZero() && c.Start.After(p.termStart) {
		p.termStart = c.Start
	}
	if !c.End.IsZero() && c.End.Before(p.termEnd) {
		p.termEnd = c.End
	}
	if c.MinimumMonthly != nil {
		p.minMonthly, p.hasMin = *c.MinimumMonthly, true
	}
	get := func(sku string) *skuPlan {
		si := b.index[sku] // checkBook has made sure the SKU exists
		if p.skus[si] == nil {
			p.skus[si] = &skuPlan{hours: make([]hourSum, 0, hoursHint(in))}
		}
		return p.skus[si]
	}
	for i := range c.Reservations {
		r := &c.Reservations[i]
		from, to := c.reservationTerm(*r)
		if from.Before(in.Start) {
			from = in.Start
		}
		if to.After(in.End) {
			to = in.End
		}
		if !from.Before(to) {
			continue // not in this period
		}
		gpus := r.GPUs
		if r.Instances > 0 {
			gpus, _ = b.instancesToGPUs(r.SKU, r.Instances) // checkBook has made sure the weight is known
		}
		sp := get(r.SKU)
		sp.res = append(sp.res, planRes{r: r, gpus: gpus, from: from, to: to})
	}
	if p.termStart.Before(p.termEnd) {
		for _, t := range c.Burst {
			sp := get(t.SKU)
			sp.hasThreshold = true
			if t.AboveGPUs != nil {
				sp.threshold.add(*t.AboveGPUs)
			} else {
				gpus, _ := b.instancesToGPUs(t.SKU, *t.AboveInstances)
				sp.threshold.add(gpus)
			}
		}
	}
	return p
}

// splitHours decides coverage hour by hour: of the gpu_hours used in an
// hour, up to the capacity reserved in that hour is covered; up to the
// burst threshold (the reservation unless the contract sets a higher one)
// is on demand; the rest of the hour is burst.
func (p *plan) splitHours(in *Input, accs []acc) {
	for si, sp := range p.skus {
		if sp == nil {
			continue
		}
		mp := in.Book.entries[si].meters[0]
		if mp == nil {
			continue // the book does not price gpu_hours: the rows went to Unpriced
		}
		sp.mergeHours()
		for _, h := range sp.hours {
			var capacity qsum
			for _, r := range sp.res {
				secs := overlap(h.start, h.start+3600, in.Start.Unix(), in.End.Unix(), r.from.Unix(), r.to.Unix())
				switch {
				case secs == 3600:
					capacity.add(r.gpus)
				case secs > 0:
					capacity.add(r.gpus.Mul(hoursOf(secs)))
				}
			}
			hour := time.Unix(h.start, 0)
			limit, limited := capacity, capacity.sign() > 0
			if sp.hasThreshold && !hour.Before(p.termStart) && hour.Before(p.termEnd) {
				if cmpq(sp.threshold, capacity) > 0 {
					limit = sp.threshold
				}
				limited = true
			}
			a := &accs[mp.slot+mp.versionAt(h.start)]
			if !limited {
				a.onDemand.addSum(h.q)
				continue
			}
			split(a, h.q, capacity, limit)
		}
	}
}

// split adds one hour's usage u to a: up to capacity covered, up to limit
// (≥ capacity) on demand, the rest burst. Integer arithmetic when the three
// share an exponent within int64; decimals otherwise.
func split(a *acc, u, capacity, limit qsum) {
	if uc, cc, lc, e, ok := align3(u, capacity, limit); ok {
		covered := min(uc, cc)
		a.covered.addInt(trim(covered, e))
		a.onDemand.addInt(trim(min(uc, lc)-covered, e))
		if uc > lc {
			a.burst.addInt(trim(uc-lc, e))
		}
		return
	}
	ud, cd, ld := u.value(), capacity.value(), limit.value()
	covered := decimal.Min(ud, cd)
	a.covered.add(covered)
	a.onDemand.add(decimal.Min(ud, ld).Sub(covered))
	if ud.Cmp(ld) > 0 {
		a.burst.add(ud.Sub(ld))
	}
}

// align3 returns three sums as int64 coefficients at one exponent.
func align3(x, y, z qsum) (int64, int64, int64, int32, bool) {
	xc, xe, ok1 := x.small()
	yc, ye, ok2 := y.small()
	zc, ze, ok3 := z.small()
	if !ok1 || !ok2 || !ok3 {
		return 0, 0, 0, 0, false
	}
	e := min(xe, ye, ze)
	xs, ok1 := scale(xc, xe-e)
	ys, ok2 := scale(yc, ye-e)
	zs, ok3 := scale(zc, ze-e)
	return xs, ys, zs, e, ok1 && ok2 && ok3
}

func cmpq(x, y qsum) int {
	if xc, yc, _, _, ok := align3(x, y, qsum{}); ok {
		return cmpInt(xc, yc)
	}
	return x.value().Cmp(y.value())
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// usage sums how one SKU's gpu_hours were split.
func (sp *skuPlan) usage(sku string, slots []acc) ReservationUsage {
	ru := ReservationUsage{SKU: sku, ReservedGPUHours: decimal.Zero, CoveredGPUHours: decimal.Zero,
		OnDemandGPUHours: decimal.Zero, BurstGPUHours: decimal.Zero}
	for _, r := range sp.res {
		ru.ReservedGPUHours = ru.ReservedGPUHours.Add(r.reservedHours())
	}
	for _, a := range slots {
		ru.CoveredGPUHours = ru.CoveredGPUHours.Add(a.covered.value())
		ru.OnDemandGPUHours = ru.OnDemandGPUHours.Add(a.onDemand.value())
		ru.BurstGPUHours = ru.BurstGPUHours.Add(a.burst.value())
	}
	ru.UnusedGPUHours = ru.ReservedGPUHours.Sub(ru.CoveredGPUHours)
	return ru
}

// empty reports a SKU with a threshold but nothing reserved or used.
func (ru ReservationUsage) empty() bool {
	return ru.ReservedGPUHours.IsZero() && ru.CoveredGPUHours.IsZero() && ru.OnDemandGPUHours.IsZero() && ru.BurstGPUHours.IsZero()
}

func (r planRes) reservedHours() decimal.Decimal {
	return r.gpus.Mul(hoursOf(r.to.Unix() - r.from.Unix()))
}

// reservationLines charges each reservation of a SKU (take-or-pay, prorated
// by the second) and shows the usage it covered at no extra charge.
func (lb *lineBuilder) reservationLines(e *skuEntry, sp *skuPlan, slots []acc) {
	for _, r := range sp.res {
		l := Line{SKU: e.name, Meter: GPUHours, Kind: KindReservationFee, From: r.from, To: r.to}
		if r.r.Rate != nil {
			rate := *r.r.Rate
			l.Quantity = r.reservedHours()
			l.Unit = GPUHours.Spec().Unit
			l.UnitPrice = &rate
			l.Description = fmt.Sprintf("%s GPU-equivalents of %s at %s %s per GPU-hour",
				r.gpus.String(), e.name, lb.cur.Amount(rate), lb.cur.Code)
			lb.add(l, l.Quantity.Mul(rate))
			continue
		}
		fee := *r.r.MonthlyFee
		exact, months := prorateMonthly(fee, r.from, r.to, lb.in.Start.Location())
		l.Quantity = months
		l.Unit = "months"
		l.UnitPrice = &fee
		l.Description = fmt.Sprintf("%s GPU-equivalents of %s at %s %s per month",
			r.gpus.String(), e.name, lb.cur.Amount(fee), lb.cur.Code)
		lb.add(l, exact)
	}
	covered := decimal.Zero
	for _, a := range slots {
		covered = covered.Add(a.covered.value())
	}
	if covered.Sign() > 0 {
		zero := decimal.Zero
		lb.add(Line{SKU: e.name, Meter: GPUHours, Kind: KindReserved, From: lb.in.Start, To: lb.in.End,
			Quantity: covered, Unit: GPUHours.Spec().Unit, UnitPrice: &zero,
			Description: fmt.Sprintf("%s %s within the reservation (paid by the reservation fee)", e.name, GPUHours.Spec().Noun)}, zero)
	}
}

// trueUp adds the shortfall below the minimum commitment, prorated by the
// second over the calendar months of the contract term inside the period.
// The commitment is rounded like a line and compared with the sum of the
// rounded lines, so the total comes out at exactly the commitment.
func (lb *lineBuilder) trueUp(p *plan) {
	if !p.hasMin || !p.termStart.Before(p.termEnd) {
		return
	}
	exact, months := prorateMonthly(p.minMonthly, p.termStart, p.termEnd, lb.in.Start.Location())
	commitment := lb.cur.Round(exact)
	sub := lb.subtotal()
	if commitment.Cmp(sub) <= 0 {
		return
	}
	lb.add(Line{Kind: KindTrueUp, From: p.termStart, To: p.termEnd, Quantity: months, Unit: "months",
		Description: fmt.Sprintf("minimum commitment of %s %s a month, %s %s for this period; the lines add up to %s %s",
			lb.cur.Amount(p.minMonthly), lb.cur.Code, commitment.StringFixed(lb.cur.MinorUnits), lb.cur.Code,
			sub.StringFixed(lb.cur.MinorUnits), lb.cur.Code),
	}, commitment.Sub(sub))
}

// prorateMonthly prorates a per-calendar-month amount over [from, to) by the
// second, each calendar month (in loc) weighing its own length, so February
// and DST months are exact. It returns the amount and the months covered.
func prorateMonthly(perMonth decimal.Decimal, from, to time.Time, loc *time.Location) (decimal.Decimal, decimal.Decimal) {
	amount, months := decimal.Zero, decimal.Zero
	start := from.In(loc)
	m0 := time.Date(start.Year(), start.Month(), 1, 0, 0, 0, 0, loc)
	for m0.Before(to) {
		m1 := m0.AddDate(0, 1, 0)
		secs := overlap(from.Unix(), to.Unix(), m0.Unix(), m1.Unix(), m0.Unix(), m1.Unix())
		length := m1.Unix() - m0.Unix()
		switch {
		case secs == length:
			amount = amount.Add(perMonth)
			months = months.Add(decimal.NewFromInt(1))
		case secs > 0:
			s, l := decimal.NewFromInt(secs), decimal.NewFromInt(length)
			amount = amount.Add(perMonth.Mul(s).DivRound(l, maxPlaces))
			months = months.Add(s.DivRound(l, maxPlaces))
		}
		m0 = m1
	}
	return amount, months
}

// hoursHint sizes per-hour tables for the period, capped for long periods.
func hoursHint(in *Input) int {
	return int(min(max(in.End.Unix()-in.Start.Unix(), 0)/3600+1, 24*31))
}

// hoursOf converts seconds to hours, exactly when whole, else to maxPlaces.
func hoursOf(secs int64) decimal.Decimal {
	if secs%3600 == 0 {
		return decimal.NewFromInt(secs / 3600)
	}
	return decimal.NewFromInt(secs).DivRound(decimal.NewFromInt(3600), maxPlaces)
}

// overlap is the length of [a0,a1) ∩ [b0,b1) ∩ [c0,c1) in seconds.
func overlap(a0, a1, b0, b1, c0, c1 int64) int64 {
	lo, hi := max(a0, b0, c0), min(a1, b1, c1)
	if hi <= lo {
		return 0
	}
	return hi - lo
}
