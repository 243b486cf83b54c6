package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/leader"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// openAPICase is one request of the response test: sent to srv, answered
// with want, and the answer validated against the document's response for
// method, route (the document's path template) and want.
type openAPICase struct {
	name          string
	srv           *httptest.Server
	method, route string
	target        string // path and query
	token, body   string
	want          int
}

// Every response the document describes, for every operation, is produced
// by the real server over ClickHouse and validated against the document:
// its status must be documented, its body must match the schema (objects
// admit no undocumented property), its declared headers too. A documented
// status no case produces fails the test, so the document cannot promise
// what the server is never seen to send.
func TestOpenAPIResponsesMatchTheDocument(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, server.DefaultConfig())
	addSeptember(t, f)
	// Every route served, quotas with a soft threshold, a department's
	// and a model's rule among them.
	qcfg := quota.DefaultConfig()
	qcfg.Rules = []quota.Rule{{Tenant: "acme", ConcurrentGPUs: &quota.Limit{Limit: decimal.NewFromInt(8), Soft: "50%"}},
		{Department: "research", GPUModel: "H100-SXM5-80GB", GPUHours: lim("1000")}, {Tenant: "initech", Spend: lim("100")}}
	api, q := f.quotaAPI(t, qcfg, true, map[string]string{"team-acme": "acme", "team-globex": "globex"})
	api.Insights = f.insights(t, time.Now)
	api, voidable := f.withCreditGrants(t, api)
	ts, _, _ := f.mount(t, api, q)
	// A follower replica with no leader to forward admissions to.
	followerAPI := api
	followerAPI.Forward = noLeader{}
	follower, _, _ := f.mount(t, followerAPI, q)
	// The same follower as another replica's forward reaches it.
	forwardedTo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set(leader.ForwardedHeader, "10.0.0.9:8443")
		follower.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(forwardedTo.Close)
	// The same on 25 September's clock: tokyo's month so far has a trend.
	september, _ := f.serve(t, server.DefaultConfig(), func() time.Time { return time.Date(2026, 9, 25, 12, 0, 0, 0, time.UTC) })

	// The document as the server serves it.
	code, raw, _ := f.get(t, "", "/v1/openapi.json")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/openapi.json: %d", code)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		t.Fatalf("load the document: %v", err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("the document is not valid OpenAPI 3: %v", err)
	}
	// Bodies the validator has no decoder for by default: checked as a
	// string (HTML) and as bytes (PDF) against the schemas given.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/pdf", openapi3filter.FileBodyDecoder)

	// A server with insights off (404 on the capacity route), one with a
	// 16-byte body limit and a rate limit of one request (413, 429), and
	// one whose ClickHouse database is closed under it (500).
	plain, _, _ := serveAPI(t, server.DefaultConfig(), prometheus.NewRegistry(),
		storeAPI(f.store, f.customers, f.chargeback, usage.New(f.store, f.customers, time.Now)), nil)
	tight := server.DefaultConfig()
	tight.MaxBodyBytes = 16
	tight.RateLimit = server.RateLimit{PerSecond: 1e-6, Burst: 1}
	limited, _, _ := serveAPI(t, tight, prometheus.NewRegistry(),
		storeAPI(f.store, f.customers, f.chargeback, usage.New(f.store, f.customers, time.Now)), nil)
	limitedKey := f.newKey(t, auth.Scope{Kind: auth.KindAdmin})
	if code, body, _ := send(t, http.MethodGet, limited.URL+"/v1/tenants", limitedKey, ""); code != http.StatusOK {
		t.Fatalf("the rate-limited server's first request: %d %s", code, body)
	}
	gone := storetest.New(t)
	_, goneKey := saveKey(t, gone, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindAdmin}}, time.Now())
	broken, _, _ := serveAPI(t, server.DefaultConfig(), prometheus.NewRegistry(), server.API{Keys: gone, Audit: gone}, nil)
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}

	admin, acme, research, portal := f.tokens["admin"], f.tokens["acme"], f.tokens["research"], f.tokens["portal"]
	oct := "month=2026-10"
	admit := `{"tenant":"acme","gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h"}`
	tokyo := f.invs["tokyo"].Number
	cases := []openAPICase{
		{"the document", ts, "GET", "/v1/openapi.json", "/v1/openapi.json", "", "", 200},

		{"usage by every dimension", ts, "GET", "/v1/usage", "/v1/usage?from=2026-10-01&to=2026-11-01&group_by=tenant,department,sku,host,workload", admin, "", 200},
		{"usage of a few meters by hour", ts, "GET", "/v1/usage", "/v1/usage?from=2026-10-02&to=2026-10-03&step=hour&meters=gpu_hours,energy_kwh&tz=Europe/Berlin", acme, "", 200},
		{"usage with no dates", ts, "GET", "/v1/usage", "/v1/usage", admin, "", 400},

		{"invoices, a page", ts, "GET", "/v1/invoices", "/v1/invoices?page_size=1", admin, "", 200},
		{"invoices of a month", ts, "GET", "/v1/invoices", "/v1/invoices?period=2026-10", research, "", 200},
		{"invoices of a bad period", ts, "GET", "/v1/invoices", "/v1/invoices?period=2026-13", admin, "", 400},

		{"an invoice as JSON", ts, "GET", "/v1/invoices/{ref}", "/v1/invoices/" + f.invs["acme"].Number, acme, "", 200},
		{"an invoice as CSV", ts, "GET", "/v1/invoices/{ref}", "/v1/invoices/" + f.invs["acme"].ID + "?format=csv", acme, "", 200},
		{"an invoice as PDF", ts, "GET", "/v1/invoices/{ref}", "/v1/invoices/" + f.invs["acme"].Number + "?format=pdf", portal, "", 200},
		{"an invoice in an unknown format", ts, "GET", "/v1/invoices/{ref}", "/v1/invoices/" + f.invs["acme"].Number + "?format=docx", acme, "", 400},
		{"another tenant's invoice", ts, "GET", "/v1/invoices/{ref}", "/v1/invoices/" + f.invs["globex"].Number, acme, "", 404},
		{"an invoice the PDF font cannot show", ts, "GET", "/v1/invoices/{ref}", "/v1/invoices/" + tokyo + "?format=pdf", admin, "", 422},

		{"the cost of a month over", ts, "GET", "/v1/cost", "/v1/cost?" + oct, acme, "", 200},
		{"the cost of this month", ts, "GET", "/v1/cost", "/v1/cost?tenant=globex", admin, "", 200},
		{"the cost of a month with a trend", september, "GET", "/v1/cost", "/v1/cost?tenant=tokyo", admin, "", 200},
		{"the cost of a bad month", ts, "GET", "/v1/cost", "/v1/cost?tenant=acme&month=October", admin, "", 400},
		{"another tenant's cost", ts, "GET", "/v1/cost", "/v1/cost?tenant=initech&" + oct, research, "", 404},

		{"tenants", ts, "GET", "/v1/tenants", "/v1/tenants", research, "", 200},
		{"tenants, one with a contract", ts, "GET", "/v1/tenants", "/v1/tenants", admin, "", 200},
		{"tenants with a parameter", ts, "GET", "/v1/tenants", "/v1/tenants?tenant=acme", admin, "", 400},

		{"chargeback as JSON", ts, "GET", "/v1/chargeback", "/v1/chargeback?" + oct + "&idle=by_use", admin, "", 200},
		{"chargeback as CSV", ts, "GET", "/v1/chargeback", "/v1/chargeback?" + oct + "&format=csv", research, "", 200},
		{"chargeback as HTML", ts, "GET", "/v1/chargeback", "/v1/chargeback?" + oct + "&format=html", admin, "", 200},
		{"chargeback as PDF", ts, "GET", "/v1/chargeback", "/v1/chargeback?" + oct + "&format=pdf", admin, "", 200},
		{"chargeback of September, idle on its own row", ts, "GET", "/v1/chargeback", "/v1/chargeback?month=2026-09&idle=own_row", admin, "", 200},
		{"chargeback of September, idle shared", ts, "GET", "/v1/chargeback", "/v1/chargeback?month=2026-09&idle=by_use", admin, "", 200},
		{"tokyo's invoice as JSON", ts, "GET", "/v1/invoices/{ref}", "/v1/invoices/" + tokyo, admin, "", 200},
		{"chargeback without a month", ts, "GET", "/v1/chargeback", "/v1/chargeback", admin, "", 400},
		{"chargeback for a tenant key", ts, "GET", "/v1/chargeback", "/v1/chargeback?" + oct, acme, "", 403},
		{"chargeback the PDF font cannot show", ts, "GET", "/v1/chargeback", "/v1/chargeback?month=2026-09&format=pdf", admin, "", 422},

		{"an admission", ts, "POST", "/v1/admission", "/v1/admission", acme, admit, 200},
		{"a dry run of parts", ts, "POST", "/v1/admission", "/v1/admission", admin,
			`{"tenant":"globex","dry_run":true,"parts":[{"gpu_model":"H100-SXM5-80GB","count":2}],"expected_duration":"2h"}`, 200},
		{"an admission over a soft threshold", ts, "POST", "/v1/admission", "/v1/admission", acme,
			`{"gpu_model":"H100-SXM5-80GB","count":5,"expected_duration":"1h"}`, 200},
		{"a denied admission", ts, "POST", "/v1/admission", "/v1/admission", admin,
			`{"tenant":"acme","gpu_model":"H100-SXM5-80GB","count":100,"expected_duration":"1h"}`, 200},
		{"an admission without a duration", ts, "POST", "/v1/admission", "/v1/admission", acme, `{"gpu_model":"H100-SXM5-80GB","count":1}`, 400},
		{"an admission with no leader replica", follower, "POST", "/v1/admission", "/v1/admission", acme, admit, 503},
		{"an admission by a portal token", ts, "POST", "/v1/admission", "/v1/admission", portal, admit, 403},
		{"an admission for an unknown tenant", ts, "POST", "/v1/admission", "/v1/admission", admin,
			`{"tenant":"nosuch","gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h"}`, 404},

		{"quotas", ts, "GET", "/v1/quotas", "/v1/quotas", admin, "", 200},
		{"quotas with a parameter", ts, "GET", "/v1/quotas", "/v1/quotas?tenant=acme", admin, "", 400},
		{"quotas on a follower with no leader", follower, "GET", "/v1/quotas", "/v1/quotas", admin, "", 200},
		{"quotas forwarded to a replica that does not lead", forwardedTo, "GET", "/v1/quotas", "/v1/quotas", admin, "", 503},

		{"a pod admitted", ts, "POST", "/v1/admission/k8s", "/v1/admission/k8s", admin, k8sReview("team-acme"), 200},
		{"a pod of no metered namespace", ts, "POST", "/v1/admission/k8s", "/v1/admission/k8s", admin, k8sReview("kube-system"), 200},
		{"a pod over a soft threshold", ts, "POST", "/v1/admission/k8s", "/v1/admission/k8s", admin,
			strings.Replace(k8sReview("team-acme"), `"nvidia.com/gpu":"1"`, `"nvidia.com/gpu":"5"`, 1), 200},
		{"a pod denied", ts, "POST", "/v1/admission/k8s", "/v1/admission/k8s", admin,
			strings.Replace(k8sReview("team-acme"), `"nvidia.com/gpu":"1"`, `"nvidia.com/gpu":"64"`, 1), 200},
		{"a review that is not one", ts, "POST", "/v1/admission/k8s", "/v1/admission/k8s", admin, `{}`, 400},
		{"a review with no leader replica", follower, "POST", "/v1/admission/k8s", "/v1/admission/k8s", admin, k8sReview("team-acme"), 503},
		{"a review by a portal token", ts, "POST", "/v1/admission/k8s", "/v1/admission/k8s", portal, k8sReview("team-acme"), 403},

		{"efficiency", ts, "GET", "/v1/insights/efficiency", "/v1/insights/efficiency?" + oct, admin, "", 200},
		{"efficiency of both months", ts, "GET", "/v1/insights/efficiency", "/v1/insights/efficiency?from=2026-09-01&to=2026-11-01", admin, "", 200},
		{"efficiency of a month and dates", ts, "GET", "/v1/insights/efficiency", "/v1/insights/efficiency?" + oct + "&from=2026-10-01", admin, "", 400},
		{"efficiency of another tenant", ts, "GET", "/v1/insights/efficiency", "/v1/insights/efficiency?" + oct + "&tenant=globex", acme, "", 404},

		{"right-sizing", ts, "GET", "/v1/insights/rightsize", "/v1/insights/rightsize?" + oct, admin, "", 200},
		{"right-sizing of September", ts, "GET", "/v1/insights/rightsize", "/v1/insights/rightsize?month=2026-09", admin, "", 200},
		{"right-sizing of a tenant", ts, "GET", "/v1/insights/rightsize", "/v1/insights/rightsize?" + oct, acme, "", 200},
		{"right-sizing over too long", ts, "GET", "/v1/insights/rightsize", "/v1/insights/rightsize?from=2026-01-01&to=2026-11-01", admin, "", 400},
		{"right-sizing of another tenant", ts, "GET", "/v1/insights/rightsize", "/v1/insights/rightsize?" + oct + "&tenant=initech", acme, "", 404},

		{"anomalies", ts, "GET", "/v1/insights/anomalies", "/v1/insights/anomalies?from=2026-09-01&to=2026-11-01", admin, "", 200},
		{"anomalies of a bad month", ts, "GET", "/v1/insights/anomalies", "/v1/insights/anomalies?month=2026-00", admin, "", 400},
		{"anomalies for a department key", ts, "GET", "/v1/insights/anomalies", "/v1/insights/anomalies?" + oct, research, "", 403},
		{"anomalies of another tenant", ts, "GET", "/v1/insights/anomalies", "/v1/insights/anomalies?" + oct + "&tenant=globex", acme, "", 404},

		{"capacity", ts, "GET", "/v1/insights/capacity", "/v1/insights/capacity?to=2026-09-26T00:00:00Z&weeks=2&until=2026-10-26T00:00:00Z&target=0.5", admin, "", 200},
		{"capacity on one week", ts, "GET", "/v1/insights/capacity", "/v1/insights/capacity?weeks=1", admin, "", 400},
		{"capacity for a tenant key", ts, "GET", "/v1/insights/capacity", "/v1/insights/capacity", acme, "", 403},
		{"capacity where insights are off", plain, "GET", "/v1/insights/capacity", "/v1/insights/capacity", admin, "", 404},

		{"credits used up, included hours too, some expiring", ts, "GET", "/v1/credits", "/v1/credits?tenant=acme", acme, "", 200},
		{"credits depleted", ts, "GET", "/v1/credits", "/v1/credits?tenant=globex", admin, "", 200},
		{"credits of a recurring allowance", ts, "GET", "/v1/credits", "/v1/credits?tenant=initech", admin, "", 200},
		{"the credit summary", ts, "GET", "/v1/credits", "/v1/credits", admin, "", 200},
		{"credits with an unknown parameter", ts, "GET", "/v1/credits", "/v1/credits?month=2026-10", admin, "", 400},
		{"another tenant's credits", ts, "GET", "/v1/credits", "/v1/credits?tenant=globex", acme, "", 404},
		{"a grant", ts, "POST", "/v1/credits", "/v1/credits", admin,
			`{"tenant":"globex","kind":"included","amount":"10","meter":"gpu_hours","sku_class":"H100-SXM5-80GB","priority":1,"expires_at":"2099-01-01T00:00:00Z","source":"order 7","note":"n"}`, 201},
		{"a grant of a negative amount", ts, "POST", "/v1/credits", "/v1/credits", admin, `{"tenant":"globex","kind":"prepaid","amount":"-1"}`, 400},
		{"a grant by a tenant key", ts, "POST", "/v1/credits", "/v1/credits", acme, `{"tenant":"acme","kind":"prepaid","amount":"1"}`, 403},
		{"a grant where credits are not served", plain, "POST", "/v1/credits", "/v1/credits", admin, `{"tenant":"acme","kind":"prepaid","amount":"1"}`, 404},
		{"a void", ts, "POST", "/v1/credits/{id}/void", "/v1/credits/" + voidable + "/void", admin, `{"reason":"sold in error"}`, 200},
		{"a void without a reason", ts, "POST", "/v1/credits/{id}/void", "/v1/credits/" + voidable + "/void", admin, `{}`, 400},
		{"a void by a tenant key", ts, "POST", "/v1/credits/{id}/void", "/v1/credits/" + voidable + "/void", acme, `{"reason":"r"}`, 403},
		{"a void of no grant", ts, "POST", "/v1/credits/{id}/void", "/v1/credits/cg_000000000000/void", admin, `{"reason":"r"}`, 404},
	}
	// Every operation but the document's own: 401 without a key, 413 over
	// the body limit, 429 over the rate limit, 500 when ClickHouse fails.
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			target := strings.ReplaceAll(strings.ReplaceAll(path, "{ref}", f.invs["acme"].Number), "{id}", "cg_000000000000")
			cases = append(cases, openAPICase{"over the body limit", limited, method, path, target, limitedKey, strings.Repeat("x", 17), 413})
			if path == "/v1/openapi.json" {
				continue
			}
			cases = append(cases,
				openAPICase{"no key", ts, method, path, target, "", "", 401},
				openAPICase{"over the rate limit", limited, method, path, target, limitedKey, "", 429},
				openAPICase{"ClickHouse gone", broken, method, path, target, goneKey, "", 500})
		}
	}

	seen := map[string]bool{}
	shown := map[string]bool{} // schema.property of every property an answer held
	for _, c := range cases {
		t.Run(c.method+" "+c.route+" "+strconv.Itoa(c.want)+" "+c.name, func(t *testing.T) {
			code, body, hdr := send(t, c.method, c.srv.URL+c.target, c.token, c.body)
			if code != c.want {
				t.Fatalf("%d, want %d: %.300s", code, c.want, body)
			}
			if err := validateOpenAPIResponse(ctx, doc, c, code, hdr, body); err != nil {
				t.Fatalf("the answer does not match the document: %v\n%.600s", err, body)
			}
			seen[c.method+" "+c.route+" "+strconv.Itoa(c.want)] = true
			if s := jsonSchemaOf(doc, c, code); s != nil {
				var v any
				if err := json.Unmarshal(body, &v); err != nil {
					t.Fatal(err)
				}
				coverProperties(shown, "", s, v)
			}
		})
	}
	var unseen []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				if k := method + " " + path + " " + status; !seen[k] {
					unseen = append(unseen, k)
				}
			}
		}
	}
	sort.Strings(unseen)
	if len(unseen) > 0 {
		t.Errorf("documented responses no case produced and validated:\n  %s", strings.Join(unseen, "\n  "))
	}
	// Every property the document describes was in some answer: a
	// property the server no longer sends (or never did) fails here.
	documented := map[string]bool{}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, r := range op.Responses.Map() {
				if mt := r.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
					listProperties(documented, map[string]bool{}, "", mt.Schema)
				}
			}
		}
	}
	var never []string
	for p := range documented {
		if !shown[p] && notShown[p] == "" {
			never = append(never, p)
		}
	}
	sort.Strings(never)
	if len(never) > 0 {
		t.Errorf("documented properties no answer held (add a case, or a line to notShown saying why none can):\n  %s", strings.Join(never, "\n  "))
	}
	for p := range notShown {
		if shown[p] || !documented[p] {
			t.Errorf("notShown lists %s, which an answer held or the document lacks: take it off", p)
		}
	}
}

