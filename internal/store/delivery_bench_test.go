package store_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/spool"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
)

// BenchmarkDeliveryEndToEnd measures the collector's delivery path: samples
// appended to the spool in poll-sized batches of 1,000 (each fsynced), and
// the shipper inserting them into ClickHouse, timed from the first append
// until the spool's backlog is empty. In the same run clickhouse-client
// inserts the very same rows in Native format (exported from the first
// database) into a second database; the ratio of the rates is reported
// (goal >= 0.7).
func BenchmarkDeliveryEndToEnd(b *testing.B) {
	client, err := exec.LookPath("clickhouse-client")
	if err != nil {
		b.Fatalf("clickhouse-client is needed for the comparison: %v", err)
	}
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	var e2eTime, clientTime, appendTime time.Duration
	total := 0
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cfgA := storetest.Config(b)
		sA := storetest.NewWithConfig(b, cfgA)
		cfgB := storetest.Config(b)
		storetest.NewWithConfig(b, cfgB)
		samples := testSamples(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), benchRows, "acme", "globex", "initech")
		sp, err := spool.Open(ctx, spool.DefaultConfig(b.TempDir()), logger, nil)
		if err != nil {
			b.Fatal(err)
		}
		sh, err := spool.NewShipper(sp, sA, spool.DefaultShipperConfig(), logger, nil)
		if err != nil {
			b.Fatal(err)
		}
		shipCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); sh.Run(shipCtx) }()
		b.StartTimer()

		t0 := time.Now()
		for lo := 0; lo < len(samples); lo += 1000 {
			if err := sp.Append(ctx, samples[lo:min(lo+1000, len(samples))]); err != nil {
				b.Fatal(err)
			}
		}
		appendTime += time.Since(t0)
		tick := time.NewTicker(5 * time.Millisecond)
		for rows, _ := sp.Backlog(); rows > 0; rows, _ = sp.Backlog() {
			<-tick.C
		}
		tick.Stop()
		e2eTime += time.Since(t0)

		b.StopTimer()
		stop()
		wg.Wait()
		sp.Close()
		total += len(samples)
		native := filepath.Join(b.TempDir(), "rows.native")
		port := strings.Split(cfgA.Addrs[0], ":")[1]
		export := exec.Command(client, "--host", "127.0.0.1", "--port", port, "--database", cfgA.Database,
			"--query", "SELECT "+sampleColumnsForBench+" FROM usage_samples FORMAT Native")
		f, err := os.Create(native)
		if err != nil {
			b.Fatal(err)
		}
		export.Stdout = f
		if err := export.Run(); err != nil {
			b.Fatalf("export: %v", err)
		}
		f.Close()
		in, err := os.Open(native)
		if err != nil {
			b.Fatal(err)
		}
		imp := exec.Command(client, "--host", "127.0.0.1", "--port", port, "--database", cfgB.Database,
			"--query", "INSERT INTO usage_samples ("+sampleColumnsForBench+") FORMAT Native")
		imp.Stdin = in
		t1 := time.Now()
		if out, err := imp.CombinedOutput(); err != nil {
			b.Fatalf("clickhouse-client insert: %v %s", err, out)
		}
		clientTime += time.Since(t1)
		in.Close()

		sB, err := store.Open(ctx, cfgB, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range []*store.Store{sA, sB} {
			rows, err := s.Usage(ctx, store.UsageQuery{From: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)})
			if err != nil || rows[0].Samples != uint64(len(samples)) {
				b.Fatalf("database %s holds %+v (%v), want %d samples", s.Database(), rows, err, len(samples))
			}
		}
		sB.Close()
	}
	e2eRate, clientRate := float64(total)/e2eTime.Seconds(), float64(total)/clientTime.Seconds()
	b.ReportMetric(e2eRate, "e2e_rows/s")
	b.ReportMetric(clientRate, "client_native_rows/s")
	b.ReportMetric(e2eRate/clientRate, "ratio")
	b.ReportMetric(float64(total)/appendTime.Seconds(), "spool_append_rows/s")
}
