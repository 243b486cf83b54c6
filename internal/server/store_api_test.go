package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/pricing"
)

type usageBody struct {
	Scope           string              `json:"scope"`
	RolledUpThrough time.Time           `json:"rolled_up_through"`
	Points          []map[string]any    `json:"points"`
	Extra           map[string]struct{} `json:"-"`
}

func (f *fixture) usage(t *testing.T, token, query string) usageBody {
	t.Helper()
	code, body, _ := f.get(t, token, "/v1/usage?"+query)
	if code != http.StatusOK {
		t.Fatalf("usage %s: %d %s", query, code, body)
	}
	var u usageBody
	if err := json.Unmarshal(body, &u); err != nil {
		t.Fatal(err)
	}
	return u
}

func tenantsOf(u usageBody) []string {
	seen := map[string]bool{}
	for _, p := range u.Points {
		seen[fmt.Sprint(p["tenant"])] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

func TestAPIScopes(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	oct := "from=2026-10-01&to=2026-11-01&step=month&group_by=tenant"
	for key, want := range map[string]string{
		"admin":    "[acme globex initech]",
		"acme":     "[acme]",
		"globex":   "[globex]",
		"research": "[acme globex]",
	} {
		if got := fmt.Sprint(tenantsOf(f.usage(t, f.tokens[key], oct))); got != want {
			t.Errorf("%s key sees tenants %s, want %s", key, got, want)
		}
	}
	// No parameter widens a tenant key: grouping, hosts, workloads and an
	// explicit other tenant all stay inside acme.
	for _, q := range []string{oct + ",host,workload", "from=2026-10-01&to=2026-11-01&group_by=department,sku", "from=2026-10-01&to=2026-11-01"} {
		u := f.usage(t, f.tokens["acme"], q)
		for _, p := range u.Points {
			if tn, ok := p["tenant"]; ok && tn != "acme" {
				t.Errorf("acme key, %s: a point of %v", q, tn)
			}
			if h, ok := p["host"]; ok && h != "host-acme" {
				t.Errorf("acme key, %s: host %v", q, h)
			}
		}
	}
	code, body, _ := f.get(t, f.tokens["acme"], "/v1/invoices?tenant=globex")
	if code != 200 || strings.Contains(string(body), "globex") {
		t.Errorf("acme key listing globex's invoices: %d %s", code, body)
	}
	for _, ref := range []string{f.invs["globex"].Number, f.invs["globex"].ID, f.invs["initech"].Number} {
		if code, body, _ := f.get(t, f.tokens["acme"], "/v1/invoices/"+ref); code != 404 {
			t.Errorf("acme key reading %s: %d %s", ref, code, body)
		}
		if code, _, _ := f.get(t, f.tokens["acme"], "/v1/invoices/"+ref+"?format=pdf"); code != 404 {
			t.Errorf("acme key reading %s as PDF: %d", ref, code)
		}
	}
	code, body, _ = f.get(t, f.tokens["research"], "/v1/invoices")
	var list struct {
		Invoices []struct{ Tenant, Number string }
	}
	_ = json.Unmarshal(body, &list)
	if code != 200 || len(list.Invoices) != 2 {
		t.Errorf("research key lists %d invoices (%s), want acme's and globex's", len(list.Invoices), body)
	}
	if code, _, _ := f.get(t, f.tokens["research"], "/v1/invoices/"+f.invs["initech"].Number); code != 404 {
		t.Errorf("research key reading initech's invoice: %d", code)
	}

	// The right keys read their invoices in every format.
	for format, prefix := range map[string]string{"json": `{"id":"acme/2026-10/1"`, "csv": "invoice_number", "pdf": "%PDF"} {
		code, body, hdr := f.get(t, f.tokens["acme"], "/v1/invoices/"+f.invs["acme"].Number+"?format="+format)
		if code != 200 || !strings.HasPrefix(string(body), prefix) {
			t.Errorf("acme's invoice as %s: %d %s %.60q", format, code, hdr.Get("Content-Type"), body)
		}
	}
	if code, body, _ := f.get(t, f.tokens["admin"], "/v1/invoices/"+f.invs["initech"].ID); code != 200 || !strings.Contains(string(body), `"tenant":"initech"`) {
		t.Errorf("admin reading initech's invoice by id: %d %.80s", code, body)
	}
}

func TestAPIAuthentication(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	path := "/v1/usage?from=2026-10-01&to=2026-11-01"
	id, secret, _ := auth.ParseToken(f.tokens["admin"])
	for name, token := range map[string]string{
		"no key":       "",
		"malformed":    "not-a-token",
		"unknown id":   "gmk_nosuchkeyid_" + secret,
		"wrong secret": "gmk_" + id + "_" + strings.Repeat("x", 43),
		"expired":      f.tokens["expired"],
		"revoked":      f.tokens["revoked"],
	} {
		code, body, hdr := f.get(t, token, path)
		var e struct{ Code, Message string }
		if code != 401 || json.Unmarshal(body, &e) != nil || e.Code != "unauthorized" || hdr.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: %d %s", name, code, body)
		}
	}
	// A portal token may travel in the URL; an API key may not.
	if code, body, _ := f.get(t, "", path+"&access_token="+f.tokens["portal"]); code != 200 {
		t.Errorf("portal token as access_token: %d %s", code, body)
	}
	if code, _, _ := f.get(t, "", path+"&access_token="+f.tokens["acme"]); code != 401 {
		t.Errorf("API key as access_token: %d, want 401", code)
	}
	if code, body, _ := f.get(t, "", "/v1/openapi.json"); code != 200 || !strings.Contains(string(body), `"openapi"`) {
		t.Errorf("openapi.json without a key: %d", code)
	}

	// The scheme is case-insensitive; X-Forwarded-For from a client does
	// not set the remote address recorded.
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/invoices?period=2026-10", nil)
	req.Header.Set("Authorization", "bearer "+f.tokens["globex"])
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("lower-case bearer: %d, Cache-Control %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
	f.stop()
	entries, err := f.store.Audit(context.Background(), f.keyIDs["globex"])
	if err != nil {
		t.Fatal(err)
	}
	portal, err := f.store.Audit(context.Background(), f.keyIDs["portal"])
	if err != nil {
		t.Fatal(err)
	}
	if len(portal) != 1 || strings.Contains(portal[0].Path, f.tokens["portal"]) || !strings.Contains(portal[0].Path, "access_token=redacted") {
		t.Errorf("the portal token reached the audit table: %+v", portal)
	}
	if len(entries) != 1 || entries[0].Route != "/v1/invoices" || entries[0].Status != 200 || entries[0].Scope != "tenant:globex" ||
		entries[0].Remote != "127.0.0.1" || entries[0].RequestID == "" || !strings.Contains(entries[0].Path, "period=2026-10") {
		t.Errorf("audit of the globex key: %+v", entries)
	}
}

func TestAPIRejectsMalformedInput(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	token := f.tokens["admin"]
	cases := map[string]string{
		"no from":              "/v1/usage?to=2026-11-01",
		"bad date":             "/v1/usage?from=yesterday&to=2026-11-01",
		"from after to":        "/v1/usage?from=2026-11-01&to=2026-10-01",
		"from equals to":       "/v1/usage?from=2026-11-01&to=2026-11-01",
		"range over the limit": "/v1/usage?from=2024-01-01&to=2026-11-01",
		"not a whole hour":     "/v1/usage?from=2026-10-01T00:30:00Z&to=2026-11-01",
		"unknown step":         "/v1/usage?from=2026-10-01&to=2026-11-01&step=week",
		"too many hours":       "/v1/usage?from=2020-01-01&to=2026-01-01&step=hour",
		"unknown group_by":     "/v1/usage?from=2026-10-01&to=2026-11-01&group_by=colour",
		"twice the same":       "/v1/usage?from=2026-10-01&to=2026-11-01&group_by=sku,sku",
		"sql in group_by":      "/v1/usage?from=2026-10-01&to=2026-11-01&group_by=tenant%27%3B%20DROP%20TABLE%20usage_samples%3B--",
		"sql in from":          "/v1/usage?from=2026-10-01%27%20OR%201%3D1--&to=2026-11-01",
		"unknown meter":        "/v1/usage?from=2026-10-01&to=2026-11-01&meters=gpu_hours,fun",
		"unknown tz":           "/v1/usage?from=2026-10-01&to=2026-11-01&tz=Mars/Olympus",
		"tz path":              "/v1/usage?from=2026-10-01&to=2026-11-01&tz=../../etc/passwd",
		"half-hour tz":         "/v1/usage?from=2026-10-01&to=2026-11-01&tz=Asia/Kolkata",
		"bad utf-8":            "/v1/usage?from=2026-10-01&to=2026-11-01&group_by=%ff%fe",
		"control characters":   "/v1/usage?from=2026-10-01&to=2026-11-01&tz=UTC%00",
		"unknown parameter":    "/v1/usage?from=2026-10-01&to=2026-11-01&tenant=globex",
		"bad period":           "/v1/invoices?period=2026-13",
		"bad page size":        "/v1/invoices?page_size=0",
		"huge page size":       "/v1/invoices?page_size=100000",
		"bad invoice format":   "/v1/invoices/GC-000001?format=docx",
		"bad utf-8 invoice":    "/v1/invoices/%ff%fe",
		"format twice":         "/v1/invoices/GC-000001?format=pdf&format=csv",
		"tenant twice":         "/v1/invoices?tenant=acme&tenant=globex",
		"month twice":          "/v1/cost?tenant=acme&month=2026-10&month=2026-09",
		"meter twice":          "/v1/usage?from=2026-10-01&to=2026-11-01&meters=gpu_hours,gpu_hours",
		"from twice":           "/v1/usage?from=2026-10-01&from=2026-09-01&to=2026-11-01",
		"half-hour tz at to":   "/v1/usage?from=2026-03-01T13:00:00Z&to=2026-04-30T13:00:00Z&tz=Australia/Lord_Howe",
	}
	for name, path := range cases {
		code, body, _ := f.get(t, token, path)
		var e struct{ Code, Message string }
		if code != 400 || json.Unmarshal(body, &e) != nil || e.Code != "bad_request" || e.Message == "" {
			t.Errorf("%s (%s): %d %s, want 400 {code: bad_request, message}", name, path, code, body)
		}
	}
	if code, body, _ := f.get(t, token, "/v1/invoices/GC-999999"); code != 404 {
		t.Errorf("unknown invoice: %d %s", code, body)
	}
	// A body over the limit is refused before any handler reads it.
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/invoices", strings.NewReader(strings.Repeat("x", 2<<20)))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a 2 MiB body: %d, want 413", resp.StatusCode)
	}
}