// notShown are the documented properties no answer of the fixture holds,
// each with the state it needs; their schemas were written from the Go
// types' JSON tags. One an answer holds, or the document drops, fails the
// test until it leaves this list.
var notShown = func() map[string]string {
	m := map[string]string{
		"InsightsRightSizing.reason":        "a SKU whose model has no profile to compare with",
		"InsightsStoredAnomaly.sku":         "a per-SKU series; the stored anomalies are a tenant's gpu_hours and daily spend",
		"InsightsTenantEfficiency.unpriced": "idle time of a SKU the tenant's book does not price",
	}
	for _, p := range []string{"BillingCorrection.inputs_hash", "BillingCorrection.invoice_id", "BillingCorrection.number",
		"BillingCorrection.period", "BillingCorrection.rollup_version", "BillingInvoice.corrections",
		"BillingLine.adjusts_invoice", "BillingLine.adjusts_kind", "BillingLine.adjusts_period"} {
		m[p] = "an invoice correcting an earlier period (late usage after that period was invoiced)"
	}
	for _, p := range []string{"BillingInvoice.void_reason", "BillingInvoice.voided_at"} {
		m[p] = "a voided invoice (gpumeter invoice void)"
	}
	for _, p := range []string{"PartitionGPUPlan.index", "PartitionGPUPlan.remove", "PartitionPlan.skipped",
		"PartitionPlannedInstance.busy", "PartitionPlannedInstance.inferred", "PartitionPlannedInstance.uuid",
		"PartitionSkipped.host", "PartitionSkipped.model", "PartitionSkipped.reason", "PartitionSkipped.uuid",
		"PartitionTenantDemand.reserved"} {
		m[p] = "a right-sizing plan over a fleet of MIG GPUs already partitioned (instances to keep, remove or skip)"
	}
	return m
}()

