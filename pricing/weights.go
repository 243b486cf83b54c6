package pricing

import (
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors/migprofile"
)

// MIGWeight is the one GPU-equivalent table (NVIDIA's compute slices / 7),
// for Book.WithWeights. SKUs the table does not know are left to the book.
func MIGWeight(sku string) (decimal.Decimal, bool) {
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
