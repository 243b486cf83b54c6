package credits

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// ChargesOf gives the charges of the scan-per-line spread it replaced,
// to the last digit and exponent, in the same order: random periods of
// several SKUs and meters, tiered (several lines of one SKU and meter),
// burst and fee lines, price versions splitting the month, runs of
// equal hourly quantities and changing ones, zero quantities, and usage
// out of hour order.
func TestChargesOfEqualsReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 1))
	skus := []string{"H100-SXM5-80GB", "A100-SXM4-80GB/3g.40gb", "L4"}
	meters := []pricing.Meter{pricing.GPUHours, "energy_kwh"}
	quantities := []string{"1", "0.5", "0.5", "0.428571428", "2", "0", "0.333333333", "3.000000001"}
	amounts := []string{"10", "1234.567891234", "0.01", "-5", "99999999999.999999999", "0.000000001"}
	// AppendChargesOf's slice, round after round, after one charge of its own.
	reused := []Charge{{At: nov, SKU: "kept", Quantity: decimal.New(5, -1), Amount: decimal.New(7, -2), TaxRate: decimal.Zero}}
	kept := chargesText(reused)
	for round := range 300 {
		var usage []pricing.Usage
		hours := 1 + rng.IntN(60)
		for h := range hours {
			at := nov.Add(time.Duration(h) * time.Hour)
			for _, sku := range skus[:1+rng.IntN(len(skus))] {
				for _, m := range meters {
					q := quantities[0]
					if rng.IntN(4) == 0 { // mostly steady, sometimes another quantity
						q = quantities[rng.IntN(len(quantities))]
					}
					usage = append(usage, pricing.Usage{Hour: at, SKU: sku, Meter: m, Quantity: decimal.RequireFromString(q)})
				}
			}
		}
		if round%10 == 0 { // out of hour order: the sort, not the merge
			rng.Shuffle(len(usage), func(i, j int) { usage[i], usage[j] = usage[j], usage[i] })
		}
		var lines []pricing.Line
		for range 1 + rng.IntN(6) {
			from := nov.Add(time.Duration(rng.IntN(hours)) * time.Hour)
			to := nov.Add(time.Duration(hours+1) * time.Hour)
			if rng.IntN(3) == 0 {
				to = from.Add(time.Duration(1+rng.IntN(hours)) * time.Hour)
			}
			kind := []pricing.Kind{pricing.KindOnDemand, pricing.KindOnDemand, pricing.KindBurst, pricing.KindReservationFee}[rng.IntN(4)]
			lines = append(lines, pricing.Line{Kind: kind, SKU: skus[rng.IntN(len(skus))], Meter: meters[rng.IntN(len(meters))], From: from, To: to,
				Quantity: decimal.RequireFromString(quantities[rng.IntN(len(quantities))]).Add(decimal.NewFromInt(int64(rng.IntN(50)))),
				Amount:   decimal.RequireFromString(amounts[rng.IntN(len(amounts))])})
		}
		if rng.IntN(5) == 0 {
			lines = append(lines, pricing.Line{Kind: pricing.KindReserved, SKU: skus[0], Meter: meters[0], From: nov, To: nov.AddDate(0, 1, 0), Amount: decimal.Zero})
		}
		priced := pricing.Result{Lines: lines}
		tax := decimal.NewFromInt(int64(rng.IntN(20)))
		got, want := ChargesOf(priced, slices.Clone(usage), tax), chargesOfReference(priced, usage, tax)
		if g, w := chargesText(got), chargesText(want); g != w {
			t.Fatalf("round %d:\n got %s\nwant %s", round, g, w)
		}
		// Appended to a slice reused from the last round (stale charges
		// past its length): the first charge stays, the rest are these.
		reused = AppendChargesOf(reused[:1], priced, slices.Clone(usage), tax)
		if g, w := chargesText(reused[1:]), chargesText(want); g != w {
			t.Fatalf("round %d appended:\n got %s\nwant %s", round, g, w)
		}
		if g := chargesText(reused[:1]); g != kept {
			t.Fatalf("round %d: the charge before the appended ones is %s, want %s", round, g, kept)
		}
	}
}

// chargesText is charges with every digit and exponent.
func chargesText(cs []Charge) string {
	out := fmt.Sprintf("%d:", len(cs))
	for _, c := range cs {
		out += fmt.Sprintf(" %s %s %s q=%s(%d) a=%s(%d) t=%s;", c.At.Format(time.RFC3339), c.SKU, c.Meter,
			c.Quantity, c.Quantity.Exponent(), c.Amount, c.Amount.Exponent(), c.TaxRate)
	}
	return out
}

func chargesOfReference(priced pricing.Result, usage []pricing.Usage, taxRate decimal.Decimal) []Charge {
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
