package server_test

import (
	"cmp"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/server"
)

// isolationRoute is one /v1 route as the isolation test calls it.
type isolationRoute struct {
	method, route string // the route pattern, as gin lists it
	path, body    string // what the test sends
	// admin is the status an admin key gets (0: 200 for GET routes).
	admin int
	// of is the one tenant whose data a GET row reads ("" for rows that
	// list the scope): a credential that cannot see it must get 403 or 404
	// for a CSV or PDF (a PDF's text is compressed, so the name check alone
	// would not see a leak), and a JSON answer without the tenant's name.
	of string
}

// fullAPI serves every /v1 route over the fixture (quotas and the
// Kubernetes webhook included) and returns the route patterns it mounted.
func (f *fixture) fullAPI(t *testing.T) (*httptest.Server, []string) {
	t.Helper()
	qcfg := quota.DefaultConfig()
	qcfg.Rules = []quota.Rule{{Tenant: "acme", ConcurrentGPUs: lim("8")}, {Tenant: "globex", ConcurrentGPUs: lim("8")}, {Tenant: "initech", Spend: lim("100")}}
	api, q := f.quotaAPI(t, qcfg, true, map[string]string{"team-acme": "acme", "team-globex": "globex"})
	api.Insights = f.insights(t, time.Now)
	api, _ = f.withCreditGrants(t, api)
	ts, srv, _ := f.mount(t, api, q)
	var routes []string
	for _, r := range srv.Handler().(*gin.Engine).Routes() {
		routes = append(routes, r.Method+" "+r.Path)
	}
	return ts, routes
}

func k8sReview(namespace string) string {
	return fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-%[1]s","kind":{"group":"","version":"v1","kind":"Pod"},
"operation":"CREATE","namespace":%[1]q,"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":%[1]q},
"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}}`, namespace)
}

