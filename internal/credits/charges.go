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
	// The usage of each SKU and meter, in usage order, found in one pass
	// (not one scan of all usage per line).
	type skuMeter struct {
		sku   string
		meter pricing.Meter
	}
	var groups map[skuMeter][]pricing.Usage
	out := make([]Charge, 0, len(usage)+len(priced.Lines))
	// runs[i] ends line i's charges in out; each run is in time order
	// when usage is, and then merging them is the stable sort by time.
	runs := make([]int, 0, len(priced.Lines))
	inOrder := true
	for _, l := range priced.Lines {
		if l.Amount.Sign() == 0 {
			continue
		}
		var hours []pricing.Usage
		if l.Kind == pricing.KindOnDemand || l.Kind == pricing.KindBurst {
			if groups == nil {
				groups = map[skuMeter][]pricing.Usage{}
				for _, u := range usage {
					if u.Quantity.Sign() > 0 {
						k := skuMeter{u.SKU, u.Meter}
						groups[k] = append(groups[k], u)
					}
				}
			}
			for _, u := range groups[skuMeter{l.SKU, l.Meter}] {
				if !u.Hour.Before(l.From) && u.Hour.Before(l.To) {
					hours = append(hours, u)
				}
			}
		}
		total := decimal.Zero
		for _, u := range hours {
			total = total.Add(u.Quantity)
		}
		if len(hours) == 0 || total.Sign() == 0 {
			out = append(out, Charge{At: l.From, SKU: l.SKU, Quantity: decimal.Zero, Amount: l.Amount, TaxRate: taxRate})
			runs = append(runs, len(out))
			continue
		}
		start := len(out)
		out = spread(out, l, hours, total, taxRate)
		runs = append(runs, len(out))
		inOrder = inOrder && slices.IsSortedFunc(out[start:], byTime)
	}
	if !inOrder {
		slices.SortStableFunc(out, byTime)
		return out
	}
	return mergeRuns(out, runs)
}

func byTime(a, b Charge) int { return a.At.Compare(b.At) }

// spread appends line l spread over hours (of quantity total) to out:
// each hour but the last its share of the amount and quantity, rounded at
// twice the stored places, the last the rest. Hours of equal quantity
// have equal shares: a run of them (a GPU held hour after hour) is
// divided once and subtracted from the rest once, which gives the same
// decimals as dividing and subtracting hour by hour (exact products and
// differences; the rounding is of the same quotient).
func spread(out []Charge, l pricing.Line, hours []pricing.Usage, total, taxRate decimal.Decimal) []Charge {
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
	for i, u := range hours[:last] {
		if pending == 0 || !u.Quantity.Equal(shareOf) {
			settle()
			shareOf = u.Quantity
			amount = l.Amount.Mul(u.Quantity).DivRound(total, 2*pricing.StoragePlaces)
			qty = l.Quantity.Mul(u.Quantity).DivRound(total, 2*pricing.StoragePlaces)
		}
		pending++
		out = append(out, Charge{At: hours[i].Hour, SKU: l.SKU, Meter: l.Meter, Quantity: qty, Amount: amount, TaxRate: taxRate})
	}
	settle()
	return append(out, Charge{At: hours[last].Hour, SKU: l.SKU, Meter: l.Meter, Quantity: leftQty, Amount: left, TaxRate: taxRate})
}

// mergeRuns merges the time-ordered runs of charges (charges[runs[i-1]:
// runs[i]]) into one in time order, a charge of an earlier run first at
// equal times: what a stable sort by time of charges gives.
func mergeRuns(charges []Charge, runs []int) []Charge {
	if len(runs) <= 1 {
		return charges
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
