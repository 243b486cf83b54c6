package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// BenchmarkRollupDay rolls up one day of 10 s samples for 1,000 GPUs
// (8.64 M raw rows, one tenant per GPU out of 300) into usage_hourly and
// reports seconds per run and raw rows per second.
func BenchmarkRollupDay(b *testing.B) {
	const gpus, intervals = 1000, 8640
	ctx := context.Background()
	s := storetest.New(b)
	day := time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	chunk := make([]collectors.Sample, 0, 100*gpus)
	for step := 0; step < intervals; step++ {
		start := day.Add(time.Duration(step) * 10 * time.Second)
		for g := 0; g < gpus; g++ {
			tenant := fmt.Sprintf("tenant-%03d", g%300)
			x := collectors.Sample{
				Host:       fmt.Sprintf("host-%03d", g/8),
				GPUUUID:    fmt.Sprintf("GPU-%04d", g),
				GPUModel:   "H100-SXM5-80GB",
				SKU:        "H100-SXM5-80GB",
				Tenant:     tenant,
				Department: "dept-" + tenant[len(tenant)-1:],
				Workload:   "job",
				Start:      start,
				End:        start.Add(10 * time.Second),
				Values:     meter.Values{GPUMicroseconds: 10_000_000, SMActiveMicroseconds: uint64(step % 10_000_000), MemMiBSeconds: 409600, EnergyMillijoules: 7_000_000, PCIeTxBytes: 1 << 20, PCIeRxBytes: 1 << 21},
			}
			x.ID = collectors.SampleID(x.Host, x.GPUUUID, x.Tenant, x.Workload, x.Start)
			chunk = append(chunk, x)
		}
		if len(chunk) == cap(chunk) || step == intervals-1 {
			if err := s.InsertSamples(ctx, chunk); err != nil {
				b.Fatal(err)
			}
			chunk = chunk[:0]
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.RollupRange(ctx, day, day.Add(24*time.Hour), uint64(i+1)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	per := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(per, "s/day")
	b.ReportMetric(float64(gpus*intervals)/per, "raw_rows/s")
	rows, err := s.Usage(ctx, usage.Query{From: day, To: day.Add(24 * time.Hour), Source: usage.SourceHourly})
	if err != nil || rows[0].GPUMicroseconds != gpus*intervals*10_000_000 {
		b.Fatalf("hourly total %+v (%v)", rows, err)
	}
}
