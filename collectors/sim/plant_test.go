package sim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// plantedConfig is one H100 host of 16 GPUs with all three plants, the
// spike in the second hour.
func plantedConfig(t *testing.T) sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Start, cfg.Hosts, cfg.GPUsPerHost, cfg.Step, cfg.Root = fleetStart, 1, 16, time.Minute, t.TempDir()
	cfg.Plants = &sim.Plants{Hoarder: "hoarder", HoardGPUs: 1, OversizedMIG: "bigmig", Spike: "spiky", SpikeAt: fleetStart.Add(time.Hour), SpikeGPUs: 6}
	return cfg
}

func TestPlantsAreWhatTheCollectorSees(t *testing.T) {
	cfg := plantedConfig(t)
	const d = 3 * time.Hour
	f, samples := runFleet(t, cfg, d)
	type acc struct {
		gpuUs, smUs uint64
		memPeak     uint64
		gpus        map[string]bool
		skus        map[string]bool
		hours       map[time.Time]uint64 // GPU µs by hour
		unmeasured  int
	}
	by := map[string]*acc{}
	for _, s := range samples {
		a := by[s.Tenant]
		if a == nil {
			a = &acc{gpus: map[string]bool{}, skus: map[string]bool{}, hours: map[time.Time]uint64{}}
			by[s.Tenant] = a
		}
		a.gpuUs += s.GPUMicroseconds
		a.smUs += s.SMActiveMicroseconds
		a.memPeak = max(a.memPeak, s.MemPeakBytes)
		a.gpus[s.GPUUUID+"/"+s.MIGUUID] = true
		a.skus[s.SKU] = true
		a.hours[s.Start.Truncate(time.Hour)] += s.GPUMicroseconds
		if s.Unmeasured.Has(meter.UnmeasuredSMActive) {
			a.unmeasured++
		}
	}
	step := uint64(cfg.Step / time.Microsecond)
	steps := uint64(d / cfg.Step)

	h := by["hoarder"]
	if h == nil || len(h.gpus) != 1 || !h.skus["H100-SXM5-80GB"] || h.gpuUs != steps*step || h.unmeasured != 0 {
		t.Fatalf("hoarder: %+v", h)
	}
	if frac := float64(h.smUs) / float64(h.gpuUs); frac > 0.01 {
		t.Errorf("hoarder: SM activity %.3f of the time held, want at most 1 %%", frac)
	}

	b := by["bigmig"]
	if b == nil || len(b.skus) != 1 || !b.skus["H100-SXM5-80GB/7g.80gb"] || b.unmeasured != 0 {
		t.Fatalf("oversized MIG tenant: %+v", b)
	}
	if b.memPeak > 6<<30 || b.memPeak < 5<<30 {
		t.Errorf("oversized MIG tenant: memory peak %d, want 6 GiB", b.memPeak)
	}
	if frac := float64(b.smUs) / float64(b.gpuUs); frac < 0.08 || frac > 0.125 {
		t.Errorf("oversized MIG tenant: SM activity %.3f, want 8 to 12 %%", frac)
	}

	// All of the spike's GPU time is in its hour (the collector may write
	// a row of no GPU time for the step before, when it first sees the
	// processes).
	sp := by["spiky"]
	if sp == nil || len(sp.gpus) != 6 {
		t.Fatalf("spike tenant: %+v", sp)
	}
	hour := uint64(time.Hour / time.Microsecond)
	if sp.gpuUs != 6*hour || sp.hours[fleetStart.Add(time.Hour)] != 6*hour {
		t.Errorf("spike tenant: %d µs by hour %v, want 6 GPU-hours, all in the second hour", sp.gpuUs, sp.hours)
	}

	led := f.Ledger()
	for _, tenant := range []string{"hoarder", "bigmig", "spiky"} {
		if led.GPUMicroseconds[tenant] != by[tenant].gpuUs {
			t.Errorf("%s: ledger %d µs, collector %d µs", tenant, led.GPUMicroseconds[tenant], by[tenant].gpuUs)
		}
	}
	// The fleet's own tenants still run on the other GPUs.
	for _, tenant := range []string{"acme", "globex", "initech", "umbrella"} {
		if by[tenant] == nil || by[tenant].gpuUs == 0 {
			t.Errorf("%s ran nothing", tenant)
		}
	}
	if !strings.Contains(f.MapFile(), "namespace hoarder hoarder plants") {
		t.Errorf("map file lacks the planted tenants:\n%s", f.MapFile())
	}
}

func TestEmptyPlantsPlantNothing(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.Start, cfg.Root = fleetStart, t.TempDir()
	_, a := runFleet(t, cfg, 30*time.Minute)
	cfg.Plants, cfg.Root = &sim.Plants{}, t.TempDir() // empty plants: nothing planted
	_, b := runFleet(t, cfg, 30*time.Minute)
	if len(a) != len(b) {
		t.Fatalf("%d samples without plants, %d with empty plants", len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.ID != y.ID || x.Tenant != y.Tenant || x.Values != y.Values {
			t.Fatalf("sample %d differs: %+v vs %+v", i, x, y)
		}
	}
}

func TestPlantsValidate(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.Start = fleetStart
	cases := []struct {
		name   string
		gpus   int
		plants sim.Plants
		want   []string
	}{
		{"too many whole GPUs", 8, sim.Plants{Hoarder: "h", HoardGPUs: 2, Spike: "s", SpikeGPUs: 3, SpikeAt: fleetStart}, []string{"5 whole GPUs planted, the plant host has 4"}},
		{"counts and times", 8, sim.Plants{Hoarder: "h", Spike: "s", SpikeAt: fleetStart.Add(time.Minute)}, []string{"hoard gpus 0", "spike gpus 0", "not a whole hour"}},
		{"spike before start", 8, sim.Plants{Spike: "s", SpikeGPUs: 1, SpikeAt: fleetStart.Add(-time.Hour)}, []string{"before the fleet starts"}},
		{"no MIG GPU", 2, sim.Plants{OversizedMIG: "m"}, []string{"needs a MIG GPU"}},
		{"taken names", 8, sim.Plants{Hoarder: "acme", HoardGPUs: 1, OversizedMIG: "acme-hpc", Spike: "guest", SpikeGPUs: 1, SpikeAt: fleetStart}, []string{`"acme" is taken`, `"acme-hpc" is taken`, `"guest" is taken`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.GPUsPerHost = tc.gpus
			p := tc.plants
			c.Plants = &p
			err := c.Validate()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}
