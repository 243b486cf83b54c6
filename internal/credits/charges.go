package credits

import (
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// ChargesOf turns a priced period into the hourly charges credits burn:
// each usage line (on demand, burst) is spread over the hours of its SKU
// and meter in [From, To) by quantity, the last hour taking the rest of
// the amount, so the charges add up to the line exactly (a tiered line's
// average price, hour by hour). A line without usage hours (a reservation
// fee, a commitment true-up) is one charge at its start that only money
// covers (no meter). Lines of no money (usage covered by a reservation)
// charge nothing. usage is the hourly usage the period was priced from; taxRate is the
// customer's tax percentage, which prepaid credit pays too. The charges
// are in time order; those of one time in the order of the lines.
func ChargesOf(priced pricing.Result, usage []pricing.Usage, taxRate decimal.Decimal) []Charge {
	return AppendChargesOf(nil, priced, usage, taxRate)
}

// AppendChargesOf appends ChargesOf(priced, usage, taxRate) to out and
// returns the longer slice (out as it is for none), so that a caller
// pricing many periods reuses one slice: a month of hourly charges is
// large, and allocating and clearing it per customer cost more than
// spreading it.
func AppendChargesOf(out []Charge, priced pricing.Result, usage []pricing.Usage, taxRate decimal.Decimal) []Charge {
	groups := groupUsage(usage)
	// First each line's charge times: its hours (indexes into usage) or,
	// for a line charged at once, its start.
	type lineCharges struct {
		line       pricing.Line
		total      decimal.Decimal
		first, end int  // its charges' times: times[first:end]
		once       bool // one charge at the line's start
	}
	var (
		lines   []lineCharges
		hours   = make([]int32, 0, len(usage))                       // the spread lines' hours, line after line
		times   = make([]time.Time, 0, len(usage)+len(priced.Lines)) // each charge's time, line after line
		inOrder = true                                               // each line's times are in order
	)
	for _, l := range priced.Lines {
		if l.Amount.Sign() == 0 {
			continue
		}
		start := len(hours)
		if l.Kind == pricing.KindOnDemand || l.Kind == pricing.KindBurst {
			for _, i := range groups.of(l.SKU, l.Meter) {
				if h := usage[i].Hour; !h.Before(l.From) && h.Before(l.To) {
					hours = append(hours, i)
				}
			}
		}
		lc := lineCharges{line: l, total: sumQuantities(usage, hours[start:]), first: len(times)}
		if len(hours) == start || lc.total.Sign() == 0 {
			hours = hours[:start]
			lc.once = true
			times = append(times, l.From)
		} else {
			for k, i := range hours[start:] {
				times = append(times, usage[i].Hour)
				inOrder = inOrder && (k == 0 || !times[len(times)-1].Before(times[len(times)-2]))
			}
		}
		lc.end = len(times)
		lines = append(lines, lc)
	}
	if len(times) == 0 {
		return out
	}
	// Then where each charge goes: merging the lines' times (each in
	// order) with an earlier line's first at equal times is the stable
	// sort by time of the charges line after line, and each charge is
	// written once, in its place.
	at := make([]int32, len(times))
	if inOrder {
		runs := make([][2]int, len(lines))
		for i, lc := range lines {
			runs[i] = [2]int{lc.first, lc.end}
		}
		mergeOrder(times, runs, at)
	} else {
		for i := range at {
			at[i] = int32(i)
		}
	}
	base := len(out)
	out = slices.Grow(out, len(times))[:base+len(times)]
	dst := out[base:] // each of its charges is written below, once
	off := 0          // lc's hours: hours[off:off+n]
	for _, lc := range lines {
		l := lc.line
		if lc.once {
			dst[at[lc.first]] = Charge{At: l.From, SKU: l.SKU, Quantity: decimal.Zero, Amount: l.Amount, TaxRate: taxRate}
			continue
		}
		n := lc.end - lc.first
		spread(dst, at[lc.first:lc.end], l, usage, hours[off:off+n], lc.total, taxRate)
		off += n
	}
	if !inOrder {
		slices.SortStableFunc(dst, byTime)
	}
	return out
}

// mergeOrder sets at[j] to the place of times[j] in the merge of the
// runs of times (times[run[0]:run[1]], each in order), an earlier run's
// time first at equal times.
func mergeOrder(times []time.Time, runs [][2]int, at []int32) {
	for next := range at {
		best := -1
		for i, r := range runs {
			if r[0] < r[1] && (best < 0 || times[r[0]].Before(times[runs[best][0]])) {
				best = i
			}
		}
		at[runs[best][0]] = int32(next)
		runs[best][0]++
	}
}

// usageGroups are the indexes of the usage of each SKU and meter with a
// quantity above zero, in usage order, found in one pass (not one scan of
// all usage per line).
type usageGroups struct {
	skus    []string
	meters  []pricing.Meter
	indexes [][]int32
}

func groupUsage(usage []pricing.Usage) usageGroups {
	var g usageGroups
	which := make([]int32, len(usage)) // the group of each usage row, -1 for none
	var counts []int32
	for i, u := range usage {
		which[i] = -1
		if u.Quantity.Sign() <= 0 {
			continue
		}
		k := g.find(u.SKU, u.Meter)
		if k < 0 {
			k = len(g.skus)
			g.skus, g.meters = append(g.skus, u.SKU), append(g.meters, u.Meter)
			counts = append(counts, 0)
		}
		which[i] = int32(k)
		counts[k]++
	}
	all := make([]int32, 0, len(usage))
	g.indexes = make([][]int32, len(counts))
	for k, n := range counts {
		g.indexes[k] = all[len(all) : len(all) : len(all)+int(n)]
		all = all[:len(all)+int(n)]
	}
	for i, k := range which {
		if k >= 0 {
			g.indexes[k] = append(g.indexes[k], int32(i))
		}
	}
	return g
}

// find is the group of sku and meter, or -1: a period has a few of them.
func (g usageGroups) find(sku string, m pricing.Meter) int {
	for k := range g.skus {
		if g.skus[k] == sku && g.meters[k] == m {
			return k
		}
	}
	return -1
}

func (g usageGroups) of(sku string, m pricing.Meter) []int32 {
	if k := g.find(sku, m); k >= 0 {
		return g.indexes[k]
	}
	return nil
}

// sumQuantities is the sum of the hours' quantities, a run of equal ones
// (value and exponent) added as one product: the same exact sum, of the
// same exponent.
func sumQuantities(usage []pricing.Usage, hours []int32) decimal.Decimal {
	total := decimal.Zero
	for i := 0; i < len(hours); {
		q := usage[hours[i]].Quantity
		j := i + 1
		for j < len(hours) && sameDecimal(usage[hours[j]].Quantity, q) {
			j++
		}
		if j-i == 1 {
			total = total.Add(q)
		} else {
			total = total.Add(q.Mul(decimal.NewFromInt(int64(j - i))))
		}
		i = j
	}
	return total
}

// sameDecimal is whether a and b are the same decimal, digits and
// exponent alike (what makes the results of operations on them the same).
func sameDecimal(a, b decimal.Decimal) bool {
	return a.Exponent() == b.Exponent() && a.Equal(b)
}

func byTime(a, b Charge) int { return a.At.Compare(b.At) }

// spread writes line l spread over hours (of quantity total) to out, the
// charge of hours[k] at out[at[k]]:
// each hour but the last its share of the amount and quantity, rounded at
// twice the stored places, the last the rest. Hours of equal quantity
// have equal shares: a run of them (a GPU held hour after hour) is
// divided once and subtracted from the rest once, which gives the same
// decimals as dividing and subtracting hour by hour (exact products and
// differences; the rounding is of the same quotient).
func spread(out []Charge, at []int32, l pricing.Line, usage []pricing.Usage, hours []int32, total, taxRate decimal.Decimal) {
	left, leftQty := l.Amount, l.Quantity
	var amount, qty, shareOf decimal.Decimal
	pending := int64(0) // hours charged amount and qty not yet taken from left
	settle := func() {
		if pending > 0 {
			n := decimal.NewFromInt(pending)
			if pending == 1 {
				left, leftQty = left.Sub(amount), leftQty.Sub(qty)
			} else {
				left, leftQty = left.Sub(amount.Mul(n)), leftQty.Sub(qty.Mul(n))
			}
			pending = 0
		}
	}
	last := len(hours) - 1
	for k, i := range hours[:last] {
		u := &usage[i]
		if pending == 0 || !u.Quantity.Equal(shareOf) {
			settle()
			shareOf = u.Quantity
			amount = l.Amount.Mul(u.Quantity).DivRound(total, 2*pricing.StoragePlaces)
			qty = l.Quantity.Mul(u.Quantity).DivRound(total, 2*pricing.StoragePlaces)
		}
		pending++
		out[at[k]] = Charge{At: u.Hour, SKU: l.SKU, Meter: l.Meter, Quantity: qty, Amount: amount, TaxRate: taxRate}
	}
	settle()
	out[at[last]] = Charge{At: usage[hours[last]].Hour, SKU: l.SKU, Meter: l.Meter, Quantity: leftQty, Amount: left, TaxRate: taxRate}
}
