package store

import (
	"math/big"
	"time"

	"github.com/gpumeter/gpumeter/pricing"
	"github.com/shopspring/decimal"
)

// Conversions from stored integer units to the meters of the price book.
// They are exact decimals: pricing rounds once per invoice line, later.
const (
	microsecondsPerHour  = 3_600_000_000
	mibSecondsPerGiBHour = 1024 * 3600
	millijoulesPerKWh    = 3_600_000_000
	bytesPerGiB          = 1 << 30
)

// divisionPrecision keeps quotients exact to well below any minor unit.
const divisionPrecision = 18

// ratio is n/d rounded half up at 18 places: what
// decimal.NewFromUint64(n).DivRound(d, 18) gives, in integer arithmetic.
// An invoice run converts millions of hourly rows, and big-number
// division was most of its time. d must be below 2^32, so that every
// remainder times 10^9 fits in 64 bits.
func ratio(n uint64, d uint64) decimal.Decimal {
	const e9 = 1_000_000_000
	whole, rem := n/d, n%d
	f1, r1 := rem*e9/d, rem*e9%d
	f2, r2 := r1*e9/d, r1*e9%d
	if 2*r2 >= d {
		if f2++; f2 == e9 {
			f2 = 0
			if f1++; f1 == e9 {
				f1 = 0
				whole++
			}
		}
	}
	frac := f1*e9 + f2
	const e18 = e9 * e9
	if whole < 9 { // whole*10^18 + frac fits in an int64
		return decimal.New(int64(whole*e18+frac), -divisionPrecision)
	}
	v := new(big.Int).SetUint64(whole)
	v.Mul(v, big.NewInt(e18))
	v.Add(v, new(big.Int).SetUint64(frac))
	return decimal.NewFromBigInt(v, -divisionPrecision)
}

// GPUHours is GPU-equivalent hours held.
func (m Meters) GPUHours() decimal.Decimal { return ratio(m.GPUMicroseconds, microsecondsPerHour) }

// SMActiveHours is GPU-equivalent hours with the SMs busy.
func (m Meters) SMActiveHours() decimal.Decimal {
	return ratio(m.SMActiveMicroseconds, microsecondsPerHour)
}

// MemoryGiBHours is framebuffer memory held, integrated over time.
func (m Meters) MemoryGiBHours() decimal.Decimal { return ratio(m.MemMiBSeconds, mibSecondsPerGiBHour) }

// EnergyKWh is energy attributed.
func (m Meters) EnergyKWh() decimal.Decimal { return ratio(m.EnergyMillijoules, millijoulesPerKWh) }

// PCIeGiB is PCIe traffic, both directions.
func (m Meters) PCIeGiB() decimal.Decimal {
	return ratio(m.PCIeTxBytes, bytesPerGiB).Add(ratio(m.PCIeRxBytes, bytesPerGiB))
}

// NVLinkGiB is NVLink traffic, both directions.
func (m Meters) NVLinkGiB() decimal.Decimal {
	return ratio(m.NVLinkTxBytes, bytesPerGiB).Add(ratio(m.NVLinkRxBytes, bytesPerGiB))
}

// PricingUsage is the row as the pricing engine's hourly usage, one row
// per meter with a non-zero quantity.
func (m Meters) PricingUsage(hour time.Time, sku string) []pricing.Usage {
	var out []pricing.Usage
	for _, q := range []struct {
		meter pricing.Meter
		qty   decimal.Decimal
	}{
		{pricing.GPUHours, m.GPUHours()}, {pricing.SMActiveHours, m.SMActiveHours()},
		{pricing.MemoryGiBHours, m.MemoryGiBHours()}, {pricing.EnergyKWh, m.EnergyKWh()},
		{pricing.PCIeGiB, m.PCIeGiB()}, {pricing.NVLinkGiB, m.NVLinkGiB()},
	} {
		if !q.qty.IsZero() {
			out = append(out, pricing.Usage{Hour: hour, SKU: sku, Meter: q.meter, Quantity: q.qty})
		}
	}
	return out
}
