package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/spool"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// monthStart is the first instant of a UTC month.
func monthStart(year int, month time.Month) time.Time {
	return time.Date(year, month, 1, 0, 0, 0, 0, time.UTC)
}

// insertAcmeSamples stores 8*36 of acme's samples (six minutes of 8 GPUs)
// from the start of each month.
func insertAcmeSamples(t *testing.T, s *store.Store, months ...time.Time) {
	t.Helper()
	for _, m := range months {
		if err := s.InsertSamples(context.Background(), testSamples(m, 8*36, "acme")); err != nil {
			t.Fatal(err)
		}
	}
}

// testSamples builds n samples of 10 s each for the given tenants, spread
// over whole GPUs, starting at start.
func testSamples(start time.Time, n int, tenants ...string) []collectors.Sample {
	out := make([]collectors.Sample, 0, n)
	for i := 0; i < n; i++ {
		tenant := tenants[i%len(tenants)]
		gpu := fmt.Sprintf("GPU-%04d", i%8)
		st := start.Add(time.Duration(i/8) * 10 * time.Second)
		s := collectors.Sample{
			Host:       "host-a",
			GPUUUID:    gpu,
			GPUModel:   "H100-SXM5-80GB",
			SKU:        "H100-SXM5-80GB",
			Tenant:     tenant,
			Department: "dept-" + tenant,
			Workload:   "job-" + tenant,
			Start:      st,
			End:        st.Add(10 * time.Second),
			Values:     meter.Values{GPUMicroseconds: 10_000_000, SMActiveMicroseconds: uint64(i % 10_000_000), MemMiBSeconds: 40960 * 10, MemPeakBytes: uint64(i) << 20, EnergyMillijoules: 3_500_000 + uint64(i), PCIeTxBytes: uint64(i) * 1000, PCIeRxBytes: uint64(i) * 2000, NVLinkTxBytes: uint64(i) * 3000, NVLinkRxBytes: uint64(i) * 4000},
		}
		// Every fifth GPU is a PCIe board without NVLink; every seventh
		// sample is a first interval without an energy baseline.
		if i%5 == 0 {
			s.Unmeasured |= meter.UnmeasuredNVLink
		}
		if i%7 == 0 {
			s.Unmeasured |= meter.UnmeasuredEnergy
		}
		s.ID = collectors.SampleID(s.Host, s.GPUUUID, s.Tenant, s.Workload, s.Start)
		out = append(out, s)
	}
	return out
}

func sumByTenant(samples []collectors.Sample) map[string]meter.Totals {
	out := map[string]meter.Totals{}
	for _, s := range samples {
		out[s.Tenant] = out[s.Tenant].Add(meter.Totals{
			Values: s.Values,
			Unmeasured: meter.UnmeasuredTime{
				gpuIf(s, meter.UnmeasuredSMActive), gpuIf(s, meter.UnmeasuredEnergy),
				gpuIf(s, meter.UnmeasuredPCIe), gpuIf(s, meter.UnmeasuredNVLink),
			},
		})
	}
	return out
}

func TestInsertSameBatchTwiceCountsOnce(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	start := time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC) // crosses a month (partition) boundary
	samples := testSamples(start, 8*720, "acme", "globex", "initech")
	for i := 0; i < 2; i++ {
		if err := s.InsertSamples(ctx, samples); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	rows, err := s.Usage(ctx, usage.Query{From: start, To: start.Add(24 * time.Hour), GroupBy: []usage.Dimension{usage.DimTenant}})
	if err != nil {
		t.Fatal(err)
	}
	want := sumByTenant(samples)
	if len(rows) != len(want) {
		t.Fatalf("got %d tenants, want %d: %+v", len(rows), len(want), rows)
	}
	for _, r := range rows {
		if r.Totals != want[r.Tenant] {
			t.Errorf("tenant %s: got %+v, want %+v", r.Tenant, r.Totals, want[r.Tenant])
		}
		if r.Samples != uint64(len(samples)/3) {
			t.Errorf("tenant %s: %d samples, want %d", r.Tenant, r.Samples, len(samples)/3)
		}
	}
}

// TestInsertOfManyBlocksIsExact sends more rows than one INSERT takes, so
// that the rows go in several inserts, each in several blocks, each block
// written out in several compressed frames (insertCompressionBuffer), and
// checks that every meter arrives exactly.
func TestInsertOfManyBlocksIsExact(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	start := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
	samples := testSamples(start, store.MaxInsertRows+25_003, "acme", "globex", "initech")
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	checkTenantTotals(t, s, start, samples)
}

// checkTenantTotals checks that the store holds, per tenant, exactly the
// samples' count and meters, in the 30 days from start.
func checkTenantTotals(t *testing.T, s *store.Store, start time.Time, samples []collectors.Sample) {
	t.Helper()
	rows, err := s.Usage(context.Background(), usage.Query{From: start, To: start.Add(30 * 24 * time.Hour), GroupBy: []usage.Dimension{usage.DimTenant}})
	if err != nil {
		t.Fatal(err)
	}
	want := sumByTenant(samples)
	count := map[string]uint64{}
	for _, x := range samples {
		count[x.Tenant]++
	}
	if len(rows) != len(want) {
		t.Fatalf("got %d tenants, want %d: %+v", len(rows), len(want), rows)
	}
	for _, r := range rows {
		if r.Totals != want[r.Tenant] {
			t.Errorf("tenant %s: got %+v, want %+v", r.Tenant, r.Totals, want[r.Tenant])
		}
		if r.Samples != count[r.Tenant] {
			t.Errorf("tenant %s: %d samples, want %d", r.Tenant, r.Samples, count[r.Tenant])
		}
	}
}

