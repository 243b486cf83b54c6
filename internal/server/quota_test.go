package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/admission"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/usage"
)

func lim(l string) *quota.Limit { return &quota.Limit{Limit: decimal.RequireFromString(l)} }

// quotaServer is the fixture's API with an evaluator refreshed once, and
// acme running two H100s right now.
func quotaServer(t *testing.T, f *fixture, cfg quota.Config, refresh bool) (*httptest.Server, *quota.Service, *prometheus.Registry) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	var running []collectors.Sample
	for g := range 2 {
		x := h100Hour("acme", "research", fmt.Sprintf("GPU-run-%d", g), "train", now.Add(-10*time.Second), 10_000_000)
		x.End = now // ten seconds so far
		running = append(running, x)
	}
	if err := f.store.InsertSamples(ctx, running); err != nil {
		t.Fatal(err)
	}
	api, q := f.quotaAPI(t, cfg, refresh, map[string]string{"team-acme": "acme"})
	ts, _, reg := f.mount(t, api, q)
	return ts, q, reg
}

// quotaFixture is a fixture whose API decides admissions under rules,
// refreshed once, and acme running two H100s right now.
func quotaFixture(t *testing.T, rules ...quota.Rule) (*fixture, *httptest.Server, *quota.Service) {
	t.Helper()
	f := newFixture(t, server.DefaultConfig())
	cfg := quota.DefaultConfig()
	cfg.Rules = rules
	ts, q, _ := quotaServer(t, f, cfg, true)
	return f, ts, q
}

