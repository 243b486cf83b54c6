package insights

import (
	"sort"

	"github.com/shopspring/decimal"
)

var (
	half = decimal.New(5, -1)
	// madToSigma turns a median absolute deviation into a standard
	// deviation for normal data (1/Φ⁻¹(3/4)).
	madToSigma = decimal.RequireFromString("1.4826")
)

// divPlaces is the precision of every quotient: far below any minor unit.
const divPlaces = 18

// median of vals (not changed); zero for none.
func median(vals []decimal.Decimal) decimal.Decimal {
	if len(vals) == 0 {
		return decimal.Zero
	}
	s := make([]decimal.Decimal, len(vals))
	copy(s, vals)
	sort.Slice(s, func(i, j int) bool { return s[i].LessThan(s[j]) })
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return s[n/2-1].Add(s[n/2]).Mul(half)
}

// mad is the median absolute deviation of vals from m.
func mad(vals []decimal.Decimal, m decimal.Decimal) decimal.Decimal {
	d := make([]decimal.Decimal, len(vals))
	for i, v := range vals {
		d[i] = v.Sub(m).Abs()
	}
	return median(d)
}
