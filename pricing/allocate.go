package pricing

import (
	"errors"
	"fmt"
	"math/big"
	"sort"

	"github.com/shopspring/decimal"
)

// Allocate splits total into len(weights) parts proportional to weights, in
// steps of 10^-minorUnits, by the largest-remainder method: every part gets
// the floor of its exact share, and the units left over go one each to the
// parts with the largest remainders (ties to the lower index). The parts add
// up to total exactly; a negative total is split as its absolute value and
// every part negated. total must already be a whole number of minor units.
func Allocate(total decimal.Decimal, weights []decimal.Decimal, minorUnits int32) ([]decimal.Decimal, error) {
	if minorUnits < 0 || minorUnits > maxPlaces {
		return nil, fmt.Errorf("allocate: minor units %d outside 0..%d", minorUnits, maxPlaces)
	}
	if len(weights) == 0 {
		return nil, errors.New("allocate: no weights")
	}
	if _, err := checkBounds(total); err != nil {
		return nil, fmt.Errorf("allocate: total: %w", err)
	}
	if !total.Truncate(minorUnits).Equal(total) {
		return nil, fmt.Errorf("allocate: total %s has more than %d decimal places", total.String(), minorUnits)
	}
	// Scale weights to integers with one common exponent so all arithmetic
	// below is exact big-integer arithmetic.
	minExp := int32(0)
	for i, w := range weights {
		if w.Sign() < 0 {
			return nil, fmt.Errorf("allocate: weight %d is negative (%s)", i, w.String())
		}
		if _, err := checkBounds(w); err != nil {
			return nil, fmt.Errorf("allocate: weight %d: %w", i, err)
		}
		if e := w.Exponent(); e < minExp && !w.IsZero() {
			minExp = e
		}
	}
	ws := make([]*big.Int, len(weights))
	sum := new(big.Int)
	for i, w := range weights {
		if w.IsZero() {
			ws[i] = new(big.Int)
			continue
		}
		ws[i] = w.Shift(-minExp).BigInt()
		sum.Add(sum, ws[i])
	}
	if sum.Sign() == 0 {
		return nil, errors.New("allocate: weights add up to zero")
	}

	units := total.Shift(minorUnits).BigInt() // exact: checked above
	neg := units.Sign() < 0
	units.Abs(units)

	type share struct {
		i   int
		q   *big.Int
		rem *big.Int
	}
	shares := make([]share, len(ws))
	given := new(big.Int)
	for i, w := range ws {
		q, r := new(big.Int).QuoRem(new(big.Int).Mul(units, w), sum, new(big.Int))
		shares[i] = share{i: i, q: q, rem: r}
		given.Add(given, q)
	}
	left := new(big.Int).Sub(units, given).Int64() // < len(weights): each floor lost less than one unit
	order := make([]int, len(shares))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		return shares[order[a]].rem.Cmp(shares[order[b]].rem) > 0
	})
	for k := int64(0); k < left; k++ {
		s := &shares[order[k]]
		s.q.Add(s.q, big.NewInt(1))
	}
	out := make([]decimal.Decimal, len(shares))
	for i, s := range shares {
		if neg {
			s.q.Neg(s.q)
		}
		out[i] = decimal.NewFromBigInt(s.q, -minorUnits)
	}
	return out, nil
}
