package nvml_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/collectors/sim"
)

// benchHost is an 8-GPU H100 host with 28 MIG instances (GPUs 0–3, seven
// 1g.10gb each, rented to tenants) and 200 processes: one per MIG
// instance and 43 on each of the four time-sliced GPUs, all Kubernetes
// pods attributed through their cgroups.
func benchHost(b *testing.B) (*sim.Host, *collectors.Loop) {
	b.Helper()
	h, err := sim.NewHost(sim.HostConfig{Name: "bench", Model: "H100-SXM5-80GB", GPUs: 8, Seed: 1, Start: t0, Step: interval, Root: b.TempDir(), Cgroup: sim.KubernetesSystemd})
	if err != nil {
		b.Fatal(err)
	}
	var mapFile strings.Builder
	for i := 0; i < 4; i++ {
		fmt.Fprintf(&mapFile, "namespace ns-%d tenant-%d dept-%d\n", i, i, i%2)
	}
	pods := 0
	start := func(gpu int, mig string, util uint32) {
		pods++
		_, err := h.Start(sim.Process{GPU: gpu, MIG: mig, MemBytes: uint64(1+pods%7) << 30, SMUtil: util,
			Workload: sim.Workload{Pod: &sim.Pod{Namespace: fmt.Sprintf("ns-%d", pods%4), Name: fmt.Sprintf("pod-%d", pods), UID: fmt.Sprintf("%08d-0000-4000-8000-000000000000", pods)}}})
		if err != nil {
			b.Fatal(err)
		}
	}
	instances := 0
	for g := 0; g < 4; g++ {
		insts, err := h.GPU(g).EnableMIG("1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb")
		if err != nil {
			b.Fatal(err)
		}
		for k, in := range insts {
			fmt.Fprintf(&mapFile, "device %s tenant-%d\n", in.UUID(), k%4)
			start(g, in.UUID(), uint32(10*k))
			instances++
		}
	}
	for g := 4; g < 8; g++ {
		for k := 0; k < 43; k++ {
			start(g, "", uint32(k%5))
		}
	}
	if instances != 28 || pods != 200 {
		b.Fatalf("%d instances, %d processes", instances, pods)
	}
	logger := slog.New(slog.DiscardHandler)
	col, err := nvml.New(h.NVML(), nvml.DefaultConfig(), logger, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { col.Close() })
	m, err := attribution.ParseMapping(strings.NewReader(mapFile.String()))
	if err != nil {
		b.Fatal(err)
	}
	tenancy := attribution.Tenancy{Mapping: m, NamespaceIsTenant: true}
	cg, err := attribution.NewCgroup(attribution.CgroupConfig{ProcRoot: h.ProcRoot(), PodLogDir: h.PodLogDir()}, tenancy, logger)
	if err != nil {
		b.Fatal(err)
	}
	chain := attribution.NewChain(logger, attribution.Step{Name: "cgroup", Attributor: cg}, attribution.Step{Name: "static", Attributor: attribution.NewStatic(m)})
	discard := collectors.AppenderFunc(func(context.Context, []collectors.Sample) error { return nil })
	loop, err := collectors.NewLoop(collectors.LoopConfig{Interval: interval},
		[]collectors.Host{{Name: "bench", Sources: []collectors.NamedSource{{Name: "nvml", Source: col}}, Attributor: chain}},
		attribution.Apportion, discard, collectors.WallClock{}, logger, nil)
	if err != nil {
		b.Fatal(err)
	}
	return h, loop
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPoll is one poll of the loop (read 8 GPUs through NVML,
// attribute, apportion, append to a discarding appender) on the mock NVML
// of collectors/sim. The simulated world's step between polls is not
// timed. cpu-ns/poll is process CPU time (getrusage) per poll.
func BenchmarkPoll(b *testing.B) {
	h, loop := benchHost(b)
	ctx := context.Background()
	prev := t0
	loop.Prime(ctx, prev)
	var cpu time.Duration
	samples := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		end := prev.Add(interval)
		if err := h.AdvanceTo(end); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		c0 := cpuTime()
		n, err := loop.Poll(ctx, prev, end)
		cpu += cpuTime() - c0
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		samples = n
		prev = end
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/poll")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/8, "cpu-ns/gpu")
	b.ReportMetric(float64(samples), "samples/poll")
}
