package sim_test

import (
	"context"
	"log/slog"
	"math"
	"os"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/collectors/sim/rig"
)

var fleetStart = time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)

// runFleet runs the collector over a simulated fleet for d and returns
// what it appended.
func runFleet(t *testing.T, cfg sim.Config, d time.Duration) (*sim.Fleet, []collectors.Sample) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f, out, err := rig.Simulate(context.Background(), cfg, rig.DefaultOptions(), d, logger)
	if err != nil {
		t.Fatal(err)
	}
	return f, out
}

func TestFleetCollectorMatchesLedger(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.Start = fleetStart
	cfg.Seed = 7
	cfg.Root = t.TempDir()
	f, samples := runFleet(t, cfg, 2*time.Hour)
	led := f.Ledger()

	got := map[string]uint64{}
	energy := map[string]float64{}
	var totalEnergy uint64
	for _, s := range samples {
		if err := s.Validate(); err != nil {
			t.Fatalf("invalid sample %+v: %v", s, err)
		}
		got[s.Tenant] += s.GPUMicroseconds
		energy[s.Tenant] += float64(s.EnergyMillijoules)
		totalEnergy += s.EnergyMillijoules
	}
	for _, tenant := range led.Tenants() {
		if got[tenant] != led.GPUMicroseconds[tenant] {
			t.Errorf("tenant %q: collector %d µs, simulator %d µs (diff %d)", tenant, got[tenant], led.GPUMicroseconds[tenant], int64(got[tenant])-int64(led.GPUMicroseconds[tenant]))
		}
		if diff := math.Abs(energy[tenant] - led.EnergyMillijoules[tenant]); diff > float64(led.GPUSteps) {
			t.Errorf("tenant %q: collector %.0f mJ, simulator %.0f mJ", tenant, energy[tenant], led.EnergyMillijoules[tenant])
		}
	}
	for tenant := range got {
		if _, ok := led.GPUMicroseconds[tenant]; !ok {
			t.Errorf("tenant %q: collector %d µs, simulator none", tenant, got[tenant])
		}
	}
	if totalEnergy != led.TotalEnergyMillijoules {
		t.Errorf("energy: collector %d mJ, simulator %d mJ", totalEnergy, led.TotalEnergyMillijoules)
	}
	t.Logf("tenants %v, samples %d", got, len(samples))
}
