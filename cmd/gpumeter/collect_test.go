package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/gpumeter/gpumeter/cmd/gpumeter/config"
	"github.com/gpumeter/gpumeter/collectors/agent"
	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/tests/harness"
)

var collectStart = time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)

// collect runs the collect command with args and deps (see runCommand).
func collect(ctx context.Context, g *globals, args []string, deps collectDeps) error {
	return runCommand(ctx, newCollectCmd(g, deps), args)
}

// parseCollectFlags reads collect's flags from args, which may hold the
// global flags too (a deployment file's command line), and checks them as
// collect does, with g.cfg as the loaded config.
func parseCollectFlags(g *globals, args []string) (agent.Config, error) {
	var f agent.Flags
	fs := pflag.NewFlagSet("collect", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs, g.cfg.Collector)
	addGlobalFlags(fs, &globals{})
	if err := fs.Parse(args); err != nil {
		return agent.Config{}, err
	}
	if err := cli.NoArgs(nil, fs.Args()); err != nil {
		return agent.Config{}, err
	}
	return f.Config(fs, g.cfg.Collector, g.dsn)
}

// TestCollectSimulatedHourStoresWhatTheSimulatorRan runs the collector
// over a simulated hour of two DGX hosts into a real ClickHouse, and
// checks the stored, deduplicated totals against the simulator's own
// ledger: GPU time per tenant exactly, energy per tenant within rounding.
func TestCollectSimulatedHourStoresWhatTheSimulatorRan(t *testing.T) {
	dsn := testDSN(t)
	args := []string{"--clickhouse", dsn, "collect", "--simulate", "--spool", t.TempDir(), "--hosts", "2", "--seed", "7",
		"--start", collectStart.Format(time.RFC3339), "--duration", "1h", "--listen", ""}
	code, out, stderr := gpumeter(t, args...)
	if code != 0 {
		t.Fatalf("collect exit %d\n%s", code, stderr)
	}
	if !strings.Contains(out, "samples written") || !strings.Contains(out, "acme") {
		t.Errorf("no ledger printed:\n%s", out)
	}
	// A replay of the same hour writes the same sample ids: the store's
	// deduplication keeps the totals.
	if code, _, stderr := gpumeter(t, args...); code != 0 {
		t.Fatalf("replay exit %d\n%s", code, stderr)
	}

	harness.AssertStoredMatchesSimulator(t, dsn, 7, 2, collectStart, time.Hour)
}

func TestCollectJSONLinesCoverEveryGPUInterval(t *testing.T) {
	code, out, stderr := gpumeter(t, "collect", "--simulate", "--hosts", "1", "--gpus", "4", "--start", collectStart.Format(time.RFC3339),
		"--duration", "2m", "--sink", "jsonl", "--listen", "")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	perGPUInterval := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	lines := 0
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %d: %v: %s", lines+1, err, sc.Text())
		}
		lines++
		us, err := microsOf(rec["gpu_seconds"])
		if err != nil {
			t.Fatal(err)
		}
		perGPUInterval[rec["gpu_uuid"].(string)+" "+rec["start"].(string)] += us
		for _, k := range []string{"host", "gpu_model", "sku", "end", "energy_joules", "sample_id"} {
			if _, ok := rec[k]; !ok {
				t.Fatalf("line %d lacks %q", lines, k)
			}
		}
	}
	if len(perGPUInterval) != 4*12 {
		t.Fatalf("%d gpu-intervals from %d lines, want 4 GPUs × 12 intervals", len(perGPUInterval), lines)
	}
	for k, us := range perGPUInterval {
		if us != 10_000_000 {
			t.Errorf("%s: %d µs, want 10 s", k, us)
		}
	}

	// One sample-file format: what the sink wrote imports as it is (ids
	// included), and a second import finds every row stored unchanged.
	path := filepath.Join(t.TempDir(), "samples.jsonl")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	dsn := testDSN(t)
	want := fmt.Sprintf("imported %d rows from 1 file(s)", lines)
	for i, stored := range []int{lines, 0} {
		code, got, stderr := gpumeter(t, "import", "--quiet", "--clickhouse", dsn, path)
		if code != 0 || !strings.Contains(got, want) || !strings.Contains(got, fmt.Sprintf(": %d stored", stored)) {
			t.Fatalf("import %d: exit %d, %q %q; want %q and %d stored", i, code, got, stderr, want, stored)
		}
	}
}

