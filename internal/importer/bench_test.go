package importer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/importer"
)

// BenchmarkImportCheck measures the checks of an import (parse, single-row
// limits, ids, capacity per GPU) on a collector-like file: 8 GPUs, each
// interval split among 3 tenants and idle. No store: DryRun.
func BenchmarkImportCheck(b *testing.B) {
	const rows = 200_000
	var sb strings.Builder
	sb.WriteString("host,gpu_uuid,gpu_model,tenant,workload,start,end,gpu_seconds,energy_joules,pcie_tx_bytes\n")
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	shares := []string{"4.000000", "3.000000", "2.500000", "0.500000"}
	for i := 0; i < rows; i++ {
		interval := i / 32
		gpu := (i / 4) % 8
		k := i % 4
		tenant, workload := fmt.Sprintf("t%d", k), fmt.Sprintf("job-%d", k)
		if k == 3 {
			tenant, workload = "", ""
		}
		st := start.Add(time.Duration(interval) * 10 * time.Second)
		fmt.Fprintf(&sb, "dgx-1,GPU-%d,H100-SXM5-80GB,%s,%s,%s,%s,%s,1750.125,123456789\n", gpu, tenant, workload,
			st.Format(time.RFC3339), st.Add(10*time.Second).Format(time.RFC3339), shares[k])
	}
	path := file(b, "usage.csv", sb.String())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := importer.Import(context.Background(), []importer.File{{Path: path, Format: importer.FormatCSV}}, importer.Options{DryRun: true}, nil)
		if err != nil || res.Rows != rows {
			b.Fatalf("%+v, %v", res, err)
		}
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
