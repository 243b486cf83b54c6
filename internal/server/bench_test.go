package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// BenchmarkMonthToDateUsage loads the API on loopback: 32 connections ask
// for one tenant's month-to-date usage by day and SKU, over 30 days of
// hourly rollups for 1,000 GPUs shared by 300 tenants. It reports the
// p50 and p99 latency and requests per second; b.N requests in all.
func BenchmarkMonthToDateUsage(b *testing.B) {
	const gpus, tenants, days, conns = 1000, 300, 30, 32
	ctx := context.Background()
	s := storetest.New(b)
	logger := slog.New(slog.DiscardHandler)
	start := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	chunk := make([]collectors.Sample, 0, 100_000)
	for h := start; h.Before(start.Add(days * 24 * time.Hour)); h = h.Add(time.Hour) {
		for g := range gpus {
			tenant := fmt.Sprintf("tenant-%03d", g%tenants)
			sku := []string{"H100-SXM5-80GB", "A100-SXM4-80GB"}[g%2]
			x := collectors.Sample{Host: fmt.Sprintf("host-%03d", g/8), GPUUUID: fmt.Sprintf("GPU-%04d", g), GPUModel: sku, SKU: sku,
				Tenant: tenant, Department: fmt.Sprintf("dept-%d", g%7), Workload: "job", Start: h, End: h.Add(time.Hour),
				Values: meter.Values{GPUMicroseconds: 3_600_000_000, SMActiveMicroseconds: 1_800_000_000, EnergyMillijoules: 2_000_000_000}}
			x.ID = collectors.SampleID(x.Host, x.GPUUUID, x.Tenant, x.Workload, x.Start)
			chunk = append(chunk, x)
		}
		if len(chunk) >= 99_000 {
			if err := s.InsertSamples(ctx, chunk); err != nil {
				b.Fatal(err)
			}
			chunk = chunk[:0]
		}
	}
	if err := s.InsertSamples(ctx, chunk); err != nil {
		b.Fatal(err)
	}
	if _, err := rollup.New(s, rollup.DefaultConfig(), time.Now, logger).Run(ctx); err != nil {
		b.Fatal(err)
	}
	svc := usage.New(s, billing.Customers{}, time.Now)
	ts, token, stop := benchAPI(b, s, auth.Scope{Kind: auth.KindTenant, Name: "tenant-042"}, benchServices(s, svc, s), nil)
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}}
	get := func(url string) (time.Duration, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("status %d", resp.StatusCode)
		}
		return time.Since(t0), nil
	}
	same := ts.URL + "/v1/usage?from=2026-10-01&to=2026-10-31&step=day&group_by=sku"
	if _, err := get(same); err != nil { // warm the key cache and the connection pool
		b.Fatal(err)
	}
	// cached: a dashboard polling the month so far, the same query each
	// time. distinct: every request ends at another hour, so none is
	// answered from the cache and each reads ClickHouse.
	b.Run("cached", func(b *testing.B) { load(b, conns, func(int) string { return same }, get) })
	var asked atomic.Int64 // across runs, so no query repeats
	b.Run("distinct", func(b *testing.B) {
		load(b, conns, func(int) string {
			n := asked.Add(1)
			from := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(n/700) * time.Hour)
			to := time.Date(2026, 10, 31, 0, 0, 0, 0, time.UTC).Add(-time.Duration(n%700) * time.Hour)
			return ts.URL + "/v1/usage?from=" + from.Format(time.RFC3339) + "&to=" + to.Format(time.RFC3339) + "&step=day&group_by=sku"
		}, get)
	})
}

// load sends b.N requests over conns connections and reports p50, p99
// and requests per second.
func load(b *testing.B, conns int, urlFor func(int) string, get func(string) (time.Duration, error)) {
	b.ResetTimer()
	lat := make([]time.Duration, b.N)
	var next int64 = -1
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	began := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				next++
				i := next
				mu.Unlock()
				if i >= int64(b.N) {
					return
				}
				d, err := get(urlFor(int(i)))
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				lat[i] = d
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		b.Logf("load average: %s", la)
	}
}

// benchServices are the API's services over s, usage answered by svc and
// audit entries written to audit.
func benchServices(s *store.Store, svc *usage.Service, audit server.AuditSink) server.API {
	return server.API{Keys: s, Audit: audit, Usage: svc, Invoices: billing.NewInvoiceService(s, billing.Customers{}.Issuer.ID),
		Cost: svc, Tenants: svc, Chargeback: billing.NewChargebackService(s, billing.ChargebackConfig{})}
}

// benchAPI serves api (wrapped by wrap, when given) with no rate limit and
// returns its test server, a token of a key of scope stored in s, and a
// stop function.
func benchAPI(b *testing.B, s *store.Store, scope auth.Scope, api server.API, wrap func(http.Handler) http.Handler) (*httptest.Server, string, func()) {
	b.Helper()
	ctx := context.Background()
	k, token, err := auth.NewKey(auth.NewKeyRequest{Scope: scope}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	if err := s.SaveKey(ctx, k); err != nil {
		b.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.RateLimit = server.RateLimit{PerSecond: 1e6, Burst: 1e6}
	reg := prometheus.NewRegistry()
	srv := server.New(cfg, reg, slog.New(slog.DiscardHandler))
	apiCtx, cancel := context.WithCancel(ctx)
	wait := srv.MountAPI(apiCtx, reg, api)
	var h http.Handler = srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	return ts, token, func() { ts.Close(); cancel(); wait() }
}
