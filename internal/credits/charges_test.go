package credits

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// A priced period becomes hourly charges that add up to each line
// exactly: a usage line over its hours by quantity, a fee at its start
// for money only, a line of no money nothing.
func TestChargesOf(t *testing.T) {
	h := func(n int) time.Time { return nov.Add(time.Duration(n) * time.Hour) }
	sku := "H100-SXM5-80GB"
	usage := []pricing.Usage{
		{Hour: h(0), SKU: sku, Meter: pricing.GPUHours, Quantity: d("1")},
		{Hour: h(1), SKU: sku, Meter: pricing.GPUHours, Quantity: d("2")},
		{Hour: h(2), SKU: sku, Meter: pricing.GPUHours, Quantity: d("0")},
		{Hour: h(1), SKU: sku, Meter: "energy_kwh", Quantity: d("5")},
	}
	priced := pricing.Result{Lines: []pricing.Line{
		{Kind: pricing.KindOnDemand, SKU: sku, Meter: pricing.GPUHours, From: nov, To: h(720), Quantity: d("3"), Amount: d("10")},
		{Kind: pricing.KindOnDemand, SKU: sku, Meter: "energy_kwh", From: nov, To: h(720), Quantity: d("5"), Amount: d("0.5")},
		{Kind: pricing.KindReservationFee, SKU: sku, Meter: pricing.GPUHours, From: h(5), To: h(720), Quantity: d("715"), Amount: d("100")},
		{Kind: pricing.KindReserved, SKU: sku, Meter: pricing.GPUHours, From: nov, To: h(720), Quantity: d("2"), Amount: decimal.Zero},
	}}
	got := ChargesOf(priced, usage, decimal.Zero)
	want := []Charge{
		{At: h(0), SKU: sku, Meter: pricing.GPUHours, Quantity: d("1"), Amount: d("3.333333333333333333")},
		{At: h(1), SKU: sku, Meter: pricing.GPUHours, Quantity: d("2"), Amount: d("6.666666666666666667")},
		{At: h(1), SKU: sku, Meter: "energy_kwh", Quantity: d("5"), Amount: d("0.5")},
		{At: h(5), SKU: sku, Quantity: decimal.Zero, Amount: d("100")},
	}
	if len(got) != len(want) {
		t.Fatalf("%d charges, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if !g.At.Equal(w.At) || g.SKU != w.SKU || g.Meter != w.Meter || !g.Quantity.Equal(w.Quantity) || !g.Amount.Equal(w.Amount) {
			t.Errorf("charge %d: %+v, want %+v", i, g, w)
		}
	}
	// The fee is money only: an included grant of GPU-hours leaves it.
	r, err := Burn([]Grant{{ID: "hours", Tenant: "acme", Kind: Included, Amount: d("1000"), Meter: pricing.GPUHours, EffectiveAt: nov}}, got, h(10))
	if err != nil || !r.Uncovered.Equal(d("100.5")) || !r.Balances[0].Used.Equal(d("3")) {
		t.Errorf("included hours used %s, uncovered %s (%v); want 3 and the fee and energy, 100.5", r.Balances[0].Used, r.Uncovered, err)
	}
}