// jsonSchemaOf is the schema of the JSON answer of c with status code,
// nil when the answer is not JSON.
func jsonSchemaOf(doc *openapi3.T, c openAPICase, code int) *openapi3.SchemaRef {
	r := doc.Paths.Value(c.route).GetOperation(c.method).Responses.Status(code)
	if r == nil || r.Value == nil {
		return nil
	}
	if mt := r.Value.Content.Get("application/json"); mt != nil && (c.route != "/v1/invoices/{ref}" && c.route != "/v1/chargeback" ||
		!strings.Contains(c.target, "format=") || strings.Contains(c.target, "format=json") || code != http.StatusOK) {
		return mt.Schema
	}
	return nil
}

// schemaName names a schema for coverage: its component, or where it sits
// under its parent.
func schemaName(parent, step string, s *openapi3.SchemaRef) string {
	if s.Ref != "" {
		return s.Ref[strings.LastIndex(s.Ref, "/")+1:]
	}
	return parent + step
}

// coverProperties records, as schema.property, every property of v that
// s describes, through nested objects, arrays, maps and allOf.
func coverProperties(shown map[string]bool, name string, s *openapi3.SchemaRef, v any) {
	if s == nil || s.Value == nil || v == nil {
		return
	}
	name = schemaName(name, "", s)
	for _, sub := range s.Value.AllOf {
		coverProperties(shown, name, sub, v)
	}
	// Of oneOf, the alternative the answer is.
	for _, sub := range s.Value.OneOf {
		if sub.Value != nil && sub.Value.VisitJSON(v) == nil {
			coverProperties(shown, name, sub, v)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			if p, ok := s.Value.Properties[k]; ok {
				shown[name+"."+k] = true
				coverProperties(shown, schemaName(name, "."+k, p), p, child)
			} else if ap := s.Value.AdditionalProperties.Schema; ap != nil {
				coverProperties(shown, schemaName(name, ".*", ap), ap, child)
			}
		}
	case []any:
		for _, child := range x {
			coverProperties(shown, schemaName(name, "[]", s.Value.Items), s.Value.Items, child)
		}
	}
}