// One tenant never sees another's data, on any route, with any
// credential: every /v1 route (and /metrics) is called by admin,
// department, tenant and portal credentials, aimed at the caller's own
// data and at another tenant's, and no answer may name a tenant outside
// the caller's scope. A route added to the server without a row here
// fails the test.
func TestAPIIsolationOnEveryRoute(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	ts, mounted := f.fullAPI(t)
	routes := []isolationRoute{
		{"GET", "/v1/usage", "/v1/usage?from=2026-10-01&to=2026-11-01&group_by=tenant,department,host,workload", "", 0, ""},
		{"GET", "/v1/invoices", "/v1/invoices", "", 0, ""},
		{"GET", "/v1/invoices", "/v1/invoices?tenant=globex", "", 0, ""},
		{"GET", "/v1/invoices/*ref", "/v1/invoices/" + f.invs["globex"].Number, "", 0, "globex"},
		{"GET", "/v1/invoices/*ref", "/v1/invoices/" + f.invs["initech"].ID + "?format=pdf", "", 0, "initech"},
		{"GET", "/v1/invoices/*ref", "/v1/invoices/" + f.invs["acme"].Number + "?format=csv", "", 0, "acme"},
		{"GET", "/v1/cost", "/v1/cost?tenant=acme&month=2026-10", "", 0, "acme"},
		{"GET", "/v1/cost", "/v1/cost?tenant=globex&month=2026-10", "", 0, "globex"},
		{"GET", "/v1/cost", "/v1/cost?tenant=initech&month=2026-10", "", 0, "initech"},
		{"GET", "/v1/tenants", "/v1/tenants", "", 0, ""},
		{"GET", "/v1/chargeback", "/v1/chargeback?month=2026-10", "", 0, ""},
		{"GET", "/v1/chargeback", "/v1/chargeback?month=2026-10&format=csv", "", 0, ""},
		{"POST", "/v1/admission", "/v1/admission", `{"tenant":"globex","gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h"}`, 0, ""},
		{"POST", "/v1/admission", "/v1/admission", `{"tenant":"initech","gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h"}`, 0, ""},
		{"GET", "/v1/quotas", "/v1/quotas", "", 0, ""},
		{"POST", "/v1/admission/k8s", "/v1/admission/k8s", k8sReview("team-globex"), 0, ""},
		{"GET", "/v1/insights/efficiency", "/v1/insights/efficiency?month=2026-10", "", 0, ""},
		{"GET", "/v1/insights/efficiency", "/v1/insights/efficiency?month=2026-10&tenant=initech", "", 0, "initech"},
		{"GET", "/v1/insights/rightsize", "/v1/insights/rightsize?month=2026-10", "", 0, ""},
		{"GET", "/v1/insights/rightsize", "/v1/insights/rightsize?month=2026-10&tenant=globex", "", 0, "globex"},
		{"GET", "/v1/insights/anomalies", "/v1/insights/anomalies?month=2026-10", "", 0, ""},
		{"GET", "/v1/insights/anomalies", "/v1/insights/anomalies?month=2026-10&tenant=initech", "", 0, ""},
		// The fixture holds three days: the admin key is told it needs two
		// weeks of history; every other key must get 403 first.
		{"GET", "/v1/insights/capacity", "/v1/insights/capacity?to=2026-10-05T00:00:00Z&weeks=2", "", http.StatusBadRequest, ""},
		{"GET", "/v1/credits", "/v1/credits", "", 0, ""},
		{"GET", "/v1/credits", "/v1/credits?tenant=globex", "", 0, "globex"},
		{"GET", "/v1/credits", "/v1/credits?tenant=initech", "", 0, "initech"},
		{"POST", "/v1/credits", "/v1/credits", `{"tenant":"initech","kind":"prepaid","amount":"1"}`, 0, ""},
		{"POST", "/v1/credits/:id/void", "/v1/credits/cg_000000000000/void", `{"reason":"r"}`, 0, ""},
	}
	covered := map[string]bool{"GET /v1/openapi.json": true} // public, names no tenant
	for _, r := range routes {
		covered[r.method+" "+r.route] = true
	}
	for _, m := range mounted {
		if strings.HasPrefix(m, "GET /v1/") || strings.HasPrefix(m, "POST /v1/") || strings.HasPrefix(m, "PUT /v1/") || strings.HasPrefix(m, "DELETE /v1/") {
			if !covered[m] {
				t.Errorf("route %s has no row in the isolation table", m)
			}
		}
	}

	// Who may appear in an answer to each credential.
	others := map[string][]string{
		"admin":    nil,
		"research": {"initech", "ops"},
		"acme":     {"globex", "initech", "ops"},
		"portal":   {"globex", "initech", "ops"},
	}
	creds := make([]string, 0, len(others))
	for c := range others {
		creds = append(creds, c)
	}
	sort.Strings(creds)
	for _, cred := range creds {
		for _, r := range routes {
			t.Run(cred+" "+r.method+" "+r.path, func(t *testing.T) {
				url, token := ts.URL+r.path, f.tokens[cred]
				if cred == "portal" {
					sep := "?"
					if strings.Contains(r.path, "?") {
						sep = "&"
					}
					url, token = url+sep+"access_token="+token, ""
				}
				status, data, _ := send(t, r.method, url, token, r.body)
				body := string(data)
				if status >= 500 {
					t.Fatalf("%d %s", status, body)
				}
				if cred == "portal" && r.method != http.MethodGet && status != http.StatusForbidden {
					t.Fatalf("a portal token's %s: %d, want 403 (read-only)", r.method, status)
				}
				if want := cmp.Or(r.admin, http.StatusOK); cred == "admin" && r.method == http.MethodGet && status != want {
					t.Fatalf("admin: %d %.200s, want %d", status, body, want)
				}
				sees := map[string][]string{"admin": {"acme", "globex", "initech"}, "research": {"acme", "globex"}, "acme": {"acme"}, "portal": {"acme"}}[cred]
				if r.of != "" && cred != "admin" {
					want := []int{http.StatusOK}
					if !slices.Contains(sees, r.of) {
						want = []int{http.StatusForbidden, http.StatusNotFound}
						if !strings.Contains(r.path, "format=") {
							// A JSON report kept to the scope may answer empty
							// (a department reads its own rows of any tenant);
							// the name check below holds it to that.
							want = append(want, http.StatusOK)
						}
					}
					if !slices.Contains(want, status) {
						t.Fatalf("%s's data: %d %.200s, want one of %v", r.of, status, body, want)
					}
				}
				// A refusal of an admission may echo the tenant the caller
				// itself named; it decides nothing and shows no data.
				refused := r.method == http.MethodPost && (status >= 400 || strings.Contains(body, `"allowed":false`))
				for _, name := range others[cred] {
					if refused {
						break
					}
					if strings.Contains(body, `"`+name+`"`) || strings.Contains(body, ","+name+",") || strings.Contains(body, "tenant "+name) {
						t.Fatalf("%d: the %s credential sees %q: %.300s", status, cred, name, body)
					}
				}
				// An admission for another tenant is refused, never decided.
				if r.method == http.MethodPost && cred != "admin" && status == http.StatusOK &&
					(strings.Contains(r.body, `"initech"`) || (cred != "research" && strings.Contains(r.body, "globex"))) &&
					!strings.Contains(body, `"allowed":false`) {
					t.Fatalf("the %s credential decided another tenant's admission: %.300s", cred, body)
				}
			})
		}
		// /metrics names every tenant's quota figures: never on the API port.
		t.Run(cred+" GET /metrics", func(t *testing.T) {
			status, body, _ := send(t, http.MethodGet, ts.URL+"/metrics", f.tokens[cred], "")
			if status != http.StatusNotFound || strings.Contains(string(body), "gpumeter_quota") {
				t.Fatalf("/metrics on the API port: %d %.200s", status, body)
			}
		})
	}
}
