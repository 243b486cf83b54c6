package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
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
	ts, _ := f.fullAPI(t)

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
		{"the cost of a bad month", ts, "GET", "/v1/cost", "/v1/cost?tenant=acme&month=October", admin, "", 400},
		{"another tenant's cost", ts, "GET", "/v1/cost", "/v1/cost?tenant=initech&" + oct, research, "", 404},

		{"tenants", ts, "GET", "/v1/tenants", "/v1/tenants", research, "", 200},
		{"tenants with a parameter", ts, "GET", "/v1/tenants", "/v1/tenants?tenant=acme", admin, "", 400},

		{"chargeback as JSON", ts, "GET", "/v1/chargeback", "/v1/chargeback?" + oct + "&idle=by_use", admin, "", 200},
		{"chargeback as CSV", ts, "GET", "/v1/chargeback", "/v1/chargeback?" + oct + "&format=csv", research, "", 200},
		{"chargeback as HTML", ts, "GET", "/v1/chargeback", "/v1/chargeback?" + oct + "&format=html", admin, "", 200},
		{"chargeback as PDF", ts, "GET", "/v1/chargeback", "/v1/chargeback?" + oct + "&format=pdf", admin, "", 200},
		{"chargeback without a month", ts, "GET", "/v1/chargeback", "/v1/chargeback", admin, "", 400},
		{"chargeback for a tenant key", ts, "GET", "/v1/chargeback", "/v1/chargeback?" + oct, acme, "", 403},
		{"chargeback the PDF font cannot show", ts, "GET", "/v1/chargeback", "/v1/chargeback?month=2026-09&format=pdf", admin, "", 422},

		{"an admission", ts, "POST", "/v1/admission", "/v1/admission", acme, admit, 200},
		{"a dry run of parts", ts, "POST", "/v1/admission", "/v1/admission", admin,
			`{"tenant":"globex","dry_run":true,"parts":[{"gpu_model":"H100-SXM5-80GB","count":2}],"expected_duration":"2h"}`, 200},
		{"a denied admission", ts, "POST", "/v1/admission", "/v1/admission", admin,
			`{"tenant":"acme","gpu_model":"H100-SXM5-80GB","count":100,"expected_duration":"1h"}`, 200},
		{"an admission without a duration", ts, "POST", "/v1/admission", "/v1/admission", acme, `{"gpu_model":"H100-SXM5-80GB","count":1}`, 400},
		{"an admission by a portal token", ts, "POST", "/v1/admission", "/v1/admission", portal, admit, 403},
		{"an admission for an unknown tenant", ts, "POST", "/v1/admission", "/v1/admission", admin,
			`{"tenant":"nosuch","gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h"}`, 404},

		{"quotas", ts, "GET", "/v1/quotas", "/v1/quotas", admin, "", 200},
		{"quotas with a parameter", ts, "GET", "/v1/quotas", "/v1/quotas?tenant=acme", admin, "", 400},

		{"a pod admitted", ts, "POST", "/v1/admission/k8s", "/v1/admission/k8s", admin, k8sReview("team-acme"), 200},
		{"a pod of no metered namespace", ts, "POST", "/v1/admission/k8s", "/v1/admission/k8s", admin, k8sReview("kube-system"), 200},
		{"a pod denied", ts, "POST", "/v1/admission/k8s", "/v1/admission/k8s", admin,
			strings.Replace(k8sReview("team-acme"), `"nvidia.com/gpu":"1"`, `"nvidia.com/gpu":"64"`, 1), 200},
		{"a review that is not one", ts, "POST", "/v1/admission/k8s", "/v1/admission/k8s", admin, `{}`, 400},
		{"a review by a portal token", ts, "POST", "/v1/admission/k8s", "/v1/admission/k8s", portal, k8sReview("team-acme"), 403},

		{"efficiency", ts, "GET", "/v1/insights/efficiency", "/v1/insights/efficiency?" + oct, admin, "", 200},
		{"efficiency of both months", ts, "GET", "/v1/insights/efficiency", "/v1/insights/efficiency?from=2026-09-01&to=2026-11-01", admin, "", 200},
		{"efficiency of a month and dates", ts, "GET", "/v1/insights/efficiency", "/v1/insights/efficiency?" + oct + "&from=2026-10-01", admin, "", 400},
		{"efficiency of another tenant", ts, "GET", "/v1/insights/efficiency", "/v1/insights/efficiency?" + oct + "&tenant=globex", acme, "", 404},

		{"right-sizing", ts, "GET", "/v1/insights/rightsize", "/v1/insights/rightsize?" + oct, admin, "", 200},
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
	}
	// Every operation but the document's own: 401 without a key, 413 over
	// the body limit, 429 over the rate limit, 500 when ClickHouse fails.
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			target := strings.ReplaceAll(path, "{ref}", f.invs["acme"].Number)
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

// addSeptember gives the fixture 10-25 September 2026: an H100 of tenant
// tokyo, department 研究部, every hour (two weeks and more: a capacity
// fit), rolled up, and tokyo's September invoice, its customer named
// 東京ラボ. The default PDF font shows neither name: the PDFs of that
// invoice and of September's chargeback are refused with 422.
func addSeptember(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	var samples []collectors.Sample
	for h := time.Date(2026, 9, 10, 0, 0, 0, 0, time.UTC); h.Before(time.Date(2026, 9, 26, 0, 0, 0, 0, time.UTC)); h = h.Add(time.Hour) {
		// Busier in the day than at night: a season to fit.
		us := uint64(1_800_000_000)
		if h.Hour() >= 8 && h.Hour() < 20 {
			us = 3_600_000_000
		}
		samples = append(samples, h100Hour("tokyo", "研究部", "GPU-tokyo", "job-tokyo", h, us))
	}
	if err := f.store.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	rollUp(t, f.store)
	cs := customersOn(f.chargeback.Book, [2]string{"tokyo", "研究部"})
	cs.Customers[0].Name = "東京ラボ"
	rep, err := invoiceRunner(f.store, cs).Run(ctx, billing.RunRequest{Period: "2026-09"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Outcomes) != 1 || rep.Outcomes[0].Action != billing.ActionFinalized {
		t.Fatalf("tokyo's September invoice: %+v", rep.Outcomes)
	}
	f.invs["tokyo"] = rep.Outcomes[0].Invoice
}
