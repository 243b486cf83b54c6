package reports

import (
	"testing"

	"github.com/gpumeter/gpumeter/internal/chargeback"
)

// TestEfficiencyViews: shares are over measured time, "n/m" when nothing
// was measured (not 0 %), and the largest sums the insights allow format
// without overflowing.
func TestEfficiencyViews(t *testing.T) {
	got := efficiencyViews([]chargeback.EfficiencyRow{
		{Department: "ops", HeldGPUMicros: 7_200_000_000, MeasuredGPUMicros: 3_600_000_000, UnmeasuredGPUMicros: 3_600_000_000, SMActiveMicros: 900_000_000, IdleGPUMicros: 1_800_000_000},
		{Department: "ops", Tenant: "vgpu", HeldGPUMicros: 3_600_000_000, UnmeasuredGPUMicros: 3_600_000_000},
		{Department: "big", Tenant: "huge", HeldGPUMicros: 1 << 62, MeasuredGPUMicros: 1 << 62, IdleGPUMicros: 1 << 61},
	})
	want := []chargebackEfficiencyView{
		{Name: "ops", Held: "2.000", Utilization: "25.0 %", Unmeasured: "1.000", Idle: "0.500", IdleShare: "50.0 %", UtilBar: "25.0", Department: true},
		{Name: "vgpu", Held: "1.000", Utilization: notMeasured, Unmeasured: "1.000", Idle: "0.000", IdleShare: notMeasured},
		{Name: "huge", Held: "1281023894.008", Utilization: "0.0 %", Unmeasured: "0.000", Idle: "640511947.004", IdleShare: "50.0 %", UtilBar: "0.0"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