func TestUsageRangeAndBucketsAreExact(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	start := time.Date(2026, 10, 31, 22, 0, 0, 0, time.UTC)
	samples := testSamples(start, 8*360*4, "acme", "globex") // 4 hours of 8 GPUs
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	// Range: hours 1 and 2 only, by hour and tenant, and by month.
	from, to := start.Add(time.Hour), start.Add(3*time.Hour)
	var inRange []collectors.Sample
	wantHour := map[time.Time]map[string]uint64{}
	for _, x := range samples {
		if !x.Start.Before(from) && x.Start.Before(to) {
			inRange = append(inRange, x)
			h := x.Start.Truncate(time.Hour)
			if wantHour[h] == nil {
				wantHour[h] = map[string]uint64{}
			}
			wantHour[h][x.Tenant] += x.EnergyMillijoules
		}
	}
	rows, err := s.Usage(ctx, usage.Query{From: from, To: to, GroupBy: []usage.Dimension{usage.DimTenant}, Bucket: usage.BucketHour})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("got %d rows, want 2 hours × 2 tenants", len(rows))
	}
	for _, r := range rows {
		if got, want := r.EnergyMillijoules, wantHour[r.Bucket][r.Tenant]; got != want || want == 0 {
			t.Errorf("%s %s energy = %d, want %d", r.Bucket, r.Tenant, got, want)
		}
		if r.GPUMicroseconds != 4*360*10_000_000 {
			t.Errorf("%s %s gpu µs = %d, want 4 GPUs × 1 h", r.Bucket, r.Tenant, r.GPUMicroseconds)
		}
	}
	monthly, err := s.Usage(ctx, usage.Query{From: start, To: start.Add(4 * time.Hour), GroupBy: []usage.Dimension{usage.DimSKU}, Bucket: usage.BucketMonth})
	if err != nil {
		t.Fatal(err)
	}
	if len(monthly) != 2 || !monthly[0].Bucket.Equal(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)) ||
		!monthly[1].Bucket.Equal(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("monthly buckets = %+v", monthly)
	}
	if got := monthly[0].GPUMicroseconds + monthly[1].GPUMicroseconds; got != uint64(len(samples))*10_000_000 {
		t.Errorf("monthly gpu µs = %d, want %d", got, uint64(len(samples))*10_000_000)
	}
	scoped, err := s.Usage(ctx, usage.Query{From: start, To: start.Add(4 * time.Hour), Tenant: "globex"})
	if err != nil {
		t.Fatal(err)
	}
	if len(scoped) != 1 || scoped[0].Totals != sumByTenant(samples)["globex"] {
		t.Fatalf("tenant-scoped total = %+v, want %+v", scoped, sumByTenant(samples)["globex"])
	}
}

func TestInsertRejectsInvalidBatchAndStoresNothing(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	samples := testSamples(start, 100, "acme")
	samples[57].End = samples[57].Start // end not after start
	err := s.InsertSamples(ctx, samples)
	if err == nil {
		t.Fatal("invalid batch accepted")
	}
	rows, err := s.Usage(ctx, usage.Query{From: start, To: start.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Samples != 0 {
		t.Fatalf("rows after a rejected batch: %+v", rows)
	}
}

func gpuIf(s collectors.Sample, m meter.Unmeasured) uint64 {
	if s.Unmeasured.Has(m) {
		return s.GPUMicroseconds
	}
	return 0
}

// The shipper runs several inserts at once, each with a connection of its
// own: every row of every call arrives, exactly. A call whose context is
// over fails.
func TestInsertColumnsFromConcurrentCalls(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	start := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	var all []collectors.Sample
	batches := make([]spool.Columns, 3)
	for i := range batches {
		// Each more than one block, and one more than one INSERT;
		// three days apart, so that no sample id repeats.
		n := 25_003
		if i == 0 {
			n = store.MaxInsertRows + 5_001
		}
		samples := testSamples(start.Add(time.Duration(i)*72*time.Hour), n, "acme", "globex", "initech")
		batches[i].AppendSamples(samples)
		all = append(all, samples...)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(batches))
	for i := range batches {
		wg.Go(func() { errs[i] = s.InsertColumns(ctx, &batches[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	checkTenantTotals(t, s, start, all)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.InsertColumns(cancelled, &batches[1]); err == nil {
		t.Fatal("an insert with a cancelled context succeeded")
	}
}

// Invalid rows are refused before anything is sent.
func TestInsertColumnsRejectsInvalidRows(t *testing.T) {
	s := storetest.New(t)
	start := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	samples := testSamples(start, 10, "acme")
	samples[3].End = samples[3].Start
	var c spool.Columns
	c.AppendSamples(samples)
	if err := s.InsertColumns(context.Background(), &c); err == nil {
		t.Fatal("rows with an end not after their start were accepted")
	}
	checkTenantTotals(t, s, start, nil)
}
