package main

import (
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/migprofile"
)

// migWeight is the one GPU-equivalent table (NVIDIA's compute slices / 7)
// handed to pricing, which may not import internal packages itself. SKUs
// the table does not know are left to the price book.
func migWeight(sku string) (decimal.Decimal, bool) {
	num, den, ok := migprofile.GPUEquivalent(sku)
	if !ok {
		return decimal.Decimal{}, false
	}
	if model, profile := migprofile.ParseSKU(sku); profile != "" {
		if _, known := migprofile.Lookup(model, profile); !known {
			return decimal.Decimal{}, false
		}
	}
	return decimal.NewFromInt(int64(num)).DivRound(decimal.NewFromInt(int64(den)), 18), true
}
