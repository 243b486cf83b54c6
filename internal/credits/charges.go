package credits

import (
	"slices"

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
// customer's tax percentage, which prepaid credit pays too.
func ChargesOf(priced pricing.Result, usage []pricing.Usage, taxRate decimal.Decimal) []Charge {
	var out []Charge
	for _, l := range priced.Lines {
		if l.Amount.Sign() == 0 {
			continue
		}
		var hours []pricing.Usage
		if l.Kind == pricing.KindOnDemand || l.Kind == pricing.KindBurst {
			for _, u := range usage {
				if u.SKU == l.SKU && u.Meter == l.Meter && !u.Hour.Before(l.From) && u.Hour.Before(l.To) && u.Quantity.Sign() > 0 {
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
			continue
		}
		// A burst line's quantity is the part above the reservation: its
		// hours' quantities stand for it in proportion.
		left, leftQty := l.Amount, l.Quantity
		for i, u := range hours {
			amount, qty := left, leftQty
			if i < len(hours)-1 {
				amount = l.Amount.Mul(u.Quantity).DivRound(total, 2*pricing.StoragePlaces)
				qty = l.Quantity.Mul(u.Quantity).DivRound(total, 2*pricing.StoragePlaces)
			}
			left, leftQty = left.Sub(amount), leftQty.Sub(qty)
			out = append(out, Charge{At: u.Hour, SKU: l.SKU, Meter: l.Meter, Quantity: qty, Amount: amount, TaxRate: taxRate})
		}
	}
	slices.SortStableFunc(out, func(a, b Charge) int { return a.At.Compare(b.At) })
	return out
}
