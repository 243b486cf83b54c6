package sim_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/collectors/sim/rig"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// The production collector, VM attribution (map file rules and libvirt
// domain XML) and apportioner over simulated vGPU hosts (an A100 and an
// H100, every scheduler policy, MIG-backed vGPU, passthrough, VMs
// starting and stopping inside intervals) book every VM and tenant
// exactly what the simulator's ledger says it ran.
func TestVGPUCollectorMatchesLedger(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.Start, cfg.Seed, cfg.Hosts, cfg.VGPUHosts, cfg.Root = fleetStart, 9, 0, 2, t.TempDir()
	f, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The fleet's map file holds the vm rules; the other VMs' tenants are
	// in their libvirt domain XML.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := rig.New(f, rig.DefaultOptions(), logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	type gpuInterval struct {
		host, gpu string
		start     time.Time
	}
	wall := map[gpuInterval]uint64{}
	byWorkload, byTenant, energy := map[string]uint64{}, map[string]uint64{}, map[string]float64{}
	var totalEnergy uint64
	var samples, vgpuRows int
	app := collectors.AppenderFunc(func(_ context.Context, batch []collectors.Sample) error {
		for _, s := range batch {
			if err := s.Validate(); err != nil {
				return fmt.Errorf("invalid sample %+v: %w", s, err)
			}
			samples++
			if gpucatalog.SKUKind(s.SKU) == gpucatalog.KindVGPU {
				vgpuRows++
			}
			wall[gpuInterval{s.Host, s.GPUUUID, s.Start}] += s.GPUMicroseconds
			if strings.HasPrefix(s.Workload, "vm/") {
				byWorkload[s.Workload] += s.GPUMicroseconds
			}
			byTenant[s.Tenant] += s.GPUMicroseconds
			energy[s.Tenant] += float64(s.EnergyMillijoules)
			totalEnergy += s.EnergyMillijoules
		}
		return nil
	})
	const d = time.Hour
	if err := r.Collect(context.Background(), d, app, logger); err != nil {
		t.Fatal(err)
	}
	led := f.Ledger()

	if want := 2 * 8 * int(d/cfg.Step); len(wall) != want {
		t.Errorf("%d GPU intervals, want %d", len(wall), want)
	}
	for k, us := range wall {
		if us != uint64(cfg.Step/time.Microsecond) {
			t.Errorf("%s %s %s: %d µs allocated + idle, want the interval", k.host, k.gpu, k.start.Format(time.TimeOnly), us)
		}
	}
	for w, us := range led.GPUMicrosecondsByWorkload {
		if byWorkload[w] != us {
			t.Errorf("%s: collector %d µs, simulator %d µs (diff %d)", w, byWorkload[w], us, int64(byWorkload[w])-int64(us))
		}
	}
	for w, us := range byWorkload {
		if _, ok := led.GPUMicrosecondsByWorkload[w]; !ok {
			t.Errorf("%s: collector %d µs, simulator none", w, us)
		}
	}
	for tenant, us := range led.GPUMicroseconds {
		if byTenant[tenant] != us {
			t.Errorf("tenant %q: collector %d µs, simulator %d µs", tenant, byTenant[tenant], us)
		}
		if diff := math.Abs(energy[tenant] - led.EnergyMillijoules[tenant]); diff > float64(led.GPUSteps) {
			t.Errorf("tenant %q: collector %.0f mJ, simulator %.0f mJ", tenant, energy[tenant], led.EnergyMillijoules[tenant])
		}
	}
	if totalEnergy != led.TotalEnergyMillijoules {
		t.Errorf("energy: collector %d mJ, simulator %d mJ", totalEnergy, led.TotalEnergyMillijoules)
	}
	if len(led.GPUMicrosecondsByWorkload) < 20 || led.GPUMicroseconds[collectors.UnattributedTenant] == 0 || vgpuRows == 0 {
		t.Errorf("a thin run: %d VMs, %d µs unattributed, %d vGPU rows", len(led.GPUMicrosecondsByWorkload), led.GPUMicroseconds[collectors.UnattributedTenant], vgpuRows)
	}
	t.Logf("%d samples (%d vGPU rows), %d VMs, tenants %v", samples, vgpuRows, len(led.GPUMicrosecondsByWorkload), byTenant)
}
