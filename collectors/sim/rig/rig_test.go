package rig

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors/sim"
)

// Every GPU interval of the rig's samples adds up to the interval: the
// collector it builds books each GPU-second once, allocated or idle.
func TestRigBooksEveryGPUSecond(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.Hosts, cfg.GPUsPerHost, cfg.Seed, cfg.Root = 2, 4, 3, t.TempDir()
	cfg.Start = time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	f, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	r, err := New(f, DefaultOptions(), logger)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if len(r.Hosts) != 2 || r.GPUs != 8 {
		t.Fatalf("%d hosts, %d GPUs; want 2 and 8", len(r.Hosts), r.GPUs)
	}
	const d = 2 * time.Minute
	samples, err := r.Samples(context.Background(), d, logger)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		gpu   string
		start time.Time
	}
	wall := map[key]uint64{}
	tenants := 0
	for _, s := range samples {
		wall[key{s.GPUUUID, s.Start}] += s.GPUMicroseconds
		if s.Tenant != "" {
			tenants++
		}
	}
	if want := 8 * int(d/f.Step()); len(wall) != want {
		t.Fatalf("%d GPU intervals, want %d", len(wall), want)
	}
	for k, us := range wall {
		if us != uint64(f.Step()/time.Microsecond) {
			t.Errorf("%s at %s: %d µs, want the interval", k.gpu, k.start.Format(time.TimeOnly), us)
		}
	}
	if tenants == 0 {
		t.Error("no sample was attributed to a tenant")
	}
}