// quotaAPI is the fixture's API with a quota service of cfg (refreshed
// once when refresh is set) and the Kubernetes webhook over namespaces.
func (f *fixture) quotaAPI(t *testing.T, cfg quota.Config, refresh bool, namespaces map[string]string) (server.API, *quota.Service) {
	t.Helper()
	svc := usage.New(f.store, f.customers, time.Now)
	q, err := quota.NewService(svc, f.store, f.customers, cfg, time.Now, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if refresh {
		if err := q.Refresh(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	api := storeAPI(f.store, f.customers, f.chargeback, svc)
	api.Quotas = q
	api.Kubernetes = admission.NewWebhook(q, admission.Config{Namespaces: namespaces, DefaultModel: "H100-SXM5-80GB", DefaultDuration: time.Hour})
	return api, q
}

// mount serves api, with q's metrics registered, until the test ends.
func (f *fixture) mount(t *testing.T, api server.API, q *quota.Service) (*httptest.Server, *server.Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(q)
	ts, srv, _ := serveAPI(t, server.DefaultConfig(), reg, api, nil)
	return ts, srv, reg
}

// post sends body to url as token's and decodes the JSON answer (the
// raw body under "raw" when it is not JSON).
func post(t *testing.T, url, token, body string) (int, map[string]any) {
	t.Helper()
	code, data, _ := send(t, http.MethodPost, url, token, body)
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	if out == nil {
		out = map[string]any{"raw": string(data)}
	}
	return code, out
}

func TestAPIAdmission(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	cfg := quota.DefaultConfig()
	cfg.Rules = []quota.Rule{
		{Tenant: "acme", ConcurrentGPUs: lim("4")},
		{Department: "research", GPUModel: "H100-SXM5-80GB", GPUHours: lim("200")},
		{Tenant: "globex", Spend: lim("100")},
	}
	ts, _, reg := quotaServer(t, f, cfg, true)
	url := ts.URL + "/v1/admission"
	acme := f.tokens["acme"]

	// acme runs 2 H100s now: 2 more fit exactly, a third does not.
	code, d := post(t, url, acme, `{"gpu_model":"H100-SXM5-80GB","count":2,"expected_duration":"1h"}`)
	if code != 200 || d["allowed"] != true || d["admission_id"] == "" || d["headroom"].(map[string]any)["concurrent_gpus"] != "0" {
		t.Fatalf("two more GPUs: %d %v", code, d)
	}
	code, d = post(t, url, acme, `{"gpu_model":"H100-SXM5-80GB","profile":"1g.10gb","count":1,"expected_duration":"1h"}`)
	if code != 200 || d["allowed"] != false || !strings.Contains(fmt.Sprint(d["reason"]), "tenant acme: concurrent_gpus") {
		t.Fatalf("over the limit: %d %v", code, d)
	}
	// research's H100 GPU-hours: acme used 72 and globex 36 in October,
	// not this month; this month acme runs 2 GPUs and has 2 admitted.
	// globex (research) may take 190 GPU-hours of H100 at most.
	code, d = post(t, url, f.tokens["globex"], `{"gpu_model":"H100-SXM5-80GB","count":10,"expected_duration":"20h"}`)
	if code != 200 || d["allowed"] != false || !strings.Contains(fmt.Sprint(d["reason"]), "department research on H100-SXM5-80GB: gpu_hours") {
		t.Fatalf("department GPU-hours: %d %v", code, d)
	}
	code, d = post(t, url, f.tokens["research"], `{"tenant":"globex","gpu_model":"A100-SXM4-80GB","profile":"3g.40gb","count":7,"expected_duration":"2h"}`)
	if code != 200 || d["allowed"] != true || d["gpu_equivalents"] != "3" {
		t.Fatalf("7 x 3g.40gb for globex: %d %v", code, d)
	}

	for name, c := range map[string]struct {
		token, body string
		code        int
	}{
		"another tenant":   {acme, `{"tenant":"globex","gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h"}`, 404},
		"outside the dept": {f.tokens["research"], `{"tenant":"initech","gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h"}`, 404},
		"unknown tenant":   {f.tokens["admin"], `{"tenant":"nobody","gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h"}`, 404},
		"negative count":   {acme, `{"gpu_model":"H100-SXM5-80GB","count":-2,"expected_duration":"1h"}`, 400},
		"unknown profile":  {acme, `{"gpu_model":"H100-SXM5-80GB","profile":"9g.1tb","count":1,"expected_duration":"1h"}`, 400},
		"bad duration":     {acme, `{"gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"soon"}`, 400},
		"unknown field":    {acme, `{"gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h","priority":9}`, 400},
		"not json":         {acme, `count=1`, 400},
		"two objects":      {acme, `{"gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h"}{}`, 400},
		"huge body":        {acme, `{"tenant":"` + strings.Repeat("a", 70_000) + `"}`, 400},
		"bad utf-8":        {acme, "{\"gpu_model\":\"\xff\xfe\",\"count\":1,\"expected_duration\":\"1h\"}", 400},
	} {
		if code, d := post(t, url, c.token, c.body); code != c.code {
			t.Errorf("%s: %d %v, want %d", name, code, d, c.code)
		}
	}

	// /v1/quotas in each scope.
	subjects := func(token string) string {
		_, body, _ := send(t, http.MethodGet, ts.URL+"/v1/quotas", token, "")
		var qs struct {
			Quotas []struct{ Subject, Metric string }
		}
		_ = json.Unmarshal(body, &qs)
		var out []string
		for _, q := range qs.Quotas {
			out = append(out, q.Subject+" "+q.Metric)
		}
		return strings.Join(out, ", ")
	}
	if got := subjects(acme); got != "tenant acme concurrent_gpus" {
		t.Errorf("acme sees quotas %q", got)
	}
	if got := subjects(f.tokens["research"]); got != "department research on H100-SXM5-80GB gpu_hours, tenant acme concurrent_gpus, tenant globex spend" {
		t.Errorf("research sees quotas %q", got)
	}
	// And /metrics carries the state.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "gpumeter_quota_used" {
			found = true
		}
	}
	if !found {
		t.Error("no gpumeter_quota_used in /metrics")
	}
}

// Before the first refresh (or with data older than stale_after) the
// configured policy answers: fail closed denies, fail open allows.
func TestAPIAdmissionWithStaleData(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	for _, mode := range []quota.OnStale{quota.FailClosed, quota.FailOpen} {
		cfg := quota.DefaultConfig()
		cfg.OnStale = mode
		cfg.Rules = []quota.Rule{{Tenant: "acme", ConcurrentGPUs: lim("100")}}
		ts, _, _ := quotaServer(t, f, cfg, false)
		code, d := post(t, ts.URL+"/v1/admission", f.tokens["acme"], `{"gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h"}`)
		if code != 200 || d["allowed"] != (mode == quota.FailOpen) || d["stale"] != true {
			t.Errorf("%s: %d %v", mode, code, d)
		}
	}
}

// Concurrent admissions through HTTP never exceed the quota together.
func TestAPIAdmissionUnderConcurrency(t *testing.T) {
	f, ts, _ := quotaFixture(t, quota.Rule{Tenant: "acme", ConcurrentGPUs: lim("12")})
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, d := post(t, ts.URL+"/v1/admission", f.tokens["admin"], `{"tenant":"acme","gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"30m"}`)
			if d["allowed"] == true {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if allowed != 10 { // 12 minus the 2 running
		t.Fatalf("%d admitted, want 10", allowed)
	}
}

// A threshold crossed by measured use is reported once, through the
// refresher's callback (serve puts it in the webhook outbox).
func TestQuotaRefreshReportsCrossingsOnce(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	cfg := quota.DefaultConfig()
	cfg.Rules = []quota.Rule{{Tenant: "acme", ConcurrentGPUs: &quota.Limit{Limit: decimal.NewFromInt(4), Soft: "25%"}}}
	_, q, _ := quotaServer(t, f, cfg, false)
	var got crossings
	for range 2 {
		if err := q.Refresh(context.Background(), &got); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0].Subject != "tenant acme" || got[0].Level != "soft" || !got[0].Value.Equal(decimal.NewFromInt(2)) {
		t.Fatalf("crossings %+v, want acme's soft threshold once at 2 GPUs", got)
	}
}

// The Kubernetes webhook over HTTP: a Pod that fits is allowed, one that
// would break acme's hard limit is denied with the reason, malformed
// reviews are 400s.
func TestAPIKubernetesAdmission(t *testing.T) {
	f, ts, _ := quotaFixture(t, quota.Rule{Tenant: "acme", ConcurrentGPUs: lim("4")})
	pod := func(gpus string) string {
		return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","kind":{"group":"","version":"v1","kind":"Pod"},` +
			`"namespace":"team-acme","operation":"CREATE","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"team-acme"},` +
			`"spec":{"containers":[{"name":"c","image":"x","resources":{"limits":{"nvidia.com/gpu":"` + gpus + `"}}}]}}}}`
	}
	url := ts.URL + "/v1/admission/k8s"
	code, d := post(t, url, f.tokens["admin"], pod("2"))
	resp, _ := d["response"].(map[string]any)
	if code != 200 || resp["allowed"] != true || resp["uid"] != "u-1" {
		t.Fatalf("2 GPUs next to 2 running: %d %v", code, d)
	}
	code, d = post(t, url, f.tokens["admin"], pod("1"))
	resp, _ = d["response"].(map[string]any)
	status, _ := resp["status"].(map[string]any)
	if code != 200 || resp["allowed"] != false || !strings.Contains(fmt.Sprint(status["message"]), "would break a quota of tenant acme") {
		t.Fatalf("one more: %d %v", code, d)
	}
	for name, body := range map[string]string{"not json": "{", "not a review": `{"kind":"Pod"}`, "huge": strings.Repeat(" ", 2<<20) + pod("1")} {
		if code, d := post(t, url, f.tokens["admin"], body); code != 400 && code != 413 {
			t.Errorf("%s: %d %v", name, code, d)
		}
	}
}

// crossings records what a refresh announced.
type crossings []quota.Crossing

func (c *crossings) QuotaCrossed(_ context.Context, cs []quota.Crossing) error {
	*c = append(*c, cs...)
	return nil
}
