package store

import (
	"time"

	"github.com/gpumeter/gpumeter/pricing"
	"github.com/shopspring/decimal"
)

// Conversions from stored integer units to the meters of the price book.
// They are exact decimals: pricing rounds once per invoice line, later.
var (
	microsecondsPerHour  = decimal.NewFromInt(3_600_000_000)
	mibSecondsPerGiBHour = decimal.NewFromInt(1024 * 3600)
	millijoulesPerKWh    = decimal.NewFromInt(3_600_000_000)
	bytesPerGiB          = decimal.NewFromInt(1 << 30)
)

// divisionPrecision keeps quotients exact to well below any minor unit.
const divisionPrecision = 18

func ratio(n uint64, d decimal.Decimal) decimal.Decimal {
	return decimal.NewFromUint64(n).DivRound(d, divisionPrecision)
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