// listProperties records, as schema.property, every property s
// describes, through nested schemas (each component once).
func listProperties(out, visited map[string]bool, name string, s *openapi3.SchemaRef) {
	if s == nil || s.Value == nil {
		return
	}
	if s.Ref != "" {
		if visited[s.Ref] {
			return
		}
		visited[s.Ref] = true
	}
	name = schemaName(name, "", s)
	for _, sub := range append(slices.Clone(s.Value.AllOf), s.Value.OneOf...) {
		listProperties(out, visited, name, sub)
	}
	for k, p := range s.Value.Properties {
		out[name+"."+k] = true
		listProperties(out, visited, schemaName(name, "."+k, p), p)
	}
	if ap := s.Value.AdditionalProperties.Schema; ap != nil {
		listProperties(out, visited, schemaName(name, ".*", ap), ap)
	}
	if s.Value.Items != nil {
		listProperties(out, visited, schemaName(name, "[]", s.Value.Items), s.Value.Items)
	}
}

// validateOpenAPIResponse checks one answer against the document's
// response for its operation and status (an undocumented status fails).
func validateOpenAPIResponse(ctx context.Context, doc *openapi3.T, c openAPICase, code int, hdr http.Header, body []byte) error {
	item := doc.Paths.Value(c.route)
	if item == nil {
		return fmt.Errorf("no path %s in the document", c.route)
	}
	op := item.GetOperation(c.method)
	if op == nil {
		return fmt.Errorf("no operation %s %s in the document", c.method, c.route)
	}
	req := httptest.NewRequest(c.method, c.target, nil)
	return openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req,
			Route: &routers.Route{Spec: doc, Path: c.route, PathItem: item, Method: c.method, Operation: op}},
		Status: code, Header: hdr, Body: io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	})
}

