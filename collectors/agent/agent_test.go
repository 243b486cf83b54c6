package agent

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/spool"
)

var testStart = time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)

// simConfig is a finite simulated run of one host of gpus GPUs, as fast as
// it computes.
func simConfig(gpus int, d time.Duration) Config {
	return Config{Interval: collectors.DefaultInterval, Duration: d, DrainTimeout: time.Minute, NVML: nvml.DefaultConfig(),
		NamespaceIsTenant: true, AccountIsTenant: true,
		Simulate: &SimConfig{Hosts: 1, GPUsPerHost: gpus, Seed: 1, Start: testStart}}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string // "" valid
	}{
		{"a finite simulated run", func(*Config) {}, ""},
		{"sub-second interval", func(c *Config) { c.Interval = 500 * time.Millisecond }, "interval: 500ms"},
		{"negative duration", func(c *Config) { c.Duration = -time.Second }, "duration: -1s is negative"},
		{"negative batch", func(c *Config) { c.BatchRows = -1 }, "batch_rows: -1"},
		{"no drain timeout", func(c *Config) { c.DrainTimeout = 0 }, "drain_timeout: 0s"},
		{"negative speed", func(c *Config) { c.Simulate.Speed = -1 }, "simulate.speed: -1"},
		{"flat out without end", func(c *Config) { c.Duration = 0 }, "needs a duration"},
		{"missing libvirt directory", func(c *Config) { c.Simulate = nil; c.Host.LibvirtDir = "/nonexistent/qemu" }, "host.libvirt_dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := simConfig(2, time.Hour)
			tc.change(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !fault.IsValidation(err) {
				t.Fatalf("err %v; want a validation error naming %q", err, tc.want)
			}
		})
	}
}

// A simulated run hands on every GPU-interval of the run, each whole, and
// counts what it handed on.
func TestSimulatedRunHandsOnEveryGPUInterval(t *testing.T) {
	var mu sync.Mutex
	perGPUInterval := map[string]uint64{}
	out := collectors.AppenderFunc(func(_ context.Context, s []collectors.Sample) error {
		mu.Lock()
		defer mu.Unlock()
		for _, x := range s {
			perGPUInterval[x.GPUUUID+" "+x.Start.Format(time.RFC3339)] += x.GPUMicroseconds
		}
		return nil
	})
	a, err := New(context.Background(), simConfig(2, 2*time.Minute), Deps{Registry: prometheus.NewRegistry(), Out: out}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	res, err := a.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Fleet == nil || res.Written == 0 || a.Hosts() != 1 {
		t.Fatalf("result %+v, %d hosts", res, a.Hosts())
	}
	if len(perGPUInterval) != 2*12 {
		t.Fatalf("%d GPU-intervals, want 2 GPUs × 12", len(perGPUInterval))
	}
	for k, us := range perGPUInterval {
		if us != 10_000_000 {
			t.Errorf("%s: %d µs, want 10 s", k, us)
		}
	}
}

// memSink is a ClickHouse that keeps what it is sent; unreachable at
// start.
type memSink struct {
	mu   sync.Mutex
	rows []collectors.Sample
}

func (m *memSink) InsertSamples(_ context.Context, s []collectors.Sample) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows = append(m.rows, s...)
	return nil
}

func (m *memSink) Ping(context.Context) error { return errors.New("connection refused") }

// Through the spool: a finite run returns once the shipper delivered all
// it wrote, and the spool is empty.
func TestSpooledRunDeliversEverySample(t *testing.T) {
	cfg := simConfig(2, 2*time.Minute)
	dir := filepath.Join(t.TempDir(), "spool")
	cfg.Spool, cfg.Shipper = spool.DefaultConfig(dir), spool.DefaultShipperConfig()
	cfg.Shipper.FlushInterval = 100 * time.Millisecond
	sink := &memSink{}
	a, err := New(context.Background(), cfg, Deps{Registry: prometheus.NewRegistry(), Sink: sink}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Run(context.Background())
	a.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := uint64(len(sink.rows)); got != res.Written || got == 0 {
		t.Fatalf("sink got %d samples, the run wrote %d", got, res.Written)
	}
	sp, err := spool.Open(context.Background(), cfg.Spool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if rows, bytes := sp.Backlog(); rows != 0 || bytes != 0 {
		t.Errorf("spool backlog %d rows, %d bytes after the drain", rows, bytes)
	}
}

// A spool segment that cannot take one poll is refused before anything
// runs, naming the field.
func TestSpoolTooSmallForAPollIsRefused(t *testing.T) {
	cfg := simConfig(8, time.Minute)
	cfg.Spool, cfg.Shipper = spool.DefaultConfig(t.TempDir()), spool.DefaultShipperConfig()
	cfg.Spool.SegmentBytes, cfg.Spool.MaxBytes = 4096, 8192
	_, err := New(context.Background(), cfg, Deps{Registry: prometheus.NewRegistry(), Sink: &memSink{}}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "segment_bytes") || !fault.IsValidation(err) {
		t.Fatalf("err %v; want a validation error naming segment_bytes", err)
	}
}

func TestWithoutTheNVMLLibraryFailsClearly(t *testing.T) {
	cfg := simConfig(1, time.Minute)
	cfg.Simulate = nil
	lib := &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}
	_, err := New(context.Background(), cfg, Deps{NVML: func() gonvml.Interface { return lib }, Registry: prometheus.NewRegistry(),
		Out: collectors.AppenderFunc(func(context.Context, []collectors.Sample) error { return nil })}, slog.New(slog.DiscardHandler))
	if err == nil || !errors.Is(err, nvml.ErrLibraryNotFound) {
		t.Fatalf("err = %v", err)
	}
}
