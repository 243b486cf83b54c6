package pricing

import "github.com/gpumeter/gpumeter/internal/fault"

// Meter names a metered quantity. Quantities arrive as hourly totals in the
// meter's unit.
type Meter string

// The meters a price book can price. GPUHours are GPU-equivalent hours: the
// collector already weights a MIG instance by its compute slices / 7, so the
// engine never applies a SKU weight to them again.
const (
	GPUHours       Meter = "gpu_hours"
	SMActiveHours  Meter = "sm_active_hours"
	MemoryGiBHours Meter = "memory_gib_hours"
	EnergyKWh      Meter = "energy_kwh"
	PCIeGiB        Meter = "pcie_gib"
	NVLinkGiB      Meter = "nvlink_gib"
)

const numMeters = 6

// Meters returns every meter in the order lines are printed.
func Meters() []Meter {
	return []Meter{GPUHours, SMActiveHours, MemoryGiBHours, EnergyKWh, PCIeGiB, NVLinkGiB}
}

// index gives the meter's slot in per-SKU arrays; a switch keeps the hot
// path free of map lookups.
func (m Meter) index() (int, bool) {
	switch m {
	case GPUHours:
		return 0, true
	case SMActiveHours:
		return 1, true
	case MemoryGiBHours:
		return 2, true
	case EnergyKWh:
		return 3, true
	case PCIeGiB:
		return 4, true
	case NVLinkGiB:
		return 5, true
	}
	return 0, false
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