// microsOf reads an exact decimal of seconds.
func microsOf(v any) (int64, error) {
	f, ok := v.(float64)
	if !ok {
		return 0, strconv.ErrSyntax
	}
	return int64(math.Round(f * 1e6)), nil
}

func TestCollectMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	var stderr bytes.Buffer
	g := &globals{stdout: io.Discard, stderr: &stderr, logger: slog.New(slog.NewTextHandler(&stderr, nil)), cfg: config.Default()}
	err := collect(context.Background(), g, []string{"--simulate", "--hosts", "2", "--start", collectStart.Format(time.RFC3339),
		"--duration", "10m", "--sink", "discard", "--listen", ""}, collectDeps{registry: reg})
	if err != nil {
		t.Fatalf("collect: %v\n%s", err, stderr.String())
	}
	if got := gathered(t, reg, "gpumeter_collector_polls_total"); got != 60 {
		t.Errorf("polls %v, want 60 (10 minutes of 10 s)", got)
	}
	samples := gathered(t, reg, "gpumeter_collector_samples_total")
	if samples < 60*16 {
		t.Errorf("samples %v, want at least one per GPU and poll", samples)
	}
	if d := gathered(t, reg, "gpumeter_collector_last_poll_duration_seconds"); d <= 0 {
		t.Errorf("last poll duration %v", d)
	}
	if up := gathered(t, reg, "gpumeter_collector_source_success"); up != 2 {
		t.Errorf("source success summed over hosts %v, want 2", up)
	}
}

