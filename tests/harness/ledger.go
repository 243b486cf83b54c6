package harness

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// SimulatedLedger is what `collect --simulate` with seed and hosts (8 GPUs
// each, 10 s steps) runs over [start, start+d): the ledger of a fleet
// built the same way.
func SimulatedLedger(t testing.TB, seed int64, hosts int, start time.Time, d time.Duration) sim.Ledger {
	t.Helper()
	fleet, err := sim.New(sim.Config{Hosts: hosts, GPUsPerHost: 8, Seed: seed, Start: start, Step: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := fleet.AdvanceTo(start.Add(d)); err != nil {
		t.Fatal(err)
	}
	return fleet.Ledger()
}

// AssertStoredMatchesSimulator compares what ClickHouse holds for [start,
// start+d) with the ledger of a simulated fleet built the same way: GPU
// time per tenant exactly, energy within rounding, nothing counted twice.
func AssertStoredMatchesSimulator(t testing.TB, dsn string, seed int64, hosts int, start time.Time, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	s := OpenStore(t, dsn)
	rows, err := s.Usage(ctx, usage.Query{
		From: start, To: start.Add(d),
		GroupBy: []usage.Dimension{usage.DimTenant}, Source: usage.SourceRaw,
	})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]meter.Totals{}
	var storedEnergy uint64
	for _, r := range rows {
		stored[r.Tenant] = r.Totals
		storedEnergy += r.EnergyMillijoules
	}

	ledger := SimulatedLedger(t, seed, hosts, start, d)
	if len(ledger.Tenants()) < 5 {
		t.Fatalf("simulated hour ran only %v", ledger.Tenants())
	}
	var total uint64
	for _, tenant := range ledger.Tenants() {
		want := ledger.GPUMicroseconds[tenant]
		total += want
		got := stored[tenant]
		if got.GPUMicroseconds != want {
			t.Errorf("tenant %q: stored %d gpu-µs, simulator ran %d (diff %d)", tenant, got.GPUMicroseconds, want, int64(got.GPUMicroseconds)-int64(want))
		}
		// Energy: the collector splits in integers, the ledger in floats;
		// at most a millijoule per GPU and interval apart.
		if diff := math.Abs(float64(got.EnergyMillijoules) - ledger.EnergyMillijoules[tenant]); diff > float64(ledger.GPUSteps) {
			t.Errorf("tenant %q: stored %d mJ, simulator %.1f mJ", tenant, got.EnergyMillijoules, ledger.EnergyMillijoules[tenant])
		}
	}
	for tenant := range stored {
		if _, ok := ledger.GPUMicroseconds[tenant]; !ok {
			t.Errorf("stored tenant %q the simulator never ran", tenant)
		}
	}
	if want := uint64(hosts) * 8 * uint64(d/time.Microsecond); total != want {
		t.Errorf("ledger holds %d gpu-µs, want %d", total, want)
	}
	t.Logf("stored gpu-µs by tenant: %v", func() map[string]uint64 {
		m := map[string]uint64{}
		for k, v := range stored {
			m[k] = v.GPUMicroseconds
		}
		return m
	}())
	if storedEnergy != ledger.TotalEnergyMillijoules {
		t.Errorf("stored energy %d mJ, simulator's counters %d mJ", storedEnergy, ledger.TotalEnergyMillijoules)
	}
}
