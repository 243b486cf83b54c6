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

// storageIntDigits is what Decimal(38, StoragePlaces) leaves for the
// integer part of an amount.
const storageIntDigits = 38 - StoragePlaces

// fitsStorage reports whether d fits Decimal(38, StoragePlaces) once
// rounded to StoragePlaces.
func fitsStorage(d decimal.Decimal) bool {
	return d.Abs().LessThan(decimal.New(1, storageIntDigits))
}

// Currency is a book's currency and its rounding rule.
type Currency struct {
	Code       string       `json:"code"`        // ISO 4217, e.g. "USD"
	MinorUnits int32        `json:"minor_units"` // decimal places of the minor unit: 2 for USD, 0 for JPY
	Rounding   RoundingMode `json:"rounding"`    // how ties round
}

// Quantize rounds an exact amount to StoragePlaces with the currency's
// rounding mode. The quantized value is the amount: it is what invoices
// store (Decimal(38, 9)), and every minor-unit figure is rounded from it.
func (c Currency) Quantize(exact decimal.Decimal) decimal.Decimal {
	return c.roundTo(exact, StoragePlaces)
}

// Round rounds d to the currency's minor unit with its rounding mode, from
// d's quantized value (Quantize): the engine, the stored 9-place amount and
// every later check then round the same value the same way. Rounding the
// exact value instead would split on amounts such as 30.2949999996, which
// is 30.29 in cents but 30.295000000 as stored, and 30.30 from there.
func (c Currency) Round(d decimal.Decimal) decimal.Decimal {
	return c.roundTo(c.Quantize(d), c.MinorUnits)
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
	switch {
	case !isThreeLetters(c.Code):
		ps.add(p.key("code"), "want a three-letter ISO 4217 code such as USD, got %q", c.Code)
	case !IsCurrencyCode(c.Code):
		ps.add(p.key("code"), "%q is not an ISO 4217 currency code (such as USD, EUR or JPY)", c.Code)
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

// isoCurrencies are ISO 4217's active currency codes (2025), without the
// precious metals, funds and testing codes: a book prices in money.
const isoCurrencies = "AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL " +
	"BSD BTN BWP BYN BZD CAD CDF CHF CLP CNY COP CRC CUC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD " +
	"FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR " +
	"KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR " +
	"MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK " +
	"SGD SHP SLE SLL SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD UYU UZS " +
	"VED VES VND VUV WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG"

func isThreeLetters(s string) bool {
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

// IsCurrencyCode reports whether s is an ISO 4217 code in use.
func IsCurrencyCode(s string) bool {
	if !isThreeLetters(s) {
		return false
	}
	// Every code is three letters and a space apart, so a match on a
	// multiple of four is a whole code.
	for i := 0; i+3 <= len(isoCurrencies); i += 4 {
		if isoCurrencies[i:i+3] == s {
			return true
		}
	}
	return false
}

// Amount shows a price or an amount with the currency's places, or more
// where its digits need them ("1.80", "9.75", "0.125").
func (c Currency) Amount(d decimal.Decimal) string {
	p := c.MinorUnits
	for p < -d.Exponent() && !d.Equal(d.Round(p)) {
		p++
	}
	return d.StringFixed(p)
}
