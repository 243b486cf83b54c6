package pricing

import (
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// MIGWeight is the one GPU-equivalent table (NVIDIA's compute slices / 7;
// a vGPU type's share, gpucatalog.GPUEquivalent), for Book.WithWeights. SKUs the table does not know are left to the book.
func MIGWeight(sku string) (decimal.Decimal, bool) {
	num, den, ok := gpucatalog.GPUEquivalent(sku)
	if !ok {
		return decimal.Decimal{}, false
	}
	return decimal.NewFromInt(int64(num)).DivRound(decimal.NewFromInt(int64(den)), 18), true
}

// WithMIGTable checks a book against the MIG profile table: SKUs of known
// models must be written as usage writes them (CheckSKU), and weights must
// agree with the table's, which fills in those the book leaves out.
func WithMIGTable(b *Book) (*Book, error) {
	if err := b.CheckSKUs(gpucatalog.CheckSKU); err != nil {
		return nil, err
	}
	return b.WithWeights(MIGWeight)
}
