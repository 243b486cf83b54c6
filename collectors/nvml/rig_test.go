package nvml_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/internal/meter"
)

var t0 = time.Date(2026, 2, 2, 9, 0, 0, 0, time.UTC)

const interval = 10 * time.Second

// countingMetrics counts NVML errors by function and code.
type countingMetrics struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *countingMetrics) NVMLError(function, code string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[function+" "+code]++
}

func (m *countingMetrics) count(function, code string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[function+" "+code]
}

// rig is one simulated host read by the NVML collector, attributed by
// cgroup and a map file, and apportioned, as the collect command does.
type rig struct {
	t       *testing.T
	host    *sim.Host
	col     *nvml.Collector
	metrics *countingMetrics
	logs    *bytes.Buffer
	chain   *attribution.Chain
	prev    time.Time
	pods    int
}

func newRig(t *testing.T, model string, step time.Duration, mapFile string) *rig {
	t.Helper()
	h, err := sim.NewHost(sim.HostConfig{Name: "node-1", Model: model, GPUs: 8, Seed: 1, Start: t0, Step: step, Root: t.TempDir(), Cgroup: sim.KubernetesSystemd})
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := &countingMetrics{}
	col, err := nvml.New(h.NVML(), nvml.DefaultConfig(), logger, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := col.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	mapping, err := attribution.ParseMapping(strings.NewReader(mapFile))
	if err != nil {
		t.Fatal(err)
	}
	tenancy := attribution.Tenancy{Mapping: mapping, NamespaceIsTenant: true, AccountIsTenant: true}
	cg, err := attribution.NewCgroup(attribution.CgroupConfig{ProcRoot: h.ProcRoot(), PodLogDir: h.PodLogDir()}, tenancy, logger)
	if err != nil {
		t.Fatal(err)
	}
	chain := attribution.NewChain(logger, attribution.Step{Name: "cgroup", Attributor: cg}, attribution.Step{Name: "static", Attributor: attribution.NewStatic(mapping)})
	return &rig{t: t, host: h, col: col, metrics: m, logs: logs, chain: chain, prev: t0}
}

// prime sets the collector's baselines at the current time.
func (r *rig) prime() {
	r.t.Helper()
	readings, err := r.col.Read(context.Background(), r.prev, r.prev)
	if err != nil {
		r.t.Fatal(err)
	}
	// As the poll loop does: attribution sees the processes early, while
	// their /proc entries exist.
	if err := r.chain.Attribute(context.Background(), readings); err != nil {
		r.t.Fatal(err)
	}
}

// advance runs the simulated world by d without reading.
func (r *rig) advance(d time.Duration) {
	r.t.Helper()
	if err := r.host.AdvanceTo(r.host.Now().Add(d)); err != nil {
		r.t.Fatal(err)
	}
}

// poll runs the world to the end of the next interval and reads it.
func (r *rig) poll() ([]collectors.GPUReading, []collectors.Sample) {
	r.t.Helper()
	end := r.prev.Add(interval)
	if err := r.host.AdvanceTo(end); err != nil {
		r.t.Fatal(err)
	}
	readings, err := r.col.Read(context.Background(), r.prev, end)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.chain.Attribute(context.Background(), readings); err != nil {
		r.t.Fatal(err)
	}
	var samples []collectors.Sample
	for i := range readings {
		samples = attribution.Apportion(samples, r.host.Name(), r.prev, end, &readings[i])
	}
	for _, s := range samples {
		if err := s.Validate(); err != nil {
			r.t.Fatalf("invalid sample %+v: %v", s, err)
		}
	}
	r.prev = end
	return readings, samples
}

// pod starts a process of a pod in namespace ns on gpu (and MIG device).
func (r *rig) pod(gpu int, mig, ns string, util uint32, memGiB uint64) uint32 {
	r.t.Helper()
	r.pods++
	pid, err := r.host.Start(sim.Process{
		GPU: gpu, MIG: mig, MemBytes: memGiB << 30, SMUtil: util,
		Workload: sim.Workload{Pod: &sim.Pod{Namespace: ns, Name: ns + "-pod", UID: fmt.Sprintf("%08d-0000-4000-8000-000000000000", r.pods)}},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return pid
}

// byTenant sums a GPU's samples per tenant.
func byTenant(samples []collectors.Sample, gpuUUID string, f func(collectors.Sample) uint64) map[string]uint64 {
	out := map[string]uint64{}
	for _, s := range samples {
		if s.GPUUUID == gpuUUID {
			out[s.Tenant] += f(s)
		}
	}
	return out
}

func gpuTime(s collectors.Sample) uint64 { return s.GPUMicroseconds }

// checkInvariants: per GPU, GPU time adds up to the interval and energy to
// the GPU's energy delta.
func checkInvariants(t *testing.T, readings []collectors.GPUReading, samples []collectors.Sample) {
	t.Helper()
	for _, g := range readings {
		if g.Err != nil {
			continue
		}
		var us, mj uint64
		for _, s := range samples {
			if s.GPUUUID == g.GPU.UUID {
				us += s.GPUMicroseconds
				mj += s.EnergyMillijoules
			}
		}
		if us != uint64(interval/time.Microsecond) {
			t.Errorf("gpu %d: %d µs, want %d", g.GPU.Index, us, interval/time.Microsecond)
		}
		if g.Counters[meter.Energy].OK && mj != g.Counters[meter.Energy].Value {
			t.Errorf("gpu %d: energy rows %d mJ, delta %d mJ", g.GPU.Index, mj, g.Counters[meter.Energy].Value)
		}
	}
}

var apportionFunc collectors.ApportionFunc = attribution.Apportion

func loggerTo(r *rig) *slog.Logger {
	return slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
