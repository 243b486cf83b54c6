package meter

import (
	"math/big"

	"github.com/shopspring/decimal"
)

// Priced is a meter a price book prices: a sum of stored meters over a
// divisor, in the unit people read on invoices.
type Priced struct {
	Name    string // in price books and the API, e.g. "gpu_hours"
	Unit    string // on invoices and in prose, e.g. "GPU-hours"
	Label   string // a short column head in reports, e.g. "Energy"
	Noun    string // what is metered, in sentences, e.g. "GPU time"
	Header  string // the usage table's column head, e.g. "ENERGY-KWH"
	Places  int32  // decimals shown in tables
	From    []ID   // the stored meters summed, each divided by Divisor
	Divisor uint64 // stored units per priced unit; below 2^32
}

// Conversions from stored integer units to priced units.
const (
	microsecondsPerHour  = 3_600_000_000
	mibSecondsPerGiBHour = 1024 * 3600
	millijoulesPerKWh    = 3_600_000_000
	bytesPerGiB          = 1 << 30
)

// PricedMeters lists every priced meter in the order lines and columns
// are printed. GPU-hours are GPU-equivalent hours: the collector already
// weights a MIG instance by its compute slices / 7.
var PricedMeters = [...]Priced{
	{Name: "gpu_hours", Unit: "GPU-hours", Label: "GPU-hours", Noun: "GPU time", Header: "GPU-HOURS", Places: 3,
		From: []ID{GPU}, Divisor: microsecondsPerHour},
	{Name: "sm_active_hours", Unit: "SM-active hours", Label: "SM-active hours", Noun: "SM-active time", Header: "SM-ACTIVE-H", Places: 3,
		From: []ID{SMActive}, Divisor: microsecondsPerHour},
	{Name: "memory_gib_hours", Unit: "GiB-hours", Label: "Memory", Noun: "GPU memory", Header: "MEM-GIB-H", Places: 1,
		From: []ID{Memory}, Divisor: mibSecondsPerGiBHour},
	{Name: "energy_kwh", Unit: "kWh", Label: "Energy", Noun: "energy", Header: "ENERGY-KWH", Places: 3,
		From: []ID{Energy}, Divisor: millijoulesPerKWh},
	{Name: "pcie_gib", Unit: "GiB", Label: "PCIe", Noun: "PCIe traffic", Header: "PCIE-GIB", Places: 2,
		From: []ID{PCIeTx, PCIeRx}, Divisor: bytesPerGiB},
	{Name: "nvlink_gib", Unit: "GiB", Label: "NVLink", Noun: "NVLink traffic", Header: "NVLINK-GIB", Places: 2,
		From: []ID{NVLinkTx, NVLinkRx}, Divisor: bytesPerGiB},
}

// NumPriced is the number of priced meters.
const NumPriced = len(PricedMeters)

// LookupPriced returns the priced meter named name.
func LookupPriced(name string) (Priced, bool) {
	for _, p := range PricedMeters {
		if p.Name == name {
			return p, true
		}
	}
	return Priced{}, false
}

// Quantity is v's quantity of p, an exact decimal (pricing rounds once
// per invoice line, later).
func (v Values) Quantity(p Priced) decimal.Decimal {
	q := decimal.Zero
	for i, id := range p.From {
		r := ratio(v.Get(id), p.Divisor)
		if i == 0 {
			q = r
		} else {
			q = q.Add(r)
		}
	}
	return q
}

// GPUHours is GPU-microseconds as GPU-equivalent hours.
func GPUHours(microseconds uint64) decimal.Decimal { return ratio(microseconds, microsecondsPerHour) }

// Totals are the summed meters of a usage row (MemPeakBytes the maximum,
// not a sum) plus, per Unmeasured group, the GPU time without that
// measurement.
type Totals struct {
	Values
	Unmeasured UnmeasuredTime
}

// Add sums two totals (peak by maximum).
func (t Totals) Add(o Totals) Totals {
	return Totals{Values: t.Values.Add(o.Values), Unmeasured: t.Unmeasured.Add(o.Unmeasured)}
}

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

// GPUHours is v's GPU time as GPU-equivalent hours, the meter quotas,
// reservations and forecasts count in.
func (v Values) GPUHours() decimal.Decimal { return GPUHours(v.GPUMicroseconds) }
