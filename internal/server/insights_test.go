package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/insightsvc"
)

// fakeInsights records the request each call got.
type fakeInsights struct {
	mu   sync.Mutex
	last insightsvc.Request
	err  error
}

func (f *fakeInsights) record(r insightsvc.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = r
	return f.err
}

func (f *fakeInsights) Efficiency(_ context.Context, r insightsvc.Request, _ *insights.IdleParams) (insights.EfficiencyReport, error) {
	return insights.EfficiencyReport{From: r.From, To: r.To, Tenants: []insights.TenantEfficiency{{Tenant: "acme"}}}, f.record(r)
}

func (f *fakeInsights) RightSize(_ context.Context, r insightsvc.Request) (insights.RightSizeReport, error) {
	return insights.RightSizeReport{From: r.From, To: r.To}, f.record(r)
}

func (f *fakeInsights) Stored(_ context.Context, r insightsvc.Request) ([]insightsvc.StoredAnomaly, error) {
	return nil, f.record(r)
}

// TestInsightsRoutesScopeAndValidate: every parameter is checked (400
// before the service is called), a tenant key is held to its tenant, a
// department key to its department, and service input errors are 400s.
func TestInsightsRoutesScopeAndValidate(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	keys := &memKeys{keys: map[string]auth.Key{}}
	token := map[string]string{}
	for name, sc := range map[string]auth.Scope{"admin": {Kind: auth.KindAdmin}, "acme": {Kind: auth.KindTenant, Name: "acme"},
		"research": {Kind: auth.KindDepartment, Name: "research"}} {
		k, tok, err := auth.NewKey(auth.NewKeyRequest{Scope: sc}, now.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		keys.keys[k.ID], token[name] = k, tok
	}
	fake := &fakeInsights{}
	srv := New(DefaultConfig(), prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	wait := srv.MountAPI(ctx, prometheus.NewRegistry(), API{Keys: keys, Audit: nopAudit{}, Insights: fake, Now: func() time.Time { return now }})
	defer func() { cancel(); wait() }()
	get := func(key, path string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+token[key])
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, key, path string
		code            int
		want            insightsvc.Request // when the service is called
		body            string
	}{
		{"admin, a month", "admin", "/v1/insights/efficiency?month=2026-11", 200, insightsvc.Request{From: nov, To: nov.AddDate(0, 1, 0)}, `"acme"`},
		{"admin, a tenant", "admin", "/v1/insights/rightsize?from=2026-11-01&to=2026-11-02&tenant=globex", 200, insightsvc.Request{From: nov, To: nov.AddDate(0, 0, 1), Tenant: "globex"}, ""},
		{"tenant key gets its own", "acme", "/v1/insights/efficiency?from=2026-11-01T00:00:00Z&to=2026-11-01T06:00:00Z", 200, insightsvc.Request{From: nov, To: nov.Add(6 * time.Hour), Tenant: "acme"}, ""},
		{"tenant key asking for another", "acme", "/v1/insights/efficiency?month=2026-11&tenant=globex", 404, insightsvc.Request{}, "not_found"},
		{"department key", "research", "/v1/insights/rightsize?month=2026-11", 200, insightsvc.Request{From: nov, To: nov.AddDate(0, 1, 0), Department: "research"}, ""},
		{"department key, anomalies", "research", "/v1/insights/anomalies?month=2026-11", 403, insightsvc.Request{}, "forbidden"},
		{"anomalies of a tenant key", "acme", "/v1/insights/anomalies?from=2026-01-01&to=2026-12-01", 200, insightsvc.Request{From: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Tenant: "acme"}, `"anomalies":[]`},
		{"no period", "admin", "/v1/insights/efficiency", 400, insightsvc.Request{}, "from: required"},
		{"month and from", "admin", "/v1/insights/efficiency?month=2026-11&from=2026-11-01", 400, insightsvc.Request{}, "not both"},
		{"bad month", "admin", "/v1/insights/efficiency?month=2026-13", 400, insightsvc.Request{}, "month"},
		{"bad time", "admin", "/v1/insights/efficiency?from=soon&to=2026-11-02", 400, insightsvc.Request{}, "from"},
		{"backwards", "admin", "/v1/insights/efficiency?from=2026-11-02&to=2026-11-01", 400, insightsvc.Request{}, "after from"},
		{"too long", "admin", "/v1/insights/rightsize?from=2026-01-01&to=2026-12-01", 400, insightsvc.Request{}, "at most 93 days"},
		{"off the hour", "admin", "/v1/insights/efficiency?from=2026-11-01T00:30:00Z&to=2026-11-02", 400, insightsvc.Request{}, "whole UTC hours"},
		{"unknown parameter", "admin", "/v1/insights/efficiency?month=2026-11&step=hour", 400, insightsvc.Request{}, "step"},
		{"year out of range", "admin", "/v1/insights/anomalies?from=1960-01-01&to=1960-02-01", 400, insightsvc.Request{}, "outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake.last = insightsvc.Request{}
			code, body := get(tc.key, tc.path)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Fatalf("%d %s; want %d with %q", code, body, tc.code, tc.body)
			}
			if fake.last != tc.want {
				t.Errorf("service got %+v, want %+v", fake.last, tc.want)
			}
			if code != 200 {
				var e apiError
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code == "" {
					t.Errorf("error body %q", body)
				}
			}
		})
	}
	fake.err = &insightsvc.ValidationError{Err: errTest("params: window is negative")}
	if code, body := get("admin", "/v1/insights/efficiency?month=2026-11"); code != 400 || !strings.Contains(body, "window is negative") {
		t.Errorf("a service input error: %d %s, want 400", code, body)
	}
	fake.err = errTest("clickhouse: connection refused")
	if code, body := get("admin", "/v1/insights/efficiency?month=2026-11"); code != 500 || strings.Contains(body, "clickhouse") {
		t.Errorf("a service failure: %d %s, want a generic 500", code, body)
	}
}

type errTest string

func (e errTest) Error() string { return string(e) }
