package pricing

import (
	"github.com/shopspring/decimal"
)

// RoundingMode says how a tie (exactly half a minor unit) is broken.
type RoundingMode string

const (
	// HalfAwayFromZero rounds 0.125 to 0.13 and -0.125 to -0.13 (the default;
	// what most invoicing and tax rules expect).
	HalfAwayFromZero RoundingMode = "half_away_from_zero"
	// HalfEven rounds ties to the even neighbour, 0.125 to 0.12 and 0.135 to
	// 0.14 (banker's rounding; no upward bias over many lines).
	HalfEven RoundingMode = "half_even"
)

// StoragePlaces is the precision of full-precision amounts: invoices store
// money as Decimal(38, 9).
const StoragePlaces = 9

// Currency is a book's currency and its rounding rule.
type Currency struct {
	Code       string       `json:"code"`        // ISO 4217, e.g. "USD"
	MinorUnits int32        `json:"minor_units"` // decimal places of the minor unit: 2 for USD, 0 for JPY
	Rounding   RoundingMode `json:"rounding"`    // how ties round
}

// Round rounds d to the currency's minor unit with its rounding mode.
func (c Currency) Round(d decimal.Decimal) decimal.Decimal {
	return c.roundTo(d, c.MinorUnits)
}

func (c Currency) roundTo(d decimal.Decimal, places int32) decimal.Decimal {
	if c.Rounding == HalfEven {
		return d.RoundBank(places)
	}
	return d.Round(places)
}

// Allocate splits total into parts proportional to weights that add up to
// total exactly, in the currency's minor units (see Allocate).
func (c Currency) Allocate(total decimal.Decimal, weights []decimal.Decimal) ([]decimal.Decimal, error) {
	return Allocate(total, weights, c.MinorUnits)
}

func (c Currency) validate(ps *problems, p path) {
	if !isCurrencyCode(c.Code) {
		ps.add(p.key("code"), "want a three-letter ISO 4217 code such as USD, got %q", c.Code)
	}
	if c.MinorUnits < 0 || c.MinorUnits > StoragePlaces {
		ps.add(p.key("rounding").key("minor_units"), "must be between 0 and %d, got %d", StoragePlaces, c.MinorUnits)
	}
	switch c.Rounding {
	case HalfAwayFromZero, HalfEven:
	default:
		ps.add(p.key("rounding").key("mode"), "unknown rounding mode %q (want %s or %s)", c.Rounding, HalfAwayFromZero, HalfEven)
	}
}

func isCurrencyCode(s string) bool {
	if len(s) != 3 {
		return false
	}
	for _, r := range s {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}
