package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/insights"
)

// fakeInsights records the request each call got.
type fakeInsights struct {
	mu           sync.Mutex
	last         insights.Request
	lastCapacity *insights.CapacityRequest
	err          error
}

func (f *fakeInsights) record(r insights.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = r
	return f.err
}

func (f *fakeInsights) Efficiency(_ context.Context, r insights.Request, _ *insights.IdleParams) (insights.EfficiencyReport, error) {
	return insights.EfficiencyReport{From: r.From, To: r.To, Tenants: []insights.TenantEfficiency{{Tenant: "acme"}}}, f.record(r)
}

func (f *fakeInsights) RightSize(_ context.Context, r insights.Request) (insights.RightSizeReport, error) {
	return insights.RightSizeReport{From: r.From, To: r.To}, f.record(r)
}

func (f *fakeInsights) Stored(_ context.Context, r insights.Request) ([]insights.StoredAnomaly, error) {
	return nil, f.record(r)
}

func (f *fakeInsights) Capacity(_ context.Context, r insights.CapacityRequest) ([]insights.CapacityForecast, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastCapacity = &r
	return []insights.CapacityForecast{{Model: "A100-SXM4-80GB", CapacityGPUs: decimal.NewFromInt(16), Target: r.Target}}, f.err
}

// insightsAPI serves svc under keys of an admin, tenant acme and
// department research; get calls it with one of those keys.
func insightsAPI(t *testing.T, now time.Time, svc InsightsService) (get func(key, path string) (int, string)) {
	t.Helper()
	r := newAPIRig(t, DefaultConfig(), API{Insights: svc, Now: func() time.Time { return now }})
	token := map[string]string{}
	for name, sc := range map[string]auth.Scope{"admin": {Kind: auth.KindAdmin}, "acme": {Kind: auth.KindTenant, Name: "acme"},
		"research": {Kind: auth.KindDepartment, Name: "research"}} {
		token[name] = r.addKey(t, auth.NewKeyRequest{Scope: sc})
	}
	return func(key, path string) (int, string) {
		rec := r.do(http.MethodGet, path, token[key], "", "")
		return rec.Code, rec.Body.String()
	}
}

