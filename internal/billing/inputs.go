package billing

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// Inputs is what one invoice was priced from. Its Hash is stored on the
// invoice: a re-run whose inputs hash the same changes nothing, and one
// whose usage changed after finalizing becomes an adjustment.
type Inputs struct {
	Tenant         string
	Period         Period
	BookDigest     string // sha256 of the price book file
	ContractDigest string // sha256 of the contract file; empty without one
	Usage          []pricing.Usage
}

// Hash is a sha256 over a canonical form of the inputs: rows of one hour,
// SKU and meter summed (the engine adds them up too), zero rows left out,
// sorted, quantities in their shortest exact form. So the same usage
// hashes alike however the store happened to return or split it.
func (in Inputs) Hash() string {
	type key struct {
		hour  int64
		sku   string
		meter pricing.Meter
	}
	sums := map[key]decimal.Decimal{}
	for _, u := range in.Usage {
		k := key{u.Hour.Unix(), u.SKU, u.Meter}
		sums[k] = sums[k].Add(u.Quantity)
	}
	keys := make([]key, 0, len(sums))
	for k, q := range sums {
		if !q.IsZero() {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.hour != b.hour {
			return a.hour < b.hour
		}
		if a.sku != b.sku {
			return a.sku < b.sku
		}
		return a.meter < b.meter
	})
	h := sha256.New()
	// Length-prefixed fields: no two different inputs write the same bytes.
	field := func(s string) { fmt.Fprintf(h, "%d:%s;", len(s), s) }
	field("gpumeter-invoice-inputs-v1")
	field(in.Tenant)
	field(in.Period.Label)
	field(in.Period.Start.UTC().Format(time.RFC3339))
	field(in.Period.End.UTC().Format(time.RFC3339))
	field(in.BookDigest)
	field(in.ContractDigest)
	for _, k := range keys {
		field(fmt.Sprint(k.hour))
		field(k.sku)
		field(string(k.meter))
		field(sums[k].String())
	}
	return hex.EncodeToString(h.Sum(nil))
}
