package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/webhook"
)

// insightSample is one 10 s sample of a workload on a device.
func insightSample(gpu, mig, tenant, workload string, start time.Time, gpuUS, smUS, peak uint64, unmeasured meter.Unmeasured) collectors.Sample {
	sku := "H100-SXM5-80GB"
	if mig != "" {
		sku += "/1g.10gb"
	}
	s := collectors.Sample{Host: "h1", GPUUUID: gpu, GPUModel: "H100-SXM5-80GB", MIGUUID: mig, SKU: sku, Tenant: tenant,
		Department: "d-" + tenant, Workload: workload, Start: start, End: start.Add(10 * time.Second),
		Values: meter.Values{GPUMicroseconds: gpuUS, SMActiveMicroseconds: smUS, MemPeakBytes: peak}, Unmeasured: unmeasured}
	dev := gpu
	if mig != "" {
		dev = mig
	}
	s.ID = collectors.SampleID(s.Host, dev, tenant, workload, start)
	return s
}

// TestHoldingsSumWorkloadsPerDeviceAndInterval pins the holdings read: a
// tenant's workloads on one GPU add up per interval (memory peak by
// maximum, SM unmeasured when any workload's was), duplicates count once,
// idle and unattributed time is no holding, the tenant filter holds, and
// bad periods are refused before any query.
func TestHoldingsSumWorkloadsPerDeviceAndInterval(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	from := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	var samples []collectors.Sample
	for i := range 3 {
		at := from.Add(time.Duration(i) * 10 * time.Second)
		un := meter.Unmeasured(0)
		if i == 2 {
			un = meter.UnmeasuredSMActive
		}
		samples = append(samples,
			insightSample("GPU-A", "", "acme", "j1", at, 5_000_000, 1_000_000, 100, 0),
			insightSample("GPU-A", "", "acme", "j2", at, 4_000_000, 2_000_000, 300, un),
			insightSample("GPU-A", "", "", "", at, 1_000_000, 0, 0, 0),
			insightSample("GPU-B", "MIG-1", "globex", "j3", at, 10_000_000, 7_000_000, 50, 0),
			insightSample("GPU-B", "MIG-2", collectors.UnattributedTenant, "j4", at, 10_000_000, 0, 0, 0),
		)
	}
	// An interval of the next hour lies outside the period.
	samples = append(samples, insightSample("GPU-A", "", "acme", "j1", from.Add(time.Hour), 10_000_000, 0, 0, 0))
	for range 2 {
		if err := s.InsertSamples(ctx, samples); err != nil {
			t.Fatal(err)
		}
	}
	hs, err := s.Holdings(ctx, store.InsightsQuery{From: from, To: from.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 {
		t.Fatalf("%d holdings, want acme on GPU-A and globex on MIG-1: %+v", len(hs), hs)
	}
	acme, globex := hs[0], hs[1]
	if acme.Tenant != "acme" || acme.GPUUUID != "GPU-A" || acme.InstanceUUID != "" || acme.SKU != "H100-SXM5-80GB" || acme.Department != "d-acme" || acme.Host != "h1" {
		t.Errorf("acme holding %+v", acme)
	}
	if len(acme.Intervals) != 3 {
		t.Fatalf("acme: %d intervals, want 3", len(acme.Intervals))
	}
	for i, iv := range acme.Intervals {
		want := insights.Interval{Start: from.Add(time.Duration(i) * 10 * time.Second), DurationMicros: 10_000_000, GPUMicros: 9_000_000, SMActiveMicros: 3_000_000, MemPeakBytes: 300}
		if i == 2 {
			want.SMActiveMicros, want.SMUnmeasured = 0, true
		}
		if iv != want {
			t.Errorf("acme interval %d: %+v, want %+v", i, iv, want)
		}
	}
	if globex.Tenant != "globex" || globex.InstanceUUID != "MIG-1" || globex.SKU != "H100-SXM5-80GB/1g.10gb" || len(globex.Intervals) != 3 || globex.Intervals[0].SMActiveMicros != 7_000_000 {
		t.Errorf("globex holding %+v", globex)
	}
	if err := (insights.Holding{}).Validate(); err == nil {
		t.Fatal("an empty holding validates: the check below proves nothing")
	}
	for _, h := range hs {
		if err := h.Validate(); err != nil {
			t.Errorf("%s: the store's holding is not valid input: %v", h.Tenant, err)
		}
	}

	only, err := s.Holdings(ctx, store.InsightsQuery{From: from, To: from.Add(time.Hour), Tenant: "globex"})
	if err != nil {
		t.Fatal(err)
	}
	if len(only) != 1 || only[0].Tenant != "globex" {
		t.Errorf("tenant filter: %+v", only)
	}

	for _, tc := range []struct {
		name string
		q    store.InsightsQuery
		want string
	}{
		{"no period", store.InsightsQuery{}, "both required"},
		{"not a whole hour", store.InsightsQuery{From: from.Add(time.Minute), To: from.Add(time.Hour)}, "not a whole UTC hour"},
		{"backwards", store.InsightsQuery{From: from, To: from.Add(-time.Hour)}, "must be after"},
		{"longer than a quarter", store.InsightsQuery{From: from, To: from.Add(94 * 24 * time.Hour)}, "longer than"},
		{"the unattributed bucket", store.InsightsQuery{From: from, To: from.Add(time.Hour), Tenant: collectors.UnattributedTenant}, "no tenant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Holdings(ctx, tc.q)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestInsightSeriesComeFromTheRollup checks the hourly series per tenant
// and the demand per model against what was inserted, and the capacity
// count of GPUs per model.
func TestInsightSeriesComeFromTheRollup(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	if first, err := s.FirstHour(ctx); err != nil || !first.IsZero() {
		t.Errorf("an empty rollup's first hour: %s, %v; want zero", first, err)
	}
	from := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	var samples []collectors.Sample
	for h := range 3 {
		at := from.Add(time.Duration(h) * time.Hour)
		samples = append(samples,
			insightSample("GPU-A", "", "acme", "j1", at, 10_000_000*uint64(h+1), 0, 0, 0),
			insightSample("GPU-B", "", "globex", "j2", at, 10_000_000, 0, 0, 0),
			insightSample("GPU-C", "", "", "", at, 10_000_000, 0, 0, 0))
	}
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	if err := s.RollupRange(ctx, from, from.Add(3*time.Hour), 1); err != nil {
		t.Fatal(err)
	}
	q := store.InsightsQuery{From: from, To: from.Add(24 * time.Hour)}
	totals, err := s.HourlyGPUTime(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	series := insights.HourlySeries(totals, q.From, q.To, false)
	if len(series) != 2 || series[0].Tenant != "acme" || series[1].Tenant != "globex" {
		t.Fatalf("series %+v", series)
	}
	for _, sr := range series {
		if err := sr.Validate(); err != nil {
			t.Errorf("%s: %v", sr.Tenant, err)
		}
	}
	for h, tot := range totals[:3] { // acme's three hours
		if want := uint64(h+1) * 10_000_000; tot.Key != "acme" || !tot.Hour.Equal(from.Add(time.Duration(h)*time.Hour)) || tot.GPUMicroseconds != want {
			t.Errorf("acme hour %d: %+v, want %d µs", h, tot, want)
		}
	}
	demand, err := s.ModelGPUTime(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(demand) != 3 || demand[0].Key != "H100-SXM5-80GB" {
		t.Fatalf("demand %+v", demand)
	}
	if got := demand[2].GPUMicroseconds; got != 40_000_000 {
		t.Errorf("demand in hour 2: %d µs, want acme 30 s + globex 10 s (idle left out)", got)
	}
	first, err := s.FirstHour(ctx)
	if err != nil || !first.Equal(from) {
		t.Errorf("first hour %s, %v; want %s", first, err, from)
	}
	gpus, err := s.GPUsByModel(ctx, from, from.Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if gpus["H100-SXM5-80GB"] != 3 || len(gpus) != 1 {
		t.Errorf("gpus by model %v, want 3 H100s (idle ones count)", gpus)
	}
}

// TestAnomaliesAreStoredAndSentOnce stores anomalies and announces them
// twice (a run cut short and repeated): the stored ids are found, the
// outbox holds one insight.anomaly event each (event ids follow anomaly
// ids), and the list reads back what was stored.
func TestAnomaliesAreStoredAndSentOnce(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	at := time.Date(2026, 11, 23, 14, 0, 0, 0, time.UTC)
	now := at.Add(2 * time.Hour)
	mk := func(tenant string, start time.Time) insights.Anomaly {
		return insights.Anomaly{ID: insights.AnomalyID(tenant, "gpu_hours", "", insights.Hourly, start), Tenant: tenant, Meter: "gpu_hours",
			Start: start, End: start.Add(time.Hour), Direction: insights.Spike, Observed: decimal.RequireFromString("6.000000001"),
			Expected: decimal.Zero, Spread: decimal.NewFromInt(1), Score: 6, History: 3}
	}
	as := []insights.Anomaly{mk("spiky", at), mk("other", at.Add(time.Hour))}
	pub := webhook.NewPublisher(s, func() time.Time { return now })
	for range 2 {
		if err := pub.AnomaliesFound(ctx, as); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.InsertAnomalies(ctx, as, now); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertAnomalies(ctx, as[:1], now); err != nil { // stored again: still one row
		t.Fatal(err)
	}
	ids, err := s.StoredAnomalyIDs(ctx, at, at.Add(time.Hour))
	if err != nil || len(ids) != 2 || !ids[as[0].ID] || !ids[as[1].ID] {
		t.Fatalf("stored ids %v, %v; want both", ids, err)
	}
	if ids, err := s.StoredAnomalyIDs(ctx, at.Add(2*time.Hour), at.Add(3*time.Hour)); err != nil || len(ids) != 0 {
		t.Errorf("ids outside the range: %v, %v", ids, err)
	}
	evs, err := s.Events(ctx, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("%d events in the outbox, want 2", len(evs))
	}
	for i, ev := range evs {
		if ev.Event.Type != "insight.anomaly" || ev.Event.ID != "evt_anomaly_"+as[i].ID || !strings.Contains(string(ev.Event.Data), as[i].Tenant) {
			t.Errorf("event %d: %+v", i, ev.Event)
		}
	}
	list, err := s.Anomalies(ctx, store.AnomalyQuery{From: at.Add(-24 * time.Hour), To: at.Add(24 * time.Hour), Tenant: "spiky"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != as[0].ID || !list[0].Observed.Equal(as[0].Observed) || !list[0].Start.Equal(at) ||
		!list[0].End.Equal(at.Add(time.Hour)) || list[0].Direction != insights.Spike || !list[0].DetectedAt.Equal(now) || list[0].History != 3 {
		t.Errorf("listed %+v", list)
	}
	all, err := s.Anomalies(ctx, store.AnomalyQuery{From: at.Add(-24 * time.Hour), To: at.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Errorf("all: %d, want 2", len(all))
	}
	if _, err := s.Anomalies(ctx, store.AnomalyQuery{From: at, To: at}); err == nil {
		t.Error("an empty range was accepted")
	}
}