func TestAPIRateLimit(t *testing.T) {
	cfg := server.DefaultConfig()
	cfg.RateLimit = server.RateLimit{PerSecond: 0.5, Burst: 2}
	f := newFixture(t, cfg)
	for i := range 2 {
		if code, body, _ := f.get(t, f.tokens["acme"], "/v1/invoices"); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	code, body, hdr := f.get(t, f.tokens["acme"], "/v1/invoices")
	if code != 429 || hdr.Get("Retry-After") != "2" || !strings.Contains(string(body), "rate_limited") {
		t.Fatalf("third request: %d Retry-After %q %s", code, hdr.Get("Retry-After"), body)
	}
	// The limit is per key: another key is not held back.
	if code, _, _ := f.get(t, f.tokens["globex"], "/v1/invoices"); code != 200 {
		t.Errorf("another key: %d", code)
	}
}

// The API's usage for an invoiced month equals what the invoice billed,
// and hours not yet rolled up come from raw samples.
func TestAPIUsageMatchesInvoice(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	u := f.usage(t, f.tokens["acme"], "from=2026-10-01&to=2026-11-01&step=month&group_by=sku&meters=gpu_hours")
	got := map[string]decimal.Decimal{}
	for _, p := range u.Points {
		got[fmt.Sprint(p["sku"])] = decimal.RequireFromString(fmt.Sprint(p["gpu_hours"]))
	}
	billed := map[string]decimal.Decimal{}
	for _, l := range f.invs["acme"].Lines {
		if l.Meter == pricing.GPUHours && (l.Kind == pricing.KindOnDemand || l.Kind == pricing.KindBurst || l.Kind == pricing.KindReserved) {
			billed[l.SKU] = billed[l.SKU].Add(l.Quantity)
		}
	}
	if len(got) != 2 || len(billed) != 2 {
		t.Fatalf("usage %v, billed %v", got, billed)
	}
	for sku, q := range billed {
		if !got[sku].Round(pricing.StoragePlaces).Equal(q.Round(pricing.StoragePlaces)) {
			t.Errorf("%s: the API reports %s GPU-hours, the invoice billed %s", sku, got[sku], q)
		}
	}

	// This hour's raw sample: 60 s of an H100 = 1/60 GPU-hour.
	now := time.Now().UTC().Truncate(time.Hour)
	q := fmt.Sprintf("from=%s&to=%s&step=hour&meters=gpu_hours", now.Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	u = f.usage(t, f.tokens["acme"], q)
	if !u.RolledUpThrough.Before(now.Add(time.Hour)) || len(u.Points) != 1 ||
		!decimal.RequireFromString(fmt.Sprint(u.Points[0]["gpu_hours"])).Equal(decimal.RequireFromString("0.016666666666666667")) {
		t.Errorf("the current hour: rolled up through %s, points %v", u.RolledUpThrough, u.Points)
	}
	// Day buckets in New York: 2 October 00:00 UTC is 1 October 20:00 EDT.
	u = f.usage(t, f.tokens["acme"], "from=2026-10-01&to=2026-10-06&step=day&tz=America/New_York&meters=gpu_hours")
	if len(u.Points) == 0 || u.Points[0]["bucket"] != "2026-10-01T00:00:00-04:00" {
		t.Errorf("New York days: %v", u.Points)
	}
}

// Month-to-date cost of an invoiced month equals the invoice's lines;
// other tenants' months are not found through a tenant key.
func TestAPICostTenantsChargeback(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	code, body, _ := f.get(t, f.tokens["acme"], "/v1/cost?month=2026-10")
	var cost struct {
		SoFar    string `json:"so_far"`
		Forecast string `json:"forecast"`
	}
	if code != 200 || json.Unmarshal(body, &cost) != nil {
		t.Fatalf("cost: %d %s", code, body)
	}
	inv := f.invs["acme"]
	if want := inv.Money(inv.SubtotalMinor); cost.SoFar != want || cost.Forecast != want {
		t.Errorf("October so far %s, forecast %s; the invoice's subtotal is %s", cost.SoFar, cost.Forecast, want)
	}
	var raw struct {
		Meters []map[string]string `json:"meters"`
	}
	_ = json.Unmarshal(body, &raw)
	byMeter := map[string]int64{}
	for _, l := range inv.Lines {
		byMeter[string(l.Meter)] += l.AmountMinor
	}
	for _, m := range raw.Meters {
		if want := inv.Money(byMeter[m["meter"]]); m["so_far"] != want {
			t.Errorf("meter %s: so far %s, the invoice's lines %s", m["meter"], m["so_far"], want)
		}
	}
	// This month: the current hour is not over, so nothing is priced yet,
	// and the forecast is at least what has been used.
	if code, body, _ := f.get(t, f.tokens["acme"], "/v1/cost"); code != 200 || !strings.Contains(string(body), `"month":"`+time.Now().UTC().Format("2006-01")+`"`) {
		t.Errorf("this month: %d %s", code, body)
	}
	for name, c := range map[string]struct {
		key, query string
		code       int
	}{
		"another tenant":          {"acme", "tenant=globex", 404},
		"outside the department":  {"research", "tenant=initech", 404},
		"admin needs a tenant":    {"admin", "", 400},
		"not a customer":          {"admin", "tenant=nobody", 404},
		"bad month":               {"acme", "month=2026-1", 400},
		"unknown parameter":       {"acme", "department=ops", 400},
		"a month not yet begun":   {"acme", "month=2099-01", 404},
		"the department's tenant": {"research", "tenant=globex&month=2026-10", 200},
		"admin with a tenant":     {"admin", "tenant=initech&month=2026-10", 200},
	} {
		if code, body, _ := f.get(t, f.tokens[c.key], "/v1/cost?"+c.query); code != c.code {
			t.Errorf("cost, %s: %d %s, want %d", name, code, body, c.code)
		}
	}

	for key, want := range map[string]string{"acme": "acme", "research": "acme globex", "admin": "acme globex initech"} {
		code, body, _ := f.get(t, f.tokens[key], "/v1/tenants")
		var ts struct {
			Tenants []struct{ Tenant, BookVersion string }
		}
		_ = json.Unmarshal(body, &ts)
		var names []string
		for _, tn := range ts.Tenants {
			names = append(names, tn.Tenant)
		}
		if code != 200 || strings.Join(names, " ") != want {
			t.Errorf("tenants for %s: %d %v, want %s", key, code, names, want)
		}
	}

	if code, body, _ := f.get(t, f.tokens["acme"], "/v1/chargeback?month=2026-10"); code != 403 {
		t.Errorf("chargeback with a tenant key: %d %s", code, body)
	}
	for key, want := range map[string]string{"research": "research", "admin": "ops research"} {
		code, body, _ := f.get(t, f.tokens[key], "/v1/chargeback?month=2026-10")
		var rep struct {
			Departments []struct{ Name string }
			Days        []struct{ Department string }
		}
		_ = json.Unmarshal(body, &rep)
		var names []string
		for _, d := range rep.Departments {
			names = append(names, d.Name)
		}
		sort.Strings(names)
		if code != 200 || strings.Join(names, " ") != want {
			t.Errorf("chargeback for %s: %d %v, want %s", key, code, names, want)
		}
		for _, d := range rep.Days {
			if key == "research" && d.Department != "research" {
				t.Errorf("research key sees a day of %s", d.Department)
			}
		}
	}
	for format, prefix := range map[string]string{"csv": "period,", "html": "<!DOCTYPE html>", "pdf": "%PDF"} {
		code, body, _ := f.get(t, f.tokens["research"], "/v1/chargeback?month=2026-10&format="+format)
		if code != 200 || !strings.HasPrefix(strings.TrimSpace(string(body)), prefix) {
			t.Errorf("chargeback as %s: %d %.40q", format, code, body)
		}
	}
	if code, _, _ := f.get(t, f.tokens["admin"], "/v1/chargeback?month=2026-10&idle=share"); code != 400 {
		t.Errorf("unknown idle mode: %d", code)
	}
	// Shared by weight without weights configured: the request cannot be
	// answered as asked, a 400 rather than a 500; a department key is not
	// told about other departments.
	code, body, _ = f.get(t, f.tokens["admin"], "/v1/chargeback?month=2026-10&idle=by_weight")
	if code != 400 || !strings.Contains(string(body), "weight") {
		t.Errorf("by_weight without weights, admin: %d %s", code, body)
	}
	code, body, _ = f.get(t, f.tokens["research"], "/v1/chargeback?month=2026-10&idle=by_weight")
	if code != 400 || strings.Contains(string(body), "ops") {
		t.Errorf("by_weight without weights, department key: %d %s", code, body)
	}
}

// Cached rollup reads last only until the next rollup run completes.
func TestAPIUsageCacheFollowsRollups(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	q := "from=2026-10-01&to=2026-11-01&step=month&meters=gpu_hours"
	before := f.usage(t, f.tokens["globex"], q)
	late := h100Hour("globex", "research", "GPU-late", "late", time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC), 3_600_000_000)
	if err := f.store.InsertSamples(context.Background(), []collectors.Sample{late}); err != nil {
		t.Fatal(err)
	}
	if again := f.usage(t, f.tokens["globex"], q); fmt.Sprint(again.Points) != fmt.Sprint(before.Points) {
		t.Fatalf("usage changed before the rollup ran: %v -> %v", before.Points, again.Points)
	}
	rollUp(t, f.store)
	time.Sleep(1100 * time.Millisecond) // the rollup state is read at most once a second
	after := f.usage(t, f.tokens["globex"], q)
	was := decimal.RequireFromString(fmt.Sprint(before.Points[0]["gpu_hours"]))
	now := decimal.RequireFromString(fmt.Sprint(after.Points[0]["gpu_hours"]))
	if !now.Sub(was).Equal(decimal.NewFromInt(1)) {
		t.Fatalf("after the rollup: %s GPU-hours, before %s; want one more", now, was)
	}
}

func TestAPIPagination(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	var seen []string
	token := ""
	for page := 0; page < 5; page++ {
		path := "/v1/invoices?page_size=2"
		if token != "" {
			path += "&page_token=" + url.QueryEscape(token)
		}
		code, body, _ := f.get(t, f.tokens["admin"], path)
		var list struct {
			Invoices      []struct{ ID string }
			NextPageToken string `json:"next_page_token"`
		}
		if code != 200 || json.Unmarshal(body, &list) != nil {
			t.Fatalf("page %d: %d %s", page, code, body)
		}
		for _, inv := range list.Invoices {
			seen = append(seen, inv.ID)
		}
		if list.NextPageToken == "" {
			break
		}
		if len(list.Invoices) != 2 {
			t.Fatalf("a page with a next page holds %d invoices, want 2", len(list.Invoices))
		}
		token = list.NextPageToken
	}
	if strings.Join(seen, " ") != "acme/2026-10/1 globex/2026-10/1 initech/2026-10/1" {
		t.Fatalf("pages gave %v", seen)
	}
}
