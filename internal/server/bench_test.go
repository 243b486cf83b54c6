package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// BenchmarkMonthToDateUsage loads the API on loopback: 32 connections ask
// for one tenant's month-to-date usage by day and SKU, over 30 days of
// hourly rollups for 1,000 GPUs shared by 300 tenants. It reports the
// p50 and p99 latency and requests per second; b.N requests in all, in
// each of three cases: cached (the same query), distinct (one tenant,
// every range another) and tenants (every request another tenant and
// range, on a server that has read nobody's month yet).
func BenchmarkMonthToDateUsage(b *testing.B) {
	const gpus, tenants, days, conns = 1000, 300, 30, 32
	ctx := context.Background()
	s := storetest.New(b)
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
	rollUp(b, s)
	svc := usage.New(s, billing.Customers{}, time.Now)
	ts, token := benchAPI(b, s, auth.Scope{Kind: auth.KindTenant, Name: "tenant-042"}, storeAPI(s, billing.Customers{}, billing.ChargebackConfig{}, svc), nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}}
	getAs := func(token, url string) error {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	get := func(url string) error { return getAs(token, url) }
	same := ts.URL + "/v1/usage?from=2026-10-01&to=2026-10-31&step=day&group_by=sku"
	if err := get(same); err != nil { // warm the key cache and the connection pool
		b.Fatal(err)
	}
	// cached: a dashboard polling the month so far, the same query each
	// time. distinct: every request ends at another hour, so none is
	// answered from the cache and each reads ClickHouse.
	b.Run("cached", func(b *testing.B) { load(b, conns, 0, func() error { return get(same) }, "req/s", nil) })
	var asked atomic.Int64 // across runs, so no query repeats
	distinctURL := func(base string, n int64) string {
		from := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(n/700) * time.Hour)
		to := time.Date(2026, 10, 31, 0, 0, 0, 0, time.UTC).Add(-time.Duration(n%700) * time.Hour)
		return base + "/v1/usage?from=" + from.Format(time.RFC3339) + "&to=" + to.Format(time.RFC3339) + "&step=day&group_by=sku"
	}
	b.Run("distinct", func(b *testing.B) {
		load(b, conns, 0, func() error { return get(distinctURL(ts.URL, asked.Add(1))) }, "req/s", nil)
	})
	// tenants: every request is another tenant's portal (the 300 in
	// turn, each with a key of its own) asking another range, on a fresh
	// server, as after a rollup run: a tenant's first request reads its
	// month from ClickHouse (the first 300 requests), its later ones are
	// answered from that month.
	tokens := make([]string, tenants)
	for i := range tenants {
		_, tokens[i] = saveKey(b, s, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindTenant, Name: fmt.Sprintf("tenant-%03d", i)}}, time.Now())
	}
	b.Run("tenants", func(b *testing.B) {
		cfg := server.DefaultConfig()
		cfg.RateLimit = server.RateLimit{PerSecond: 1e6, Burst: 1e6}
		fresh, _, stop := serveAPI(b, cfg, prometheus.NewRegistry(), storeAPI(s, billing.Customers{}, billing.ChargebackConfig{},
			usage.New(s, billing.Customers{}, time.Now)), nil)
		defer stop()
		for _, tok := range tokens { // keys cached, as in a running server
			if err := getAs(tok, fresh.URL+"/v1/tenants"); err != nil {
				b.Fatal(err)
			}
		}
		var i atomic.Int64
		load(b, conns, 0, func() error {
			n := i.Add(1) - 1
			return getAs(tokens[n%tenants], distinctURL(fresh.URL, asked.Add(1)))
		}, "req/s", nil)
	})
}

