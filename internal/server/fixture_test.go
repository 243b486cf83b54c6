package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/internal/webhook"
)

const book = `version: api-1
currency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}
skus:
  H100-SXM5-80GB: {meters: {gpu_hours: {unit_price: "3.00"}}}
  A100-SXM4-80GB/3g.40gb: {meters: {gpu_hours: {unit_price: "1.75"}}}
`

// fixture: three tenants in two departments over 2-4 October 2026
// (rolled up and invoiced for October) and a sample in the current hour
// (raw only); keys of every scope; the API on an httptest server.
type fixture struct {
	store  *store.Store
	srv    *httptest.Server
	tokens map[string]string // name → token
	keyIDs map[string]string
	invs   map[string]*billing.Invoice // tenant → October invoice
	stop   func()
	// customers and chargeback are the fixture's config, for tests that
	// build a server of their own.
	customers  billing.Customers
	chargeback billing.ChargebackConfig
}

func newFixture(t *testing.T, cfg server.Config) *fixture {
	t.Helper()
	ctx := context.Background()
	s := storetest.New(t)
	var samples []collectors.Sample
	add := func(tenant, dept, sku string, h time.Time, us uint64) {
		x := h100Hour(tenant, dept, "GPU-"+tenant, "job-"+tenant, h, us)
		model, profile, _ := strings.Cut(sku, "/")
		x.GPUModel, x.MIGProfile, x.SKU = model, profile, sku
		if profile != "" {
			x.MIGUUID = "MIG-" + tenant
			x.ID = collectors.SampleID(x.Host, x.GPUUUID+x.MIGUUID, x.Tenant, x.Workload, x.Start)
		}
		samples = append(samples, x)
	}
	for h := time.Date(2026, 10, 2, 0, 0, 0, 0, time.UTC); h.Before(time.Date(2026, 10, 5, 0, 0, 0, 0, time.UTC)); h = h.Add(time.Hour) {
		add("acme", "research", "H100-SXM5-80GB", h, 3_600_000_000)
		add("acme", "research", "A100-SXM4-80GB/3g.40gb", h, 3_600_000_000*3/7)
		add("globex", "research", "H100-SXM5-80GB", h, 1_800_000_000)
		add("initech", "ops", "H100-SXM5-80GB", h, 900_000_000)
	}
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	rollUp(t, s)
	// After the rollup: a sample of this hour, in raw samples only.
	samples = samples[:0]
	add("acme", "research", "H100-SXM5-80GB", time.Now().UTC().Truncate(time.Hour), 60_000_000)
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}

	path := writeBook(t, book)
	cs := customersOn(path, [2]string{"acme", "research"}, [2]string{"globex", "research"}, [2]string{"initech", "ops"})
	rep, err := invoiceRunner(s, cs).Run(ctx, billing.RunRequest{Period: "2026-10"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{store: s, tokens: map[string]string{}, keyIDs: map[string]string{}, invs: map[string]*billing.Invoice{},
		customers: cs, chargeback: billing.ChargebackConfig{Book: path, Idle: "own_row"}}
	for _, o := range rep.Outcomes {
		if o.Action != billing.ActionFinalized {
			t.Fatalf("%s", o)
		}
		f.invs[o.Tenant] = o.Invoice
	}

	now := time.Now()
	for name, r := range map[string]auth.NewKeyRequest{
		"admin":    {Scope: auth.Scope{Kind: auth.KindAdmin}},
		"acme":     {Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}},
		"globex":   {Scope: auth.Scope{Kind: auth.KindTenant, Name: "globex"}},
		"research": {Scope: auth.Scope{Kind: auth.KindDepartment, Name: "research"}},
		"portal":   {Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}, Portal: true, Expires: time.Hour},
		"expired":  {Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}, Expires: time.Second},
		"revoked":  {Scope: auth.Scope{Kind: auth.KindAdmin}},
	} {
		created := now
		if name == "expired" {
			created = now.Add(-time.Hour)
		}
		f.keyIDs[name], f.tokens[name] = saveKey(t, s, r, created)
	}
	if _, err := s.RevokeKey(ctx, f.keyIDs["revoked"], now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}

	f.srv, f.stop = f.serve(t, cfg, time.Now)
	return f
}

// h100Hour is an hour from start of an H100 (gpu, on the tenant's host)
// held by workload of tenant in dept, us GPU-microseconds of it in use.
func h100Hour(tenant, dept, gpu, workload string, start time.Time, us uint64) collectors.Sample {
	x := collectors.Sample{Host: "host-" + tenant, GPUUUID: gpu, GPUModel: "H100-SXM5-80GB", SKU: "H100-SXM5-80GB",
		Tenant: tenant, Department: dept, Workload: workload, Start: start, End: start.Add(time.Hour),
		Values: meter.Values{GPUMicroseconds: us}}
	x.ID = collectors.SampleID(x.Host, x.GPUUUID, x.Tenant, x.Workload, x.Start)
	return x
}

