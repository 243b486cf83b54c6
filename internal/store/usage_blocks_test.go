package store_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// blockSample is an hour from start of gpu (0-11) held by tenant in dept:
// two SKUs, meters that differ per GPU and hour (peaks too), and some
// meters unmeasured.
func blockSample(gpu int, tenant, dept string, start time.Time) collectors.Sample {
	sku := []string{"H100-SXM5-80GB", "A100-SXM4-80GB"}[gpu%2]
	h := uint64(start.Unix() / 3600)
	x := collectors.Sample{Host: fmt.Sprintf("host-%d", gpu/4), GPUUUID: fmt.Sprintf("GPU-%02d", gpu), GPUModel: sku, SKU: sku,
		Tenant: tenant, Department: dept, Workload: "job-" + tenant, Start: start, End: start.Add(time.Hour),
		Values: meter.Values{GPUMicroseconds: 3_600_000_000 - uint64(gpu)*1_000_000, SMActiveMicroseconds: (h % 97) * 10_000_000,
			MemMiBSeconds: uint64(gpu) * 4096 * 3600, MemPeakBytes: (h%13 + uint64(gpu)) << 30, EnergyMillijoules: 2_000_000_000 + h%1000,
			PCIeTxBytes: h * 1000, PCIeRxBytes: uint64(gpu) * 2000, NVLinkTxBytes: h % 7 * 3000, NVLinkRxBytes: 4000}}
	if gpu%3 == 0 {
		x.Unmeasured |= meter.UnmeasuredNVLink
	}
	if h%5 == 0 {
		x.Unmeasured |= meter.UnmeasuredEnergy
	}
	x.ID = collectors.SampleID(x.Host, x.GPUUUID, x.Tenant, x.Workload, x.Start)
	return x
}

var blockTenants = []string{"acme", "globex", "initech"}

// blockHours are the fleet's samples over [from, to): 12 GPUs, tenant by
// GPU, acme's GPUs in two departments.
func blockHours(from, to time.Time) []collectors.Sample {
	var out []collectors.Sample
	for h := from; h.Before(to); h = h.Add(time.Hour) {
		for g := range 12 {
			tenant := blockTenants[g%3]
			out = append(out, blockSample(g, tenant, fmt.Sprintf("dept-%s-%d", tenant, g%2), h))
		}
	}
	return out
}

// countingStore counts the usage reads that reach the store.
type countingStore struct {
	*store.Store
	reads atomic.Int64
}

func (c *countingStore) Usage(ctx context.Context, q usage.Query) ([]usage.Row, error) {
	c.reads.Add(1)
	return c.Store.Usage(ctx, q)
}

// blockQueries are one-tenant hourly queries over data: every scope that
// reads one tenant, buckets, groupings and ranges, including a range
// across the months, one hour, ranges of whole days with an hour short at
// an end, a range without data and a tenant without any.
func blockQueries(jan, feb time.Time) []usage.Query {
	ranges := [][2]time.Time{
		{jan.Add(-48 * time.Hour), feb.Add(72 * time.Hour)},
		{jan.Add(-29 * time.Hour), feb.Add(13 * time.Hour)},
		{jan.Add(-5 * time.Hour), jan.Add(-4 * time.Hour)},
		{feb.Add(5 * time.Hour), feb.Add(53 * time.Hour)},
		{feb.Add(500 * time.Hour), feb.Add(600 * time.Hour)},
		// Whole days inside, an hour short of a day at either end.
		{feb.Add(-47 * time.Hour), feb.Add(23 * time.Hour)},
		{jan.Add(-71 * time.Hour), jan.Add(-1 * time.Hour)},
	}
	buckets := []usage.Bucket{usage.BucketNone, usage.BucketHour, usage.BucketDay, usage.BucketMonth}
	groupings := [][]usage.Dimension{nil, {usage.DimSKU}, {usage.DimDepartment}, {usage.DimTenant, usage.DimDepartment, usage.DimSKU}}
	var out []usage.Query
	for _, tenant := range append(blockTenants, "nobody") {
		scopes := []struct {
			scope        auth.Scope
			tenant, dept string
		}{
			{scope: auth.Scope{Kind: auth.KindTenant, Name: tenant}},
			{scope: auth.Scope{Kind: auth.KindAdmin}, tenant: tenant},
			{tenant: tenant, dept: "dept-" + tenant + "-1"},
			{scope: auth.Scope{Kind: auth.KindDepartment, Name: "dept-acme-0"}, tenant: tenant},
			{scope: auth.Scope{Kind: auth.KindTenant, Name: "globex"}, tenant: tenant},
		}
		for i, sc := range scopes {
			for j, r := range ranges {
				// Every bucket and grouping with every scope and range,
				// spread so that the list stays short.
				b, g := buckets[(i+j)%len(buckets)], groupings[(i+2*j)%len(groupings)]
				out = append(out, usage.Query{From: r[0], To: r[1], Bucket: b, GroupBy: g, Tenant: sc.tenant, Department: sc.dept, Scope: sc.scope})
				b, g = buckets[(i+j+1)%len(buckets)], groupings[(i+2*j+1)%len(groupings)]
				out = append(out, usage.Query{From: r[0], To: r[1], Bucket: b, GroupBy: g, Tenant: sc.tenant, Department: sc.dept, Scope: sc.scope})
			}
		}
	}
	return out
}

