package serving_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/serving"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
)

// BenchmarkAdmission sends admission requests through the HTTP handler on
// loopback from 32 clients: 300 tenants with concurrency and GPU-hour
// quotas, decided from memory. Reports p50, p99 and decisions per second.
func BenchmarkAdmission(b *testing.B) {
	const tenants = 300
	ctx := context.Background()
	s := storetest.New(b)
	logger := slog.New(slog.DiscardHandler)
	cfg := quota.DefaultConfig()
	cfg.ReservationTTL = time.Second // admissions do not pile up over the run
	for i := range tenants {
		cfg.Rules = append(cfg.Rules, quota.Rule{Tenant: fmt.Sprintf("tenant-%03d", i),
			ConcurrentGPUs: &quota.Limit{Limit: decimal.NewFromInt(1_000_000)}, GPUHours: &quota.Limit{Limit: decimal.NewFromInt(1_000_000_000)}})
	}
	svc := serving.New(s, billing.Customers{}, billing.ChargebackConfig{}, time.Now)
	q, err := serving.NewQuotas(svc, s, cfg, logger)
	if err != nil {
		b.Fatal(err)
	}
	if err := q.Refresh(ctx, nil); err != nil {
		b.Fatal(err)
	}
	k, token, err := auth.NewKey(auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindAdmin}}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	if err := s.SaveKey(ctx, k); err != nil {
		b.Fatal(err)
	}
	scfg := server.DefaultConfig()
	scfg.RateLimit = server.RateLimit{PerSecond: 1e6, Burst: 1e6}
	reg := prometheus.NewRegistry()
	srv := server.New(scfg, reg, logger)
	apiCtx, cancel := context.WithCancel(ctx)
	wait := srv.MountAPI(apiCtx, reg, server.API{Keys: s, Audit: s, Usage: svc, Invoices: svc, Cost: svc, Tenants: svc, Chargeback: svc, Quotas: q})
	ts := httptest.NewServer(srv.Handler())
	defer func() { ts.Close(); cancel(); wait() }()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	var n atomic.Int64
	admit := func() (time.Duration, error) {
		i := n.Add(1)
		body := fmt.Sprintf(`{"tenant":"tenant-%03d","gpu_model":"H100-SXM5-80GB","profile":"3g.40gb","count":%d,"expected_duration":"2h"}`, i%tenants, 1+i%7)
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/admission", strings.NewReader(body))
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
	if _, err := admit(); err != nil {
		b.Fatal(err)
	}
	for _, conns := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", conns), func(b *testing.B) { admissions(b, conns, admit) })
	}
}

// admissions sends b.N decisions from conns clients and reports p50, p99
// and decisions per second.
func admissions(b *testing.B, conns int, admit func() (time.Duration, error)) {
	b.ResetTimer()
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	began := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				d, err := admit()
				if err != nil {
					failed.Store(err)
					return
				}
				lat[i] = d
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		b.Logf("load average: %s", la)
	}
}
