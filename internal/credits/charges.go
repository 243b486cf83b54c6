package credits

import (
	"slices"
	"sync"
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
	groups := groupUsage(usage)
	// The lines' charges are spread into a pooled buffer and merged into
	// the result: one allocation of the charges, not two.
	scratch := chargeScratch.Get().(*[]Charge)
	defer func() {
		clear(*scratch) // let go of the decimals
		chargeScratch.Put(scratch)
	}()
	out := (*scratch)[:0]
	// runs[i] ends line i's charges in out; each run is in time order
	// when usage is, and then merging them is the stable sort by time.
	runs := make([]int, 0, len(priced.Lines))
	inOrder := true
	var hours []int32 // a line's hours: indexes into usage, reused
	for _, l := range priced.Lines {
		if l.Amount.Sign() == 0 {
			continue
		}
		hours = hours[:0]
		if l.Kind == pricing.KindOnDemand || l.Kind == pricing.KindBurst {
			for _, i := range groups.of(l.SKU, l.Meter) {
				if h := usage[i].Hour; !h.Before(l.From) && h.Before(l.To) {
					hours = append(hours, i)
				}
			}
		}
		total := sumQuantities(usage, hours)
		if len(hours) == 0 || total.Sign() == 0 {
			out = append(out, Charge{At: l.From, SKU: l.SKU, Quantity: decimal.Zero, Amount: l.Amount, TaxRate: taxRate})
			runs = append(runs, len(out))
			continue
		}
		start := len(out)
		out = spread(out, l, usage, hours, total, taxRate)
		runs = append(runs, len(out))
		inOrder = inOrder && slices.IsSortedFunc(out[start:], byTime)
	}
	*scratch = out
	if !inOrder {
		out = slices.Clone(out)
		slices.SortStableFunc(out, byTime)
		return out
	}
	return mergeRuns(out, runs)
}

var chargeScratch = sync.Pool{New: func() any { return new([]Charge) }}

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

// spread appends line l spread over hours (of quantity total) to out:
// each hour but the last its share of the amount and quantity, rounded at
// twice the stored places, the last the rest. Hours of equal quantity
// have equal shares: a run of them (a GPU held hour after hour) is
// divided once and subtracted from the rest once, which gives the same
// decimals as dividing and subtracting hour by hour (exact products and
// differences; the rounding is of the same quotient).
func spread(out []Charge, l pricing.Line, usage []pricing.Usage, hours []int32, total, taxRate decimal.Decimal) []Charge {
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
	for _, i := range hours[:last] {
		u := &usage[i]
		if pending == 0 || !u.Quantity.Equal(shareOf) {
			settle()
			shareOf = u.Quantity
			amount = l.Amount.Mul(u.Quantity).DivRound(total, 2*pricing.StoragePlaces)
			qty = l.Quantity.Mul(u.Quantity).DivRound(total, 2*pricing.StoragePlaces)
		}
		pending++
		out = append(out, Charge{At: u.Hour, SKU: l.SKU, Meter: l.Meter, Quantity: qty, Amount: amount, TaxRate: taxRate})
	}
	settle()
	return append(out, Charge{At: usage[hours[last]].Hour, SKU: l.SKU, Meter: l.Meter, Quantity: leftQty, Amount: left, TaxRate: taxRate})
}

// mergeRuns merges the time-ordered runs of charges (charges[runs[i-1]:
// runs[i]]) into a new slice in time order, a charge of an earlier run
// first at equal times: what a stable sort by time of charges gives.
func mergeRuns(charges []Charge, runs []int) []Charge {
	if len(charges) == 0 {
		return nil
	}
	if len(runs) <= 1 {
		return slices.Clone(charges)
	}
	heads := make([]int, len(runs))
	for i := range runs {
		if i > 0 {
			heads[i] = runs[i-1]
		}
	}
	out := make([]Charge, 0, len(charges))
	for {
		best := -1
		var at time.Time
		for i, h := range heads {
			if h < runs[i] && (best < 0 || charges[h].At.Before(at)) {
				best, at = i, charges[h].At
			}
		}
		if best < 0 {
			return out
		}
		h := heads[best]
		out = append(out, charges[h])
		heads[best] = h + 1
	}
}