// assertBlocksEqualStore runs every query through the service (tenant
// month blocks) at the rollup's stored state and straight through the
// store's SQL, and fails on any difference. It returns the store's
// answers.
func assertBlocksEqualStore(t *testing.T, s *store.Store, svc *usage.Service, qs []usage.Query, when string) [][]usage.Row {
	t.Helper()
	ctx := context.Background()
	state, _, err := s.LoadRollupState(ctx, rollup.StateKey)
	if err != nil {
		t.Fatal(err)
	}
	var answers [][]usage.Row
	for i, q := range qs {
		got, err := svc.Rows(ctx, q, state)
		if err != nil {
			t.Fatalf("%s: query %d: %v", when, i, err)
		}
		q.Source = usage.SourceHourly
		want, err := s.Usage(ctx, q)
		if err != nil {
			t.Fatalf("%s: query %d: %v", when, i, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: query %d %+v: %d rows, the store has %d\n got  %+v\n want %+v", when, i, q, len(got), len(want), got, want)
		}
		for k := range want {
			if got[k] != want[k] {
				t.Fatalf("%s: query %d %+v, row %d:\n got  %+v\n want %+v", when, i, q, k, got[k], want[k])
			}
		}
		answers = append(answers, want)
	}
	return answers
}

// A tenant's hourly reads come from its month blocks: they equal the
// store's SQL for every scope, bucket, grouping and range, after the first
// rollup, after late samples re-opened hours (and a re-import moved a
// sample to another department), and after retention dropped a raw month;
// a distinct query of a tenant whose blocks are read does not reach the
// store, and a new rollup version reads them again.
func TestBlocksEqualTheStore(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	logger := slog.New(slog.DiscardHandler)
	jan, feb := monthStart(2026, 1), monthStart(2026, 2)
	// The last days of December and January, the first of February.
	for _, r := range [][2]time.Time{{jan.Add(-72 * time.Hour), jan.Add(30 * time.Hour)}, {feb.Add(-50 * time.Hour), feb.Add(60 * time.Hour)}} {
		if err := s.InsertSamples(ctx, blockHours(r[0], r[1])); err != nil {
			t.Fatal(err)
		}
	}
	job := rollup.New(s, rollup.DefaultConfig(), time.Now, logger)
	if _, err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	counting := &countingStore{Store: s}
	svc := usage.New(counting, billing.Customers{}, time.Now)
	qs := blockQueries(jan, feb)
	first := assertBlocksEqualStore(t, s, svc, qs, "after the rollup")

	// Blocks are read once per tenant and month: another range of acme's
	// reads nothing more.
	state, _, err := s.LoadRollupState(ctx, rollup.StateKey)
	if err != nil {
		t.Fatal(err)
	}
	reads := counting.reads.Load()
	if _, err := svc.Rows(ctx, usage.Query{From: feb.Add(7 * time.Hour), To: feb.Add(31 * time.Hour), Bucket: usage.BucketDay,
		GroupBy: []usage.Dimension{usage.DimSKU}, Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}}, state); err != nil {
		t.Fatal(err)
	}
	if n := counting.reads.Load() - reads; n != 0 {
		t.Errorf("a distinct query of acme's February read the store %d times, want none", n)
	}

	// Late samples: a new department of globex in a closed January hour,
	// acme's re-delivered hour, and one of initech's samples re-imported
	// with another department (its old key becomes a tombstone).
	var late []collectors.Sample
	late = append(late, blockSample(1, "globex", "dept-globex-late", jan.Add(3*time.Hour)))
	late = append(late, blockHours(feb.Add(2*time.Hour), feb.Add(3*time.Hour))[:6]...)
	moved := blockSample(2, "initech", "dept-initech-moved", feb.Add(-20*time.Hour))
	late = append(late, moved)
	if err := s.InsertSamples(ctx, late); err != nil {
		t.Fatal(err)
	}
	if _, err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	reads = counting.reads.Load()
	second := assertBlocksEqualStore(t, s, svc, qs, "after late samples")
	if counting.reads.Load() == reads {
		t.Error("a new rollup version read no blocks again")
	}
	changed := 0
	for i := range first {
		if fmt.Sprint(first[i]) != fmt.Sprint(second[i]) {
			changed++
		}
	}
	if changed == 0 {
		t.Fatal("the late samples changed no answer: the comparison proves nothing about re-opened hours")
	}

	// Retention drops January's raw samples (invoiced); a late January
	// sample then stays out of the rollup, whose January rows are kept.
	if err := s.MarkPeriodClosed(ctx, jan, time.Now()); err != nil {
		t.Fatal(err)
	}
	ret := rollup.NewRetention(s, rollup.RetentionConfig{RawDays: 30, Schedule: "@daily"},
		func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }, logger)
	if dropped, err := ret.Run(ctx); err != nil || len(dropped) == 0 {
		t.Fatalf("retention dropped %v (%v), want January at least", dropped, err)
	}
	if err := s.InsertSamples(ctx, []collectors.Sample{blockSample(4, "acme", "dept-acme-dropped", jan.Add(5*time.Hour))}); err != nil {
		t.Fatal(err)
	}
	if _, err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	third := assertBlocksEqualStore(t, s, svc, qs, "after retention")
	if fmt.Sprint(third) != fmt.Sprint(second) {
		t.Error("answers changed after retention dropped January's raw samples; the hourly rollups must stay as they were")
	}
}

