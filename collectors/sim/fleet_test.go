package sim_test

import (
	"context"
	"log/slog"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/collectors/sim"
)

var fleetStart = time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)

// runFleet runs the collector over a simulated fleet for d and returns
// what it appended.
func runFleet(t *testing.T, cfg sim.Config, d time.Duration) (*sim.Fleet, []collectors.Sample) {
	t.Helper()
	f, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := attribution.ParseMapping(strings.NewReader(f.MapFile()))
	if err != nil {
		t.Fatal(err)
	}
	tenancy := attribution.Tenancy{Mapping: m, NamespaceIsTenant: true, AccountIsTenant: true}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var hosts []collectors.Host
	for _, h := range f.Hosts() {
		src, err := nvml.New(h.NVML(), nvml.DefaultConfig(), logger, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		cg, err := attribution.NewCgroup(attribution.CgroupConfig{ProcRoot: h.ProcRoot(), PodLogDir: h.PodLogDir()}, tenancy, logger)
		if err != nil {
			t.Fatal(err)
		}
		chain := attribution.NewChain(logger,
			attribution.Step{Name: "cgroup", Attributor: cg},
			attribution.Step{Name: "static", Attributor: attribution.NewStatic(m)})
		hosts = append(hosts, collectors.Host{Name: h.Name(), Sources: []collectors.NamedSource{{Name: "nvml", Source: src}}, Attributor: chain})
	}
	var out []collectors.Sample
	app := collectors.AppenderFunc(func(_ context.Context, s []collectors.Sample) error {
		out = append(out, s...)
		return nil
	})
	loop, err := collectors.NewLoop(collectors.LoopConfig{Interval: cfg.Step, Until: f.Start().Add(d)}, hosts, attribution.Apportion, app, f.Clock(0), logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := loop.Run(context.Background()); err != nil {
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
