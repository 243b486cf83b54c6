package billing

import (
	"testing"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

func TestCostByMeterSumsRoundedLines(t *testing.T) {
	d := decimal.RequireFromString
	r := pricing.Result{Lines: []pricing.Line{
		{Meter: pricing.GPUHours, AmountRounded: d("10.01")},
		{Meter: pricing.GPUHours, AmountRounded: d("2.50")},
		{Meter: pricing.Meter("energy_kwh"), AmountRounded: d("0.33")},
		{AmountRounded: d("100.00")}, // a commitment true-up prices no meter
	}}
	got := CostByMeter(r)
	for m, want := range map[pricing.Meter]string{pricing.GPUHours: "12.51", pricing.Meter("energy_kwh"): "0.33", "": "100"} {
		if !got[m].Equal(d(want)) {
			t.Errorf("%q: %s, want %s", m, got[m], want)
		}
	}
	if len(got) != 3 {
		t.Errorf("meters %v, want 3", got)
	}
}