// Sixteen requests for a month nobody has read yet, at once, read it from
// the store once and get the same answer.
func TestBlockIsReadOnceByConcurrentRequests(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	feb := monthStart(2026, 2)
	if err := s.InsertSamples(ctx, blockHours(feb, feb.Add(48*time.Hour))); err != nil {
		t.Fatal(err)
	}
	if _, err := rollup.New(s, rollup.DefaultConfig(), time.Now, slog.New(slog.DiscardHandler)).Run(ctx); err != nil {
		t.Fatal(err)
	}
	state, _, err := s.LoadRollupState(ctx, rollup.StateKey)
	if err != nil {
		t.Fatal(err)
	}
	counting := &countingStore{Store: s}
	svc := usage.New(counting, billing.Customers{}, time.Now)
	answers := make([][]usage.Row, 16)
	errs := make([]error, 16)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = svc.Rows(ctx, usage.Query{From: feb.Add(time.Duration(i) * time.Hour), To: feb.Add(40 * time.Hour),
				Bucket: usage.BucketDay, GroupBy: []usage.Dimension{usage.DimSKU}, Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}}, state)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if len(answers[i]) == 0 || answers[i][0].Samples == 0 {
			t.Fatalf("request %d: %+v, want acme's usage", i, answers[i])
		}
	}
	if n := counting.reads.Load(); n != 1 {
		t.Errorf("16 requests of acme's February read the store %d times, want once", n)
	}
}