// rollUp runs the hourly rollup over s once.
func rollUp(tb testing.TB, s *store.Store) {
	tb.Helper()
	if _, err := rollup.New(s, rollup.DefaultConfig(), time.Now, slog.New(slog.DiscardHandler)).Run(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// writeBook writes a price book to a file of the test's and returns its
// path.
func writeBook(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "book.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// customersOn are GPU Cloud's USD customers, one per tenant and
// department pair, every one priced by the book at path.
func customersOn(path string, tenantDepts ...[2]string) billing.Customers {
	cs := billing.Customers{Issuer: billing.Issuer{ID: "gc", Name: "GPU Cloud", NumberPrefix: "GC-"}, Schedule: billing.DefaultInvoiceSchedule}
	for _, c := range tenantDepts {
		cs.Customers = append(cs.Customers, billing.Customer{Tenant: c[0], Department: c[1], Name: c[0], Currency: "USD", Book: path})
	}
	return cs
}

// invoiceRunner is the invoice runner over s for cs, with a lease short
// enough for a test.
func invoiceRunner(s *store.Store, cs billing.Customers) *billing.Runner {
	return billing.NewRunner(s, cs, billing.LeaseConfig{TTL: 30 * time.Second, Settle: 2 * time.Second, Retry: 200 * time.Millisecond},
		time.Now, slog.New(slog.DiscardHandler))
}

// saveKey makes a key of r, created at created, stores it in s and
// returns its id and token.
func saveKey(tb testing.TB, s *store.Store, r auth.NewKeyRequest, created time.Time) (id, token string) {
	tb.Helper()
	k, token, err := auth.NewKey(r, created)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.SaveKey(context.Background(), k); err != nil {
		tb.Fatal(err)
	}
	return k.ID, token
}

// storeAPI is the API's services over s for the customers cs, usage and
// cost answered by svc; the caller adds quotas and insights.
func storeAPI(s *store.Store, cs billing.Customers, cb billing.ChargebackConfig, svc *usage.Service) server.API {
	return server.API{Keys: s, Audit: s, Usage: svc, Invoices: billing.NewInvoiceService(s, cs.Issuer.ID), Cost: svc, Tenants: svc,
		Chargeback: billing.NewChargebackService(s, cb)}
}

// serveAPI mounts api on a server of cfg, whose metrics go to reg, and
// serves it (through wrap, when given) on an httptest server. stop
// closes both; it runs when the test ends as well.
func serveAPI(tb testing.TB, cfg server.Config, reg *prometheus.Registry, api server.API,
	wrap func(http.Handler) http.Handler) (ts *httptest.Server, srv *server.Server, stop func()) {
	tb.Helper()
	srv = server.New(cfg, reg, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	wait := srv.MountAPI(ctx, reg, api)
	var h http.Handler = srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	ts = httptest.NewServer(h)
	stop = func() { ts.Close(); cancel(); wait() }
	tb.Cleanup(stop)
	return ts, srv, stop
}

// serve mounts the API over the fixture's store, customers and chargeback
// on an httptest server, closed when the test ends; now is the services'
// clock (month to date, the trend).
func (f *fixture) serve(t *testing.T, cfg server.Config, now func() time.Time) (*httptest.Server, func()) {
	t.Helper()
	api := storeAPI(f.store, f.customers, f.chargeback, usage.New(f.store, f.customers, now))
	api.Insights = f.insights(t, now)
	ts, _, stop := serveAPI(t, cfg, prometheus.NewRegistry(), api, nil)
	return ts, stop
}

// insights is the insights service over the fixture's store, every
// customer priced, on the clock now.
func (f *fixture) insights(t *testing.T, now func() time.Time) *insights.Service {
	t.Helper()
	prices := insights.Prices{ByTenant: map[string]insights.Priced{}}
	for _, c := range f.customers.Customers {
		b, k, err := billing.LoadPricing(c, os.ReadFile)
		if err != nil {
			t.Fatal(err)
		}
		prices.ByTenant[c.Tenant] = insights.Priced{TenantPricing: insights.TenantPricing{Book: b, Contract: k}, Location: time.UTC}
	}
	return insights.New(store.NewInsightsReader(f.store), webhook.NewPublisher(f.store, time.Now), prices, now, slog.New(slog.DiscardHandler))
}

func (f *fixture) get(t *testing.T, token, path string) (int, []byte, http.Header) {
	t.Helper()
	return send(t, http.MethodGet, f.srv.URL+path, token, "")
}

// send makes a request to url with token as its bearer (none when empty)
// and body as its JSON body (none when empty).
func send(t *testing.T, method, url, token, body string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data, resp.Header
}