// TestInsightsRoutesScopeAndValidate: every parameter is checked (400
// before the service is called), the key's scope travels to the service
// whole (the store applies it), a tenant key naming another tenant is 404,
// and service input errors are 400s.
func TestInsightsRoutesScopeAndValidate(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	fake := &fakeInsights{}
	get := insightsAPI(t, now, fake)
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	admin, acme := auth.Scope{Kind: auth.KindAdmin}, auth.Scope{Kind: auth.KindTenant, Name: "acme"}
	research := auth.Scope{Kind: auth.KindDepartment, Name: "research"}
	for _, tc := range []struct {
		name, key, path string
		code            int
		want            insights.Request // when the service is called
		body            string
	}{
		{"admin, a month", "admin", "/v1/insights/efficiency?month=2026-11", 200, insights.Request{From: nov, To: nov.AddDate(0, 1, 0), Scope: admin}, `"acme"`},
		{"admin, a tenant", "admin", "/v1/insights/rightsize?from=2026-11-01&to=2026-11-02&tenant=globex", 200, insights.Request{From: nov, To: nov.AddDate(0, 0, 1), Tenant: "globex", Scope: admin}, ""},
		{"tenant key gets its own", "acme", "/v1/insights/efficiency?from=2026-11-01T00:00:00Z&to=2026-11-01T06:00:00Z", 200, insights.Request{From: nov, To: nov.Add(6 * time.Hour), Scope: acme}, ""},
		{"tenant key naming itself", "acme", "/v1/insights/efficiency?month=2026-11&tenant=acme", 200, insights.Request{From: nov, To: nov.AddDate(0, 1, 0), Tenant: "acme", Scope: acme}, ""},
		{"tenant key asking for another", "acme", "/v1/insights/efficiency?month=2026-11&tenant=globex", 404, insights.Request{}, "not_found"},
		{"department key", "research", "/v1/insights/rightsize?month=2026-11", 200, insights.Request{From: nov, To: nov.AddDate(0, 1, 0), Scope: research}, ""},
		{"department key naming a tenant", "research", "/v1/insights/efficiency?month=2026-11&tenant=initech", 200, insights.Request{From: nov, To: nov.AddDate(0, 1, 0), Tenant: "initech", Scope: research}, ""},
		{"department key, anomalies", "research", "/v1/insights/anomalies?month=2026-11", 403, insights.Request{}, "forbidden"},
		{"anomalies of a tenant key", "acme", "/v1/insights/anomalies?from=2026-01-01&to=2026-12-01", 200, insights.Request{From: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Scope: acme}, `"anomalies":[]`},
		{"no period", "admin", "/v1/insights/efficiency", 400, insights.Request{}, "from: required"},
		{"month and from", "admin", "/v1/insights/efficiency?month=2026-11&from=2026-11-01", 400, insights.Request{}, "not both"},
		{"bad month", "admin", "/v1/insights/efficiency?month=2026-13", 400, insights.Request{}, "month"},
		{"bad time", "admin", "/v1/insights/efficiency?from=soon&to=2026-11-02", 400, insights.Request{}, "from"},
		{"backwards", "admin", "/v1/insights/efficiency?from=2026-11-02&to=2026-11-01", 400, insights.Request{}, "after from"},
		{"too long", "admin", "/v1/insights/rightsize?from=2026-01-01&to=2026-12-01", 400, insights.Request{}, "at most 93 days"},
		{"off the hour", "admin", "/v1/insights/efficiency?from=2026-11-01T00:30:00Z&to=2026-11-02", 400, insights.Request{}, "whole UTC hours"},
		{"unknown parameter", "admin", "/v1/insights/efficiency?month=2026-11&step=hour", 400, insights.Request{}, "step"},
		{"year out of range", "admin", "/v1/insights/anomalies?from=1960-01-01&to=1960-02-01", 400, insights.Request{}, "outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake.last = insights.Request{}
			code, body := get(tc.key, tc.path)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Fatalf("%d %s; want %d with %q", code, body, tc.code, tc.body)
			}
			if fake.last != tc.want {
				t.Errorf("service got %+v, want %+v", fake.last, tc.want)
			}
			if code != 200 {
				wantErrorBody(t, body)
			}
		})
	}
	serviceErrors(t, fake, get, "/v1/insights/efficiency?month=2026-11", "params: window is negative", "window is negative")
}

// wantErrorBody fails the test unless body is an API error with a code.
func wantErrorBody(t *testing.T, body string) {
	t.Helper()
	var e apiError
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code == "" {
		t.Errorf("error body %q", body)
	}
}

// serviceErrors checks how the admin key's call of path answers when the
// service fails: an input error (message) is a 400 that shows want, any
// other failure a generic 500.
func serviceErrors(t *testing.T, fake *fakeInsights, get func(key, path string) (int, string), path, message, want string) {
	t.Helper()
	fake.err = fault.Validation(errTest(message))
	if code, body := get("admin", path); code != 400 || !strings.Contains(body, want) {
		t.Errorf("a service input error: %d %s, want 400", code, body)
	}
	fake.err = errTest("clickhouse: connection refused")
	if code, body := get("admin", path); code != 500 || strings.Contains(body, "clickhouse") {
		t.Errorf("a service failure: %d %s, want a generic 500", code, body)
	}
}

type errTest string

func (e errTest) Error() string { return string(e) }

