package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// testBatch returns batch number b of n samples; the same (b, n) always
// gives the same samples, which lets a parent process check what a killed
// child wrote. IDs are unique across batches.
func testBatch(b, n int) []collectors.Sample {
	base := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(b) * 10 * time.Second)
	out := make([]collectors.Sample, n)
	for i := range out {
		gpu := fmt.Sprintf("GPU-%08d", i%8)
		tenant := fmt.Sprintf("tenant-%d", i%5)
		s := collectors.Sample{
			ID:         uint64(b)<<32 | uint64(i) + 1,
			Host:       "dgx-07",
			GPUUUID:    gpu,
			GPUModel:   "H100-SXM5-80GB",
			Tenant:     tenant,
			Department: "research",
			Workload:   fmt.Sprintf("ns-%d/pod-%d", i%5, i),
			Start:      base.Add(time.Duration(i) * time.Nanosecond),
			End:        base.Add(10*time.Second + time.Duration(i)*time.Nanosecond),
			Values:     meter.Values{GPUMicroseconds: 10_000_000, SMActiveMicroseconds: uint64(i) * 1000, MemMiBSeconds: uint64(b*n + i), MemPeakBytes: 80 << 30, EnergyMillijoules: uint64(700_000 + i), PCIeTxBytes: uint64(i) << 20, PCIeRxBytes: uint64(i) << 10, NVLinkTxBytes: uint64(i), NVLinkRxBytes: ^uint64(0)},
		}
		if i%3 == 0 {
			s.MIGUUID = fmt.Sprintf("MIG-%d", i)
			s.MIGProfile = "3g.40gb"
		}
		s.SKU = gpucatalog.SKU(s.GPUModel, s.MIGProfile)
		out[i] = s
	}
	return out
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// testConfig is a small spool: 4 KiB segments so tests roll often.
func testConfig(dir string) Config {
	return Config{Dir: dir, SegmentBytes: 4 << 10, MaxBytes: 1 << 30, Overflow: OverflowDropOldest}
}

type opened struct {
	*Spool
	reg  *prometheus.Registry
	logs *recordingHandler
}

func openSpool(t testing.TB, cfg Config) opened {
	t.Helper()
	reg := prometheus.NewRegistry()
	logs := &recordingHandler{}
	sp, err := Open(context.Background(), cfg, slog.New(logs), reg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { sp.Close() })
	return opened{Spool: sp, reg: reg, logs: logs}
}

func mustAppend(t testing.TB, sp *Spool, samples []collectors.Sample) {
	t.Helper()
	if err := sp.Append(context.Background(), samples); err != nil {
		t.Fatalf("append: %v", err)
	}
}

// readAll reads until the reader is caught up. Corrupt regions are
// returned as errors beside the batches, in order of meeting them.
func readAll(t testing.TB, sp *Spool) (batches []Batch, corrupt int) {
	t.Helper()
	for i := 0; ; i++ {
		if i > 1_000_000 {
			t.Fatal("reader does not make progress")
		}
		b, err := sp.Read(context.Background())
		if errors.Is(err, ErrCorruptSegment) {
			corrupt++
			continue
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if len(b.Samples) == 0 {
			return batches, corrupt
		}
		batches = append(batches, b)
	}
}

func samplesOf(batches []Batch) []collectors.Sample {
	var out []collectors.Sample
	for _, b := range batches {
		out = append(out, b.Samples...)
	}
	return out
}

// equalSamples compares sample by sample; times by instant, since the
// spool hands them back in UTC.
func equalSamples(t testing.TB, got, want []collectors.Sample) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d samples, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if !g.Start.Equal(w.Start) || !g.End.Equal(w.End) {
			t.Fatalf("sample %d: times %v–%v, want %v–%v", i, g.Start, g.End, w.Start, w.End)
		}
		g.Start, g.End, w.Start, w.End = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if g != w {
			t.Fatalf("sample %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

// metric returns the value of the gauge or counter name in reg.
func metric(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// recordingHandler keeps log records so tests can check levels.
type recordingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordingHandler) count(level slog.Level, msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.records {
		if r.Level == level && r.Message == msg {
			n++
		}
	}
	return n
}

func segFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+segFileSuffix))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

// copyDir copies the regular files of src into a new temporary directory.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// writeCursor writes a cursor file recording p, as a commit would leave it,
// whatever was there before.
func writeCursor(dir string, p Position) error {
	c := &cursorStore{dir: dir}
	err := c.create(cursorState{pos: Position{Segment: p.Segment, Offset: p.Offset}})
	return errors.Join(err, c.close())
}

// attrs returns the attributes, as text, of each record at level with msg.
func (h *recordingHandler) attrs(level slog.Level, msg string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.records {
		if r.Level != level || r.Message != msg {
			continue
		}
		m := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.String()
			return true
		})
		out = append(out, m)
	}
	return out
}
