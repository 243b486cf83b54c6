package pricing

import (
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// Meter names a priced meter of the meter table (meter.PricedMeters),
// e.g. "gpu_hours". Quantities arrive as hourly totals in the meter's
// unit.
type Meter string

// GPUHours are GPU-equivalent hours: the collector already weights a MIG
// instance by its compute slices / 7, so the engine never applies a SKU
// weight to them again. Reservations, burst and quotas count them, which
// is why this one meter has a name here (pinned to the table by a test).
const GPUHours Meter = "gpu_hours"

const numMeters = meter.NumPriced

// Meters returns every meter in the order lines are printed.
func Meters() []Meter {
	out := make([]Meter, numMeters)
	for i, p := range meter.PricedMeters {
		out[i] = Meter(p.Name)
	}
	return out
}

// index gives the meter's slot in per-SKU arrays (its place in the meter
// table).
func (m Meter) index() (int, bool) {
	for i := range meter.PricedMeters {
		if meter.PricedMeters[i].Name == string(m) {
			return i, true
		}
	}
	return 0, false
}

// Spec is the meter's row of the meter table; the zero Priced for an
// unknown meter.
func (m Meter) Spec() meter.Priced {
	if i, ok := m.index(); ok {
		return meter.PricedMeters[i]
	}
	return meter.Priced{}
}

// UsageOf is one hour's stored meters of a SKU as the engine's usage, one
// row per priced meter with a non-zero quantity.
func UsageOf(hour time.Time, sku string, v meter.Values) []Usage {
	var out []Usage
	for i := range meter.PricedMeters {
		if q := v.Quantity(meter.PricedMeters[i]); !q.IsZero() {
			out = append(out, Usage{Hour: hour, SKU: sku, Meter: Meter(meter.PricedMeters[i].Name), Quantity: q})
		}
	}
	return out
}

// ParseMeter returns the meter named s, or an error listing the known ones.
func ParseMeter(s string) (Meter, error) {
	m := Meter(s)
	if _, ok := m.index(); !ok {
		return "", fault.Validationf("unknown meter %q (known: %s)", s, meterList())
	}
	return m, nil
}

func meterList() string {
	s := ""
	for i, m := range Meters() {
		if i > 0 {
			s += ", "
		}
		s += string(m)
	}
	return s
}