// TestCapacityRouteScopeAndValidate: fleet capacity is for admin keys;
// every parameter is checked before the service is called (400 naming
// it), the defaults are the CLI's, service input errors are 400s, and
// without an insights service the route is 404.
func TestCapacityRouteScopeAndValidate(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 40, 0, 0, time.UTC)
	hour := now.Truncate(time.Hour)
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	fake := &fakeInsights{}
	get := insightsAPI(t, now, fake)
	type want struct {
		to, until time.Time
		weeks     int
		target    string
	}
	for _, tc := range []struct {
		name, key, query string
		code             int
		body             string
		want             *want // what the service gets, when it is called
	}{
		{"defaults", "admin", "", 200, `"models":[{"model":"A100-SXM4-80GB"`, &want{hour, hour.Add(90 * 24 * time.Hour), 8, "0.9"}},
		{"every parameter", "admin", "?to=2026-11-01&until=2027-02-01T00:00:00Z&weeks=4&target=0.75", 200, `"capacity_gpus":"16"`,
			&want{nov, time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC), 4, "0.75"}},
		{"until from to", "admin", "?to=2026-11-01T06:00:00%2B01:00", 200, "", &want{nov.Add(5 * time.Hour), nov.Add(5*time.Hour + 90*24*time.Hour), 8, "0.9"}},
		{"tenant key", "acme", "", 403, "admin keys", nil},
		{"department key", "research", "?weeks=4", 403, "admin keys", nil},
		{"unknown parameter", "admin", "?model=A100", 400, `unknown parameter \"model\"`, nil},
		{"to not a time", "admin", "?to=soon", 400, `to \"soon\"`, nil},
		{"to off the hour", "admin", "?to=2026-11-01T00:30:00Z", 400, "to: must be a whole UTC hour", nil},
		{"to out of range", "admin", "?to=1960-01-01", 400, "to: outside", nil},
		{"until not a time", "admin", "?until=later", 400, `until \"later\"`, nil},
		{"to past DateTime", "admin", "?to=2106-01-01", 400, "to: outside 1971..2105", nil},
		{"default until past DateTime", "admin", "?to=2105-12-01", 400, "until (default: 90 days after to): outside 1971..2105", nil},
		{"until past DateTime", "admin", "?to=2105-01-01&until=2106-01-01", 400, "until: outside 1971..2105", nil},
		{"until off the hour", "admin", "?to=2026-11-01&until=2026-12-01T00:00:01Z", 400, "until: must be a whole UTC hour", nil},
		{"until before to", "admin", "?to=2026-11-02&until=2026-11-01", 400, "until: required, a whole UTC hour after to", nil},
		{"until too far", "admin", "?to=2026-11-01&until=2030-01-01", 400, "until: at most three years", nil},
		{"weeks not a number", "admin", "?weeks=eight", 400, `weeks \"eight\": not a whole number`, nil},
		{"weeks too few", "admin", "?weeks=1", 400, "weeks 1: want 2 to 52", nil},
		{"weeks too many", "admin", "?weeks=53", 400, "weeks 53", nil},
		{"target not a number", "admin", "?target=most", 400, `target \"most\": not a number`, nil},
		{"target zero", "admin", "?target=0", 400, "target 0: want within (0, 1]", nil},
		{"target above one", "admin", "?target=1.5", 400, "target 1.5", nil},
		{"target too long", "admin", "?target=0." + strings.Repeat("1", 80), 400, "target: not valid UTF-8 text of at most 64 bytes", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake.lastCapacity = nil
			code, body := get(tc.key, "/v1/insights/capacity"+tc.query)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Fatalf("%d %s; want %d with %q", code, body, tc.code, tc.body)
			}
			got := fake.lastCapacity
			switch {
			case tc.want == nil && got != nil:
				t.Errorf("the service was called with %+v", *got)
			case tc.want != nil && got == nil:
				t.Errorf("the service was not called")
			case tc.want != nil && (!got.To.Equal(tc.want.to) || !got.Until.Equal(tc.want.until) || got.Weeks != tc.want.weeks || !got.Target.Equal(decimal.RequireFromString(tc.want.target))):
				t.Errorf("the service got to %s until %s weeks %d target %s; want %+v", got.To, got.Until, got.Weeks, got.Target, *tc.want)
			case tc.want != nil && got.Scope != (auth.Scope{Kind: auth.KindAdmin}):
				t.Errorf("the service got scope %s, want the admin key's", got.Scope)
			}
			if code != 200 {
				wantErrorBody(t, body)
			}
		})
	}
	// A model that stays under its target has no "at" or "demand": a zero
	// time and a zero demand would read as an answer.
	if _, body := get("admin", "/v1/insights/capacity"); !strings.Contains(body, `"exceeds":false`) || strings.Contains(body, `"at":`) || strings.Contains(body, `"demand":`) {
		t.Errorf("a model under its target: %s; want exceeds false without at and demand", body)
	}
	serviceErrors(t, fake, get, "/v1/insights/capacity", "capacity needs two weeks of history before 2026-12-03T12:00:00Z", "two weeks of history")
	if code, body := insightsAPI(t, now, nil)("admin", "/v1/insights/capacity"); code != 404 || !strings.Contains(body, "not served here") {
		t.Errorf("without an insights service: %d %s, want 404", code, body)
	}
}
