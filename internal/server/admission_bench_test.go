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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// BenchmarkAdmission sends admission requests through the HTTP handler on
// loopback from 1 and 32 clients: 300 tenants with concurrency and
// GPU-hour quotas, decided from memory. Reports p50, p99 and decisions
// per second as the clients see them, and server_p99_ms, the time the
// server spent in the handler chain (what the request-duration histogram
// in /metrics shows).
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
	for i := range tenants {
		cfg.Rules = append(cfg.Rules, quota.Rule{Tenant: fmt.Sprintf("tenant-%03d", i),
			ConcurrentGPUs: &quota.Limit{Limit: decimal.NewFromInt(1_000_000)}, GPUHours: &quota.Limit{Limit: decimal.NewFromInt(1_000_000_000)}})
	}
	svc := usage.New(s, billing.Customers{}, time.Now)
	q, err := quota.NewService(svc, s, billing.Customers{}, cfg, time.Now, logger)
	if err != nil {
		b.Fatal(err)
	}
	if err := q.Refresh(ctx, nil); err != nil {
		b.Fatal(err)
	}
	api := benchServices(s, svc, nopAudit{})
	api.Quotas = q
	var handler *timedHandler
	ts, token, stop := benchAPI(b, s, auth.Scope{Kind: auth.KindAdmin}, api, func(h http.Handler) http.Handler {
		handler = &timedHandler{next: h}
		return handler
	})
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	var n atomic.Int64
	var sample []byte // one answer, for the floor's fixed body
	post := func(url string) func() error {
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
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d: %s", resp.StatusCode, data)
			}
			if sample == nil {
				sample = data
			}
			return nil
		}
	}
	admit := post(ts.URL + "/v1/admission")
	if err := admit(); err != nil {
		b.Fatal(err)
	}
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = w.Write(sample)
	}))
	defer bare.Close()
	floor := post(bare.URL + "/v1/admission")
	for _, conns := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", conns), func(b *testing.B) { admissions(b, conns, 0, admit, handler) })
		b.Run(fmt.Sprintf("clients=%d/floor", conns), func(b *testing.B) { admissions(b, conns, 0, floor, nil) })
	}
	for _, perSecond := range []int{1000, 4000} {
		b.Run(fmt.Sprintf("clients=32/paced=%d", perSecond), func(b *testing.B) { admissions(b, 32, perSecond, admit, handler) })
		b.Run(fmt.Sprintf("clients=32/paced=%d/floor", perSecond), func(b *testing.B) { admissions(b, 32, perSecond, floor, nil) })
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

// admissions sends b.N requests from conns clients and reports p50, p99
// and requests per second. With perSecond > 0 the clients together send
// at that rate, each request sent when due and timed from then.
func admissions(b *testing.B, conns, perSecond int, send func() error, server *timedHandler) {
	if server != nil {
		server.take()
	}
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
				if perSecond > 0 {
					time.Sleep(time.Until(began.Add(time.Duration(i) * time.Second / time.Duration(perSecond))))
				}
				start := time.Now()
				if err := send(); err != nil {
					failed.Store(err)
					return
				}
				lat[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(percentile(lat, 0.50), "p50_ms")
	b.ReportMetric(percentile(lat, 0.99), "p99_ms")
	if server != nil {
		b.ReportMetric(percentile(server.take(), 0.99), "server_p99_ms")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
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

type nopAudit struct{}

func (nopAudit) RecordAudit(context.Context, []auth.AuditEntry) error { return nil }
