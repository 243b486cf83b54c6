package store_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

const benchRows = 500_000

// BenchmarkInsertSamples measures batched inserts through the store against
// clickhouse-client inserting the same rows as TabSeparated into the same
// server in the same run, and reports the ratio of the two rates
// (goal: store/client >= 0.7).
func BenchmarkInsertSamples(b *testing.B) {
	client, err := exec.LookPath("clickhouse-client")
	if err != nil {
		b.Fatalf("clickhouse-client is needed for the comparison: %v", err)
	}
	ctx := context.Background()
	cfg := storetest.Config(b)
	s := storetest.NewWithConfig(b, cfg)
	port := strings.Split(cfg.Addrs[0], ":")[1]

	var storeTime, clientTime time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Fresh ids per round, so neither side inserts duplicates of the other.
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * 20 * 24 * time.Hour)
		viaStore := testSamples(base, benchRows, "acme", "globex", "initech")
		viaClient := testSamples(base.Add(10*24*time.Hour), benchRows, "acme", "globex", "initech")
		tsv := filepath.Join(b.TempDir(), "rows.tsv")
		if err := writeTSV(tsv, viaClient); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		t0 := time.Now()
		if err := s.InsertSamples(ctx, viaStore); err != nil {
			b.Fatal(err)
		}
		storeTime += time.Since(t0)

		b.StopTimer()
		in, err := os.Open(tsv)
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(client, "--host", "127.0.0.1", "--port", port, "--database", cfg.Database,
			"--query", "INSERT INTO usage_samples ("+sampleColumnsForBench+") FORMAT TabSeparated")
		cmd.Stdin = in
		t1 := time.Now()
		out, err := cmd.CombinedOutput()
		clientTime += time.Since(t1)
		in.Close()
		if err != nil {
			b.Fatalf("clickhouse-client: %v: %s", err, out)
		}
		b.StartTimer()
	}
	b.StopTimer()
	rows := float64(benchRows * b.N)
	storeRate, clientRate := rows/storeTime.Seconds(), rows/clientTime.Seconds()
	b.ReportMetric(storeRate, "store_rows/s")
	b.ReportMetric(clientRate, "client_rows/s")
	b.ReportMetric(storeRate/clientRate, "ratio")

	n, err := s.Usage(ctx, usage.Query{From: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil || n[0].Samples != uint64(2*benchRows*b.N) {
		b.Fatalf("stored %+v (%v), want %d samples", n, err, 2*benchRows*b.N)
	}
}

// sampleColumnsForBench are the columns the store writes, every meter's
// from the meter table.
var sampleColumnsForBench = "sample_id, host, gpu_uuid, gpu_model, mig_uuid, mig_profile, sku, " +
	"tenant, department, workload, start, end, " + strings.Join(meter.Columns(), ", ") + ", unmeasured"

func writeTSV(path string, samples []collectors.Sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for _, x := range samples {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s",
			x.ID, x.Host, x.GPUUUID, x.GPUModel, x.MIGUUID, x.MIGProfile, x.SKU, x.Tenant, x.Department, x.Workload,
			x.Start.UTC().Format(time.DateTime), x.End.UTC().Format(time.DateTime))
		for _, v := range x.Array() {
			fmt.Fprintf(w, "\t%d", v)
		}
		fmt.Fprintf(w, "\t%d\n", x.Unmeasured)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