// BenchmarkAdmission sends admission requests through the HTTP handler on
// loopback from 1 and 32 clients: 300 tenants with concurrency and
// GPU-hour quotas, each a billing customer, decided from memory. Each
// load runs twice, credits=off (every customer credit_then_invoice) and
// credits=on (every customer credit_only, with a prepaid grant that
// covers the whole run, so each admission is checked against its
// balance less its holds and holds its hour of spend), one after the
// other in the same process. Reports p50, p99 and decisions per second as
// the clients see them, and server_p99_ms, the time the server spent in
// the handler chain (what the request-duration histogram in /metrics
// shows).
//
// The clients share the machine's cores with the server, so in the same
// run it measures two references: floor, the same client against a bare
// net/http handler that answers a fixed body of the same size (what
// Go's HTTP stack alone costs here), and paced, 32 clients sending at a
// fixed total rate (an offered load, not a closed loop whose latency is
// its own queue), each request timed from when it was sent: timing from
// its due time would add the ~1 ms a sleeping goroutine takes to wake on
// this VM, which the floor shows as well.
func BenchmarkAdmission(b *testing.B) {
	const tenants = 300
	ctx := context.Background()
	s := storetest.New(b)
	logger := slog.New(slog.DiscardHandler)
	cfg := quota.DefaultConfig()
	cfg.ReservationTTL = time.Second // admissions do not pile up over the run
	pairs := make([][2]string, 0, tenants)
	for i := range tenants {
		tenant := fmt.Sprintf("tenant-%03d", i)
		cfg.Rules = append(cfg.Rules, quota.Rule{Tenant: tenant,
			ConcurrentGPUs: &quota.Limit{Limit: decimal.NewFromInt(1_000_000)}, GPUHours: &quota.Limit{Limit: decimal.NewFromInt(1_000_000_000)}})
		pairs = append(pairs, [2]string{tenant, "research"})
	}
	path := filepath.Join(b.TempDir(), "book.yaml")
	if err := os.WriteFile(path, []byte(book+"  H100-SXM5-80GB/3g.40gb: {meters: {gpu_hours: {unit_price: \"1.40\"}}}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	// One service per mode over the same store and tenants, as serve
	// wires it: the credit gate on, and credit_only customers or none.
	serveMode := func(settlement credits.Settlement) (*httptest.Server, string, *timedHandler) {
		cs := customersOn(path, pairs...)
		for i := range cs.Customers {
			cs.Customers[i].Credits.Settlement = settlement
		}
		svc := usage.New(s, cs, time.Now)
		ccs, err := cs.CreditCustomers()
		if err != nil {
			b.Fatal(err)
		}
		balances := credits.NewService(s, svc, ccs, time.Now)
		if settlement == credits.CreditOnly {
			for _, c := range cs.Customers {
				if _, err := balances.Grant(ctx, credits.Grant{Tenant: c.Tenant, Kind: credits.Prepaid, Amount: decimal.NewFromInt(1_000_000_000),
					EffectiveAt: time.Now().Add(-time.Minute), Source: "admission benchmark"}); err != nil {
					b.Fatal(err)
				}
			}
		}
		q, err := quota.NewService(svc, s, cs, cfg, time.Now, logger)
		if err != nil {
			b.Fatal(err)
		}
		if err := q.GateCredits(balances, credits.DefaultSettings()); err != nil {
			b.Fatal(err)
		}
		if err := q.Refresh(ctx, nil); err != nil {
			b.Fatal(err)
		}
		api := storeAPI(s, cs, billing.ChargebackConfig{}, svc)
		api.Audit, api.Quotas = nopAudit{}, q
		var handler *timedHandler
		ts, token := benchAPI(b, s, auth.Scope{Kind: auth.KindAdmin}, api, func(h http.Handler) http.Handler {
			handler = &timedHandler{next: h}
			return handler
		})
		return ts, token, handler
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	var n atomic.Int64
	var sample []byte // one answer, for the floor's fixed body
	post := func(url, token, want string) func() error {
		return func() error {
			i := n.Add(1)
			body := fmt.Sprintf(`{"tenant":"tenant-%03d","gpu_model":"H100-SXM5-80GB","profile":"3g.40gb","count":%d,"expected_duration":"2h"}`, i%tenants, 1+i%7)
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(data), want) {
				return fmt.Errorf("status %d: %s", resp.StatusCode, data)
			}
			if sample == nil {
				sample = data
			}
			return nil
		}
	}
	type mode struct {
		name    string
		admit   func() error
		handler *timedHandler
	}
	var modes []mode
	for _, m := range []struct {
		name       string
		settlement credits.Settlement
		want       string // in every answer: admitted, by the quotas alone or with the credit
	}{{"off", credits.CreditThenInvoice, `"reason":"within every quota"`}, {"on", credits.CreditOnly, `the balance covers it`}} {
		ts, token, handler := serveMode(m.settlement)
		admit := post(ts.URL+"/v1/admission", token, m.want)
		if err := admit(); err != nil {
			b.Fatalf("credits=%s: %v", m.name, err)
		}
		modes = append(modes, mode{m.name, admit, handler})
	}
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = w.Write(sample)
	}))
	defer bare.Close()
	floor := post(bare.URL+"/v1/admission", "", "")
	for _, conns := range []int{1, 32} {
		for _, m := range modes {
			b.Run(fmt.Sprintf("clients=%d/credits=%s", conns, m.name), func(b *testing.B) { load(b, conns, 0, m.admit, "decisions/s", m.handler) })
		}
		b.Run(fmt.Sprintf("clients=%d/floor", conns), func(b *testing.B) { load(b, conns, 0, floor, "decisions/s", nil) })
	}
	for _, perSecond := range []int{1000, 4000} {
		for _, m := range modes {
			b.Run(fmt.Sprintf("clients=32/paced=%d/credits=%s", perSecond, m.name), func(b *testing.B) { load(b, 32, perSecond, m.admit, "decisions/s", m.handler) })
		}
		b.Run(fmt.Sprintf("clients=32/paced=%d/floor", perSecond), func(b *testing.B) { load(b, 32, perSecond, floor, "decisions/s", nil) })
	}
}

