package sim_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/sim"
)

func newFleet(t *testing.T, seed int64) *sim.Fleet {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Start, cfg.Seed, cfg.Hosts = fleetStart, seed, 4
	f, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFleetIsDeterministicFromItsSeed(t *testing.T) {
	a, b, c := newFleet(t, 3), newFleet(t, 3), newFleet(t, 4)
	for _, f := range []*sim.Fleet{a, b, c} {
		if err := f.AdvanceTo(fleetStart.Add(30 * time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if a.MapFile() != b.MapFile() {
		t.Error("same seed, different map files")
	}
	la, lb, lc := a.Ledger(), b.Ledger(), c.Ledger()
	if !maps.Equal(la.GPUMicroseconds, lb.GPUMicroseconds) || la.TotalEnergyMillijoules != lb.TotalEnergyMillijoules {
		t.Errorf("same seed, different ledgers:\n%v\n%v", la.GPUMicroseconds, lb.GPUMicroseconds)
	}
	if maps.Equal(la.GPUMicroseconds, lc.GPUMicroseconds) {
		t.Error("different seeds, same ledger")
	}
	// NVML answers the same too.
	for i, h := range a.Hosts() {
		ha := h.NVML()
		hb := b.Hosts()[i].NVML()
		for g := 0; g < 8; g++ {
			da, _ := ha.DeviceGetHandleByIndex(g)
			db, _ := hb.DeviceGetHandleByIndex(g)
			ua, _ := da.GetUUID()
			ub, _ := db.GetUUID()
			ea, _ := da.GetTotalEnergyConsumption()
			eb, _ := db.GetTotalEnergyConsumption()
			pa, _ := da.GetComputeRunningProcesses()
			pb, _ := db.GetComputeRunningProcesses()
			if ua != ub || ea != eb || len(pa) != len(pb) {
				t.Fatalf("host %d gpu %d differs: %s/%s %d/%d %d/%d", i, g, ua, ub, ea, eb, len(pa), len(pb))
			}
		}
	}
}

// ledgerTotal is the GPU time of all tenants and idle in l.
func ledgerTotal(l sim.Ledger) uint64 {
	var total uint64
	for _, us := range l.GPUMicroseconds {
		total += us
	}
	return total
}

func TestFleetLedgerAccountsForEveryGPUSecond(t *testing.T) {
	f := newFleet(t, 11)
	if err := f.AdvanceTo(fleetStart.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	l := f.Ledger()
	if total, want := ledgerTotal(l), uint64(4*8*3600*1e6); total != want {
		t.Fatalf("ledger holds %d µs, want 4 hosts × 8 GPUs × 1 h = %d", total, want)
	}
	if l.GPUSteps != 4*8*360 {
		t.Fatalf("%d gpu-steps, want %d", l.GPUSteps, 4*8*360)
	}
	for _, tenant := range []string{"acme", "globex", "initech", "umbrella", ""} {
		if l.GPUMicroseconds[tenant] == 0 {
			t.Errorf("tenant %q ran nothing in an hour", tenant)
		}
	}
	if _, err := attribution.ParseMapping(strings.NewReader(f.MapFile())); err != nil {
		t.Fatalf("map file does not parse: %v", err)
	}
	if !strings.Contains(f.MapFile(), "device MIG-") {
		t.Fatal("no rented MIG instances in the map file")
	}
}

func TestFleetHasTheAdvertisedShape(t *testing.T) {
	f := newFleet(t, 5)
	models := map[string]bool{}
	for _, h := range f.Hosts() {
		models[h.Model()] = true
		migs, mixed := 0, map[string]bool{}
		for _, g := range h.GPUs() {
			for _, in := range g.Instances() {
				migs++
				mixed[strings.SplitN(in.Profile(), ".", 2)[0]] = true
			}
		}
		if migs != 7 || len(mixed) != 4 {
			t.Errorf("%s: %d MIG instances of sizes %v, want 7 of 1g/2g/3g/4g", h.Name(), migs, mixed)
		}
	}
	if len(models) != 4 {
		t.Errorf("models %v, want all four", models)
	}
}

func TestHostRejectsImpossibleMIGLayouts(t *testing.T) {
	newGPU := func(t *testing.T) *sim.GPU {
		h, err := sim.NewHost(sim.HostConfig{Name: "h", Model: "A100-SXM4-40GB", GPUs: 1, Start: fleetStart, Step: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return h.GPU(0)
	}
	cases := []struct {
		name     string
		profiles []string
		want     string
	}{
		{"a profile of another model", []string{"1g.20gb"}, "has no profile"},
		{"more than seven compute slices", []string{"4g.20gb", "4g.20gb"}, "compute slices"},
		{"more than eight memory slots", []string{"3g.20gb", "3g.20gb", "1g.5gb"}, "no placement"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newGPU(t)
			if _, err := g.EnableMIG(tc.profiles...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if len(g.Instances()) != 0 {
				t.Fatalf("a failed layout left %d instances", len(g.Instances()))
			}
		})
	}
	// 3g + 2g + 1g + 1g fits only with the 3g on the upper half: the
	// search finds it where first-fit would not.
	insts, err := newGPU(t).EnableMIG("3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb")
	if err != nil || len(insts) != 4 {
		t.Fatalf("3g+2g+1g+1g: %v", err)
	}
}

func TestHostConfigValidate(t *testing.T) {
	bad := sim.HostConfig{Model: "B200", GPUs: 0, Step: time.Nanosecond}
	err := bad.Validate()
	for _, w := range []string{"name", "model", "gpus", "start", "step"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("err %v lacks %q", err, w)
		}
	}
	if err := (sim.Config{}).Validate(); err == nil {
		t.Error("empty fleet config accepted")
	}
}

func TestLostGPUAnswersGPUIsLost(t *testing.T) {
	h, err := sim.NewHost(sim.HostConfig{Name: "h", Model: "H200-SXM5-141GB", GPUs: 2, Start: fleetStart, Step: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h.GPU(1).Lose()
	d, _ := h.NVML().DeviceGetHandleByIndex(1)
	if _, ret := d.GetTotalEnergyConsumption(); ret != gonvml.ERROR_GPU_IS_LOST {
		t.Fatalf("energy on a lost gpu: %v", ret)
	}
	d0, _ := h.NVML().DeviceGetHandleByIndex(0)
	if name, ret := d0.GetName(); ret != gonvml.SUCCESS || name != "NVIDIA H200" {
		t.Fatalf("other gpu: %q %v", name, ret)
	}
}

func TestClockRunsFasterThanTheWallClock(t *testing.T) {
	f := newFleet(t, 1)
	clock := f.Clock(0)
	began := time.Now()
	if err := clock.WaitUntil(context.Background(), fleetStart.Add(6*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !clock.Now().Equal(fleetStart.Add(6 * time.Hour)) {
		t.Fatalf("clock at %s", clock.Now())
	}
	t.Logf("6 simulated hours of 4 hosts in %s", time.Since(began))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Clock(1).WaitUntil(ctx, fleetStart.Add(7*time.Hour)); err == nil {
		t.Fatal("wait on a cancelled context succeeded")
	}
}
