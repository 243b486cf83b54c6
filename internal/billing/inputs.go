package billing

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

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
	// Sorting a copy and merging runs of one key is several times faster
	// than a map of sums on the month of hourly rows a tenant has; rows
	// come from the store one per key already, so runs are short.
	rows := slices.Clone(in.Usage)
	slices.SortFunc(rows, func(a, b pricing.Usage) int {
		if c := a.Hour.Compare(b.Hour); c != 0 {
			return c
		}
		if c := strings.Compare(a.SKU, b.SKU); c != 0 {
			return c
		}
		return strings.Compare(string(a.Meter), string(b.Meter))
	})
	h := sha256.New()
	buf := make([]byte, 0, 128)
	// Length-prefixed fields: no two different inputs write the same bytes.
	field := func(s string) {
		buf = strconv.AppendInt(buf[:0], int64(len(s)), 10)
		buf = append(buf, ':')
		buf = append(buf, s...)
		buf = append(buf, ';')
		h.Write(buf)
	}
	field("gpumeter-invoice-inputs-v1")
	field(in.Tenant)
	field(in.Period.Label)
	field(in.Period.Start.UTC().Format(time.RFC3339))
	field(in.Period.End.UTC().Format(time.RFC3339))
	field(in.BookDigest)
	field(in.ContractDigest)
	for i := 0; i < len(rows); {
		r := rows[i]
		sum := r.Quantity
		j := i + 1
		for ; j < len(rows) && rows[j].Hour.Equal(r.Hour) && rows[j].SKU == r.SKU && rows[j].Meter == r.Meter; j++ {
			sum = sum.Add(rows[j].Quantity)
		}
		i = j
		if sum.IsZero() {
			continue
		}
		field(strconv.FormatInt(r.Hour.Unix(), 10))
		field(r.SKU)
		field(string(r.Meter))
		field(sum.String())
	}
	return hex.EncodeToString(h.Sum(nil))
}
