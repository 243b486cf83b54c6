package billing

import (
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// CostByMeter sums a result's rounded line amounts per meter; lines that
// price no meter (a commitment true-up) go under "".
func CostByMeter(r pricing.Result) map[pricing.Meter]decimal.Decimal {
	out := map[pricing.Meter]decimal.Decimal{}
	for _, l := range r.Lines {
		out[l.Meter] = out[l.Meter].Add(l.AmountRounded)
	}
	return out
}