// timedHandler records how long each request spent in the handler.
type timedHandler struct {
	next http.Handler
	mu   sync.Mutex
	lat  []time.Duration
}

func (h *timedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	h.next.ServeHTTP(w, r)
	d := time.Since(t0)
	h.mu.Lock()
	h.lat = append(h.lat, d)
	h.mu.Unlock()
}

func (h *timedHandler) take() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.lat
	h.lat = nil
	return out
}

// load sends b.N requests from conns clients, request sending one, and
// reports p50, p99 and requests per second, the last as rateUnit. With
// perSecond > 0 the clients together send at that rate, each request
// sent when due and timed from then. With handler given it reports
// server_p99_ms too, the time the requests spent in it.
func load(b *testing.B, conns, perSecond int, request func() error, rateUnit string, handler *timedHandler) {
	if handler != nil {
		handler.take()
	}
	b.ResetTimer()
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
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
				if perSecond > 0 {
					time.Sleep(time.Until(began.Add(time.Duration(i) * time.Second / time.Duration(perSecond))))
				}
				start := time.Now()
				if err := request(); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				lat[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.ReportMetric(percentile(lat, 0.50), "p50_ms")
	b.ReportMetric(percentile(lat, 0.99), "p99_ms")
	if handler != nil {
		b.ReportMetric(percentile(handler.take(), 0.99), "server_p99_ms")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), rateUnit)
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		b.Logf("load average: %s", la)
	}
}

func percentile(lat []time.Duration, p float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
}

// benchAPI serves api (wrapped by wrap, when given) with no rate limit
// until the benchmark ends, and returns its test server and a token of a
// key of scope stored in s.
func benchAPI(b *testing.B, s *store.Store, scope auth.Scope, api server.API, wrap func(http.Handler) http.Handler) (*httptest.Server, string) {
	b.Helper()
	_, token := saveKey(b, s, auth.NewKeyRequest{Scope: scope}, time.Now())
	cfg := server.DefaultConfig()
	cfg.RateLimit = server.RateLimit{PerSecond: 1e6, Burst: 1e6}
	ts, _, _ := serveAPI(b, cfg, prometheus.NewRegistry(), api, wrap)
	return ts, token
}

type nopAudit struct{}

func (nopAudit) RecordAudit(context.Context, []auth.AuditEntry) error { return nil }