// newKey stores an admin or scoped key of the fixture's and returns its
// token.
func (f *fixture) newKey(t *testing.T, scope auth.Scope) string {
	t.Helper()
	_, token := saveKey(t, f.store, auth.NewKeyRequest{Scope: scope}, time.Now())
	return token
}

// tokyoBook prices gpu_hours in graduated tiers and not energy_kwh (its
// energy is unpriced usage); tokyoContract commits to a monthly minimum
// and reserves an H100 and two MIG instances.
const (
	tokyoBook = `version: tokyo-1
currency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}
skus:
  H100-SXM5-80GB:
    meters:
      gpu_hours:
        mode: graduated
        tiers: [{up_to: 50, unit_price: "3", flat_fee: "1"}, {unit_price: "2.50"}]
  H100-SXM5-80GB/1g.10gb: {meters: {gpu_hours: {unit_price: "0.50"}}}
`
	tokyoContract = `tenant: tokyo
currency: USD
start: 2026-09-01T00:00:00Z
end: 2027-01-01T00:00:00Z
minimum_commitment: {monthly_amount: "100"}
reservations:
  - {sku: H100-SXM5-80GB, gpus: 1, rate: "2.00"}
  - {sku: H100-SXM5-80GB/1g.10gb, instances: 2, monthly_fee: "50", start: 2026-09-01T00:00:00Z, end: 2026-12-01T00:00:00Z}
`
)