// The collector's listener is the server package's: /healthz at once,
// /readyz 503 until the first poll handed its samples on, then 200, and
// the collector's metrics on /metrics; it stops with the collector.
func TestCollectServesMetricsAndReadiness(t *testing.T) {
	addr := harness.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		// Simulated time runs at wall speed: the first poll ends 5 s in.
		done <- run(ctx, []string{"collect", "--simulate", "--hosts", "1", "--gpus", "2", "--interval", "5s", "--speed", "1",
			"--start", collectStart.Format(time.RFC3339), "--sink", "discard", "--listen", addr}, io.Discard, &stderr)
	}()
	eventually(t, "the collector to listen", 30*time.Second, func() bool { code, _ := harness.HTTPGet(addr, "/healthz"); return code == 200 })
	if code, body := harness.HTTPGet(addr, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"failed":["poll"]`) {
		t.Errorf("/readyz before any poll: %d %s, want 503 naming the poll", code, body)
	}
	eventually(t, "ready after the first poll", 30*time.Second, func() bool { code, _ := harness.HTTPGet(addr, "/readyz"); return code == 200 })
	_, body := harness.HTTPGet(addr, "/metrics")
	for _, want := range []string{`gpumeter_collector_polls_total{result="ok"}`, "gpumeter_collector_samples_total", "gpumeter_collector_pending_samples", "go_goroutines"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("collect exit %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("collect did not stop after its context ended")
	}
	if code, _ := harness.HTTPGet(addr, "/healthz"); code != 0 {
		t.Errorf("the listener outlived the collector: /healthz %d", code)
	}
}

func TestCollectWithoutTheNVMLLibraryFailsClearly(t *testing.T) {
	var stderr bytes.Buffer
	g := &globals{stdout: io.Discard, stderr: &stderr, logger: slog.New(slog.DiscardHandler), cfg: config.Default()}
	lib := &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}
	err := collect(context.Background(), g, []string{"--sink", "discard", "--listen", ""},
		collectDeps{newNVML: func() gonvml.Interface { return lib }, registry: prometheus.NewRegistry()})
	if err == nil || !strings.Contains(err.Error(), "libnvidia-ml.so.1") || !strings.Contains(err.Error(), "--simulate") {
		t.Fatalf("err = %v", err)
	}
}

func TestCollectRejectsBadFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"sub-second interval", []string{"--interval", "500ms"}, "--interval"},
		{"unknown sink", []string{"--sink", "kafka"}, "--sink"},
		{"unknown vGPU unused-time rule", []string{"--vgpu-best-effort-unused", "owners"}, "--vgpu-best-effort-unused"},
		{"missing libvirt directory", []string{"--libvirt-dir", "/nonexistent/qemu", "--sink", "discard"}, "--libvirt-dir"},
		{"flat-out simulation without end", []string{"--simulate"}, "needs a --duration"},
		{"negative speed", []string{"--simulate", "--speed", "-1", "--duration", "1h"}, "--speed"},
		{"bad start", []string{"--simulate", "--duration", "1h", "--start", "yesterday"}, "--start"},
		{"map file with the simulation", []string{"--simulate", "--duration", "1h", "--map-file", "x.map"}, "--map-file"},
		{"too many hosts", []string{"--simulate", "--duration", "1h", "--hosts", "1000", "--sink", "discard", "--listen", ""}, "hosts"},
		{"vGPU host without the simulation", []string{"--vgpu", "--sink", "discard"}, "--vgpu"},
		{"stray argument", []string{"now"}, `unexpected argument "now"`},
		{"bad kubelet pods url", []string{"--kubelet-pods-url", "unix:///x", "--sink", "discard"}, "pod labels url"},
		{"zero drain timeout", []string{"--drain-timeout", "0s"}, "--drain-timeout"},
		{"unknown overflow policy", []string{"--simulate", "--duration", "1h", "--spool-overflow", "block", "--spool", "x", "--listen", ""}, "overflow"},
		{"ship batch too small", []string{"--simulate", "--duration", "1h", "--ship-batch-rows", "10", "--spool", "x", "--listen", ""}, "batch_rows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := gpumeter(t, append([]string{"collect"}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

// --libvirt-dir defaults to the config's collector.libvirt_dir on real
// hosts, a flag overrides it, the simulated fleet ignores it (it writes
// its own domain files), and a directory that is not there is refused.
func TestCollectLibvirtDirFromConfig(t *testing.T) {
	fromConfig, fromFlag := t.TempDir(), t.TempDir()
	cfg := config.Default()
	cfg.Collector.LibvirtDir = fromConfig
	g := &globals{cfg: cfg, stdout: io.Discard, stderr: io.Discard}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"the config's", nil, fromConfig},
		{"the flag over the config", []string{"--libvirt-dir", fromFlag}, fromFlag},
		{"none for the simulated fleet", []string{"--simulate", "--duration", "1h"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseCollectFlags(g, tc.args)
			if err != nil || c.Host.LibvirtDir != tc.want {
				t.Fatalf("libvirt dir %q, %v; want %q", c.Host.LibvirtDir, err, tc.want)
			}
		})
	}
	g.cfg.Collector.LibvirtDir = filepath.Join(fromConfig, "missing")
	if _, err := parseCollectFlags(g, nil); err == nil || !strings.Contains(err.Error(), "collector.libvirt_dir") {
		t.Fatalf("a missing configured directory: %v", err)
	}
}

// gathered sums a metric's values over its series.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	found := false
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			found = true
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	if !found {
		t.Fatalf("metric %s not found", name)
	}
	return sum
}

// Spool segments smaller than the collector's in-memory batch (20,000
// simulated rows, about 1.6 MB encoded, against 1 MiB segments): every
// sample is stored. Before the fix the batch was offered whole, refused
// as too large for a segment on every try, and nothing was stored.
func TestCollectSmallSegmentsStoreEverySample(t *testing.T) {
	dsn := testDSN(t)
	conf := filepath.Join(t.TempDir(), "gpumeter.yaml")
	if err := os.WriteFile(conf, []byte("collector:\n  spool:\n    segment_bytes: 1048576\n    max_bytes: 67108864\n    overflow: reject\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := gpumeter(t, "--config", conf, "--clickhouse", dsn, "collect", "--simulate", "--spool", t.TempDir(),
		"--hosts", "2", "--seed", "3", "--start", collectStart.Format(time.RFC3339), "--duration", "6h", "--listen", "")
	if code != 0 {
		t.Fatalf("collect exit %d\n%s", code, stderr)
	}
	harness.AssertStoredMatchesSimulator(t, dsn, 3, 2, collectStart, 6*time.Hour)
}

// A segment that cannot take one poll of the host is refused before
// anything is collected, with exit code 2 and the field named.
func TestCollectRefusesSegmentSmallerThanAPoll(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "gpumeter.yaml")
	if err := os.WriteFile(conf, []byte("collector:\n  spool:\n    segment_bytes: 4096\n    max_bytes: 8192\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := gpumeter(t, "--config", conf, "--clickhouse", "clickhouse://127.0.0.1:1/none", "collect", "--simulate",
		"--spool", t.TempDir(), "--hosts", "2", "--duration", "1m", "--listen", "")
	if code != 2 || !strings.Contains(stderr, "segment_bytes") || !strings.Contains(stderr, "16 GPUs") {
		t.Fatalf("exit %d, want 2 naming segment_bytes and the 16 GPUs:\n%s", code, stderr)
	}
}
