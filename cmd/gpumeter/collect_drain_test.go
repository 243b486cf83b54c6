package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/cmd/gpumeter/config"
	"github.com/gpumeter/gpumeter/internal/spool"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// fullSpoolConfig writes a config whose spool (2 MiB under reject) holds
// far less than a simulated 6 hours of two hosts (about 72,000 samples,
// 5.8 MB spooled).
func fullSpoolConfig(t *testing.T) string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "gpumeter.yaml")
	if err := os.WriteFile(conf, []byte("collector:\n  spool:\n    segment_bytes: 1048576\n    max_bytes: 2097152\n    overflow: reject\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return conf
}

// A finite run whose spool cannot hold its output: the samples the spool
// rejects are kept in memory, and the run does not end until the shipper
// has made room for all of them and shipped them. Before the fix the
// run's last flush met the full spool, the collector exited 1 after half
// a second and the samples it had reported "kept for retry" were gone.
func TestCollectFullSpoolUnderRejectStoresEverySample(t *testing.T) {
	dsn := testDSN(t)
	code, _, stderr := gpumeter(t, "--config", fullSpoolConfig(t), "--clickhouse", dsn, "collect", "--simulate", "--spool", t.TempDir(),
		"--hosts", "2", "--seed", "3", "--start", collectStart.Format(time.RFC3339), "--duration", "6h", "--listen", "")
	if code != 0 {
		t.Fatalf("collect exit %d\n%s", code, tail(stderr, 20))
	}
	if !strings.Contains(stderr, "spool full") {
		t.Fatalf("the spool never filled up, so this tests nothing:\n%s", tail(stderr, 20))
	}
	harness.AssertStoredMatchesSimulator(t, dsn, 3, 2, collectStart, 6*time.Hour)
}

var lostRe = regexp.MustCompile(`(\d+) samples lost`)

// ClickHouse unreachable and the spool full: the run gives up after
// --drain-timeout, exits non-zero saying how many samples were lost, logs
// that count at Error and counts it in the dropped metric; every sample
// the poll loop produced is either in the spool or counted lost, none in
// neither. A second run on the same full spool, with ClickHouse back,
// ships what the first one spooled as well as its own output.
func TestCollectFullSpoolWithClickHouseDownCountsWhatItLoses(t *testing.T) {
	spoolDir := t.TempDir()
	cfg, err := config.Load(fullSpoolConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	var stderr bytes.Buffer
	g := &globals{stdout: io.Discard, stderr: &stderr, logger: slog.New(slog.NewTextHandler(&stderr, nil)), cfg: cfg,
		dsn: "clickhouse://127.0.0.1:1/unreachable"}
	err = collect(context.Background(), g, []string{"--simulate", "--spool", spoolDir, "--hosts", "2", "--seed", "3",
		"--start", collectStart.Format(time.RFC3339), "--duration", "6h", "--drain-timeout", "1s", "--listen", ""}, collectDeps{registry: reg})
	if err == nil {
		t.Fatalf("collect succeeded with ClickHouse down and the spool full\n%s", tail(stderr.String(), 20))
	}
	m := lostRe.FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("error %q does not say how many samples were lost", err)
	}
	lost, _ := strconv.ParseUint(m[1], 10, 64)
	produced := uint64(gathered(t, reg, "gpumeter_collector_samples_total"))
	spooled := uint64(gathered(t, reg, "gpumeter_spool_appended_rows_total"))
	dropped := uint64(gathered(t, reg, "gpumeter_collector_dropped_samples_total"))
	t.Logf("produced %d, spooled %d, lost %d", produced, spooled, lost)
	if lost == 0 || dropped != lost || spooled+lost != produced {
		t.Errorf("produced %d samples: spooled %d + lost %d (dropped metric %d); every sample must be spooled or counted lost", produced, spooled, lost, dropped)
	}
	if want := fmt.Sprintf("level=ERROR msg=\"samples lost: the sink never took them\" component=collector samples=%d", lost); !strings.Contains(stderr.String(), want) {
		t.Errorf("no Error log %q:\n%s", want, tail(stderr.String(), 10))
	}
	// What was spooled is still there, unshipped: nothing reported kept is gone.
	sp, err := spool.Open(context.Background(), spool.Config{Dir: spoolDir, SegmentBytes: 1 << 20, MaxBytes: 2 << 20, Overflow: spool.OverflowReject}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rows, _ := sp.Backlog(); uint64(rows) != spooled {
		t.Errorf("spool holds %d rows, the run spooled %d", rows, spooled)
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}

	// Run 2, same full spool, ClickHouse reachable: it ships run 1's
	// spooled samples and every one of its own.
	dsn := testDSN(t)
	next := collectStart.Add(6 * time.Hour)
	reg2 := prometheus.NewRegistry()
	var stderr2 bytes.Buffer
	g2 := &globals{stdout: io.Discard, stderr: &stderr2, logger: slog.New(slog.NewTextHandler(&stderr2, nil)), cfg: cfg, dsn: dsn}
	if err := collect(context.Background(), g2, []string{"--simulate", "--spool", spoolDir, "--hosts", "2", "--seed", "3",
		"--start", next.Format(time.RFC3339), "--duration", "1h", "--listen", ""}, collectDeps{registry: reg2}); err != nil {
		t.Fatalf("run 2: %v\n%s", err, tail(stderr2.String(), 20))
	}
	produced2 := uint64(gathered(t, reg2, "gpumeter_collector_samples_total"))
	if got, want := storedSamples(dsn), spooled+produced2; got != want {
		t.Errorf("stored %d samples, want run 1's %d spooled + run 2's %d", got, spooled, produced2)
	}
	harness.AssertStoredMatchesSimulator(t, dsn, 3, 2, next, time.Hour)
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