// addSeptember gives the fixture 1-25 September 2026 of tenant tokyo,
// department 研究部: an H100 every hour, busier by day (three weeks and more:
// a capacity fit, a cost trend, an anomaly baseline), mostly idle and with
// little memory (a right-sizing to a MIG profile), with energy its book
// does not price, and seven more H100s for one hour on the 24th (an
// anomaly, stored). tokyo is a
// customer with a tiered book and a reservation, and its September is
// invoiced, the customer named 東京ラボ. The default PDF font shows neither
// name: the PDFs of that invoice and of September's chargeback are 422s.
func addSeptember(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	var samples []collectors.Sample
	hour := func(gpu string, h time.Time, us uint64) {
		x := h100Hour("tokyo", "研究部", gpu, "job-tokyo", h, us)
		x.Values.SMActiveMicroseconds = us / 50
		x.Values.MemPeakBytes = 4 << 30
		x.Values.EnergyMillijoules = us / 4000 // 250 W
		samples = append(samples, x)
	}
	for h := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC); h.Before(time.Date(2026, 9, 26, 0, 0, 0, 0, time.UTC)); h = h.Add(time.Hour) {
		us := uint64(1_800_000_000)
		if h.Hour() >= 8 && h.Hour() < 20 {
			us = 3_600_000_000
		}
		hour("GPU-tokyo", h, us)
		if h.Hour() < 6 { // a GPU nobody holds: idle capacity
			x := h100Hour("", "", "GPU-spare", "", h, 3_600_000_000)
			samples = append(samples, x)
		}
	}
	// Anomalies need three weeks of history and a step five spreads (at
	// least five GPU-hours) from the median.
	for g := range 7 {
		hour(fmt.Sprintf("GPU-tokyo-spike-%d", g), time.Date(2026, 9, 24, 14, 0, 0, 0, time.UTC), 3_600_000_000)
	}
	if err := f.store.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	rollUp(t, f.store)
	tokyo := billing.Customer{Tenant: "tokyo", Department: "研究部", Name: "東京ラボ", Address: []string{"1-1 Chiyoda", "Tokyo"}, TaxID: "JP-T1234",
		Currency: "USD", TimeZone: "Asia/Tokyo", Book: writeBook(t, tokyoBook), Contract: writeBook(t, tokyoContract),
		PaymentTerms: &billing.PaymentTerms{Note: "振込: 三菱UFJ銀行 0001234"}}
	f.customers.Customers = append(f.customers.Customers, tokyo)
	cs := f.customers
	cs.Customers = []billing.Customer{tokyo}
	rep, err := invoiceRunner(f.store, cs).Run(ctx, billing.RunRequest{Period: "2026-09"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Outcomes) != 1 || rep.Outcomes[0].Action != billing.ActionFinalized {
		t.Fatalf("tokyo's September invoice: %+v", rep.Outcomes)
	}
	f.invs["tokyo"] = rep.Outcomes[0].Invoice
	found, _, err := f.insights(t, time.Now).Detect(ctx, insights.Request{From: time.Date(2026, 9, 24, 0, 0, 0, 0, time.UTC),
		To: time.Date(2026, 9, 26, 0, 0, 0, 0, time.UTC), Scope: auth.Scope{Kind: auth.KindAdmin}}, true)
	if err != nil || len(found) == 0 {
		t.Fatalf("anomalies of tokyo's 24 September: %v, %v", found, err)
	}
}

// noLeader is a follower's forwarder while no replica leads.
type noLeader struct{}

func (noLeader) Forward(context.Context, string, http.Header, []byte) (leader.Forwarded, bool, error) {
	return leader.Forwarded{}, false, leader.ErrNoLeader
}

func (noLeader) ForwardGet(context.Context, string, string, http.Header) (leader.Forwarded, bool, error) {
	return leader.Forwarded{}, false, leader.ErrNoLeader
}
