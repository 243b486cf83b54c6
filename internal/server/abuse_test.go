package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/internal/auditqueue"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/chargeback"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/pricing"
)

// countingQuotas admits everything and counts the admissions it decided.
type countingQuotas struct {
	allowAll
	mu     sync.Mutex
	admits int
}

func (q *countingQuotas) AdmitAll(ctx context.Context, s auth.Scope, rs []quota.Request) (quota.Decision, error) {
	q.mu.Lock()
	q.admits++
	q.mu.Unlock()
	return q.allowAll.AdmitAll(ctx, s, rs)
}

const admissionJSON = `{"tenant":"acme","gpu_model":"H100-SXM5-80GB","count":3,"expected_duration":"744h"}`

// Portal tokens travel in URLs and live in browsers: they read, and never
// place an admission hold (before the fix a portal token's POST
// /v1/admission held quota that denied the tenant's real pods).
func TestPortalTokensOnlyRead(t *testing.T) {
	quotas := &countingQuotas{}
	r := newAPIRig(t, DefaultConfig(), API{Quotas: quotas})
	portal := r.addKey(t, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}, Portal: true, Expires: time.Hour})
	tenant := r.addKey(t, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}})

	for name, rec := range map[string]*httptest.ResponseRecorder{
		"portal token in the URL":    r.do(http.MethodPost, "/v1/admission?access_token="+portal, "", admissionJSON, ""),
		"portal token in the header": r.do(http.MethodPost, "/v1/admission", portal, admissionJSON, ""),
		"portal token, k8s review":   r.do(http.MethodPost, "/v1/admission/k8s?access_token="+portal, "", `{}`, ""),
	} {
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "read-only") {
			t.Errorf("%s: %d %s, want 403 read-only", name, rec.Code, rec.Body.String())
		}
	}
	if quotas.admits != 0 {
		t.Errorf("portal tokens placed %d admissions", quotas.admits)
	}
	if rec := r.do(http.MethodGet, "/v1/quotas?access_token="+portal, "", "", ""); rec.Code != http.StatusOK {
		t.Errorf("portal token reading quotas: %d %s", rec.Code, rec.Body.String())
	}
	if rec := r.do(http.MethodPost, "/v1/admission", tenant, admissionJSON, ""); rec.Code != http.StatusOK || quotas.admits != 1 {
		t.Errorf("tenant API key admission: %d (%d admits)", rec.Code, quotas.admits)
	}
}

// A caller guessing key ids costs one store lookup per id: before the fix
// 17,010 random ids in 8 s cost 17,010 ClickHouse reads. Past the
// address's unauthenticated budget the server answers 429 without a
// lookup, and a key it has cached keeps working from that address.
func TestUnauthenticatedCallersAreRateLimited(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Unauthenticated = RateLimit{PerSecond: 0.01, Burst: 5}
	r := newAPIRig(t, cfg, API{Quotas: allowAll{}})
	good := r.addKey(t, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}})
	const attacker, neighbour = "192.0.2.7:4000", "192.0.2.8:4000"
	if rec := r.do(http.MethodGet, "/v1/quotas", good, "", attacker); rec.Code != http.StatusOK {
		t.Fatalf("good key: %d", rec.Code)
	}
	readsBefore := r.keys.readCount()
	var unauthorized, limited int
	for i := 0; i < 50; i++ {
		_, token, err := auth.NewKey(auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindAdmin}}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		switch rec := r.do(http.MethodGet, "/v1/quotas", token, "", attacker); rec.Code {
		case http.StatusUnauthorized:
			unauthorized++
		case http.StatusTooManyRequests:
			limited++
			if rec.Header().Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
		default:
			t.Fatalf("random key id: %d %s", rec.Code, rec.Body.String())
		}
	}
	// The good key's lookup spent one of the five.
	if reads := r.keys.readCount() - readsBefore; reads != 4 || unauthorized != 4 || limited != 46 {
		t.Errorf("50 random key ids: %d store reads, %d × 401, %d × 429; want 4, 4, 46", reads, unauthorized, limited)
	}
	for name, token := range map[string]string{"no key": "", "malformed": "not-a-token"} {
		if rec := r.do(http.MethodGet, "/v1/quotas", token, "", attacker); rec.Code != http.StatusTooManyRequests {
			t.Errorf("%s from the limited address: %d, want 429", name, rec.Code)
		}
	}
	if rec := r.do(http.MethodGet, "/v1/quotas", good, "", attacker); rec.Code != http.StatusOK {
		t.Errorf("cached good key from the limited address: %d, want 200", rec.Code)
	}
	if rec := r.do(http.MethodGet, "/v1/quotas", "not-a-token", "", neighbour); rec.Code != http.StatusUnauthorized {
		t.Errorf("another address: %d, want its own budget (401)", rec.Code)
	}
	// One IPv6 host holds a whole /64: its addresses share one budget.
	for i := 0; i < 5; i++ {
		r.do(http.MethodGet, "/v1/quotas", "not-a-token", "", fmt.Sprintf("[2001:db8:1:2::%x]:4000", i+1))
	}
	if rec := r.do(http.MethodGet, "/v1/quotas", "not-a-token", "", "[2001:db8:1:2::ff]:4000"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("a sixth address of one /64: %d, want 429", rec.Code)
	}
	if rec := r.do(http.MethodGet, "/v1/quotas", "not-a-token", "", "[2001:db8:1:3::1]:4000"); rec.Code != http.StatusUnauthorized {
		t.Errorf("another /64: %d, want its own budget (401)", rec.Code)
	}
	// Loopback is the webhook's TLS sidecar relaying the API server: no
	// budget for others to spend.
	for i := 0; i < 10; i++ {
		if rec := r.do(http.MethodGet, "/v1/quotas", "not-a-token", "", "127.0.0.1:4000"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("loopback, attempt %d: %d, want 401", i, rec.Code)
		}
	}
}

// flakyAudit fails while down and keeps what it is given.
type flakyAudit struct {
	mu   sync.Mutex
	down bool
	got  []auth.AuditEntry
}

func (a *flakyAudit) RecordAudit(_ context.Context, es []auth.AuditEntry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down {
		return errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")
	}
	a.got = append(a.got, es...)
	return nil
}

func (a *flakyAudit) setDown(down bool) { a.mu.Lock(); a.down = down; a.mu.Unlock() }

func (a *flakyAudit) count() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.got) }

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Requests answered from cached keys while ClickHouse is down (admissions
// included) are audited: before the fix their entries were dropped
// (gpumeter_api_audit_dropped_total 11); now they wait in the on-disk
// queue, survive a restart, and reach the table once it is back.
func TestAuditEntriesWaitOnDiskWhileTheStoreIsDown(t *testing.T) {
	dir := t.TempDir()
	q, err := auditqueue.Open(auditqueue.DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	audit := &flakyAudit{down: true}
	r := newAPIRig(t, DefaultConfig(), API{Quotas: allowAll{}, Audit: audit, AuditQueue: q})
	token := r.addKey(t, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}})
	for i := 0; i < 11; i++ {
		if rec := r.do(http.MethodPost, "/v1/admission", token, admissionJSON, ""); rec.Code != http.StatusOK {
			t.Fatalf("admission %d: %d", i, rec.Code)
		}
	}
	eventually(t, "11 entries kept on disk", func() bool { n, _ := q.Pending(); return n == 11 })
	if d := dropped(t, r.reg); d != 0 {
		t.Fatalf("dropped %v entries while the queue had room", d)
	}
	audit.setDown(false)
	eventually(t, "the kept entries written", func() bool { return audit.count() == 11 })
	// The batch's file goes once the store has acknowledged it.
	eventually(t, "the queue emptied", func() bool { n, _ := q.Pending(); return n == 0 })
	audit.mu.Lock()
	defer audit.mu.Unlock()
	for _, e := range audit.got {
		if e.Route != "/v1/admission" || e.Status != http.StatusOK || e.Scope != "tenant:acme" {
			t.Fatalf("entry %+v", e)
		}
	}
}

// Entries an earlier process kept are written by the next one; a full
// queue drops what it cannot hold and counts it.
func TestAuditQueueFromAnEarlierRunAndWhenFull(t *testing.T) {
	dir := t.TempDir()
	cfg := auditqueue.DefaultConfig(dir)
	cfg.MaxBytes = 2000
	q, err := auditqueue.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Put([]auth.AuditEntry{{KeyID: "earlier", Route: "/v1/usage", Status: 200}}); err != nil {
		t.Fatal(err)
	}
	audit := &flakyAudit{}
	r := newAPIRig(t, DefaultConfig(), API{Quotas: allowAll{}, Audit: audit, AuditQueue: q})
	eventually(t, "the earlier run's entry written", func() bool { return audit.count() == 1 })

	audit.setDown(true)
	token := r.addKey(t, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}})
	// Rounds of 5 entries (about 1 KB a batch): the first fit, the later
	// ones are dropped whole.
	for round := 1; round <= 4; round++ {
		for i := 0; i < 5; i++ {
			r.do(http.MethodGet, "/v1/quotas", token, "", "")
		}
		eventually(t, "every entry kept or counted", func() bool {
			n, _ := q.Pending()
			return n+int(dropped(t, r.reg)) == 5*round
		})
	}
	if n, b := q.Pending(); n == 0 || b > cfg.MaxBytes || dropped(t, r.reg) == 0 {
		t.Errorf("a 2000-byte queue and 20 entries: %d kept (%d bytes), %v dropped; want some of each", n, b, dropped(t, r.reg))
	}
}

func dropped(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gpumeter_api_audit_dropped_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no gpumeter_api_audit_dropped_total")
	return 0
}

// Every parameter of /v1/usage is checked whole: before the fix the zone
// offset was checked at from only, a repeated meter was accepted while a
// repeated group_by was refused, and a repeated parameter was silently
// read once.
func TestParseUsageRequestRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, query, want string
	}{
		{"half-hour offset at to", "from=2026-03-01T13:00:00Z&to=2026-04-30T13:00:00Z&tz=Australia/Lord_Howe", "not a whole hour"},
		{"half-hour offset inside", "from=2026-03-01T13:00:00Z&to=2026-11-01T13:00:00Z&tz=Australia/Lord_Howe", "not a whole hour"},
		{"half-hour offset at from", "from=2026-10-01T00:00:00Z&to=2026-11-01T00:00:00Z&tz=Asia/Kolkata", "not a whole hour"},
		{"meter twice", "from=2026-10-01&to=2026-11-01&meters=gpu_hours,gpu_hours", `"gpu_hours" twice`},
		{"group_by twice", "from=2026-10-01&to=2026-11-01&group_by=sku,sku", `"sku" twice`},
		{"parameter twice", "from=2026-10-01&from=2026-09-01&to=2026-11-01", "from: given 2 times"},
		{"tz twice", "from=2026-10-01&to=2026-11-01&tz=UTC&tz=Asia/Kolkata", "tz: given 2 times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			_, err = parseUsageRequest(v, auth.Scope{Kind: auth.KindAdmin})
			var br badRequest
			if !errors.As(err, &br) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s: %v, want a bad request containing %q", tc.query, err, tc.want)
			}
		})
	}
	for _, ok := range []string{
		"from=2026-10-01&to=2026-11-01&tz=Europe/Berlin", // a whole-hour DST change inside
		"from=2026-10-01&to=2026-11-01&meters=gpu_hours,energy_kwh&group_by=tenant,sku",
	} {
		v, _ := url.ParseQuery(ok)
		if _, err := parseUsageRequest(v, auth.Scope{Kind: auth.KindAdmin}); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// Without a queue nothing waits for a retry: every batch is tried, so
// once the store is back the next batch is written, not dropped for a
// backoff meant for the queue.
func TestAuditWithoutAQueueTriesEveryBatch(t *testing.T) {
	audit := &flakyAudit{down: true}
	r := newAPIRig(t, DefaultConfig(), API{Quotas: allowAll{}, Audit: audit})
	token := r.addKey(t, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}})
	r.do(http.MethodGet, "/v1/quotas", token, "", "")
	eventually(t, "the refused entry counted", func() bool { return dropped(t, r.reg) == 1 })
	audit.setDown(false)
	r.do(http.MethodGet, "/v1/quotas", token, "", "")
	eventually(t, "the next entry written", func() bool { return audit.count() == 1 })
	if d := dropped(t, r.reg); d != 1 {
		t.Errorf("dropped %v, want only the entry the store refused", d)
	}
}

// oneInvoice serves one stored invoice to every key.
type oneInvoice struct{ si billing.StoredInvoice }

func (o oneInvoice) Invoices(context.Context, billing.InvoiceListRequest) ([]billing.StoredInvoice, error) {
	return []billing.StoredInvoice{o.si}, nil
}

func (o oneInvoice) Invoice(context.Context, billing.InvoiceRequest) (billing.StoredInvoice, error) {
	return o.si, nil
}

// A name the PDF font cannot show is refused with a clear 422 naming the
// text and the setting, never printed as dots, and never a bare 500; the
// other formats still answer.
func TestInvoicePDFTheFontCannotShowIsA422(t *testing.T) {
	inv := &billing.Invoice{ID: "acme/2026-11/1", Number: "GC-000001", Status: billing.StatusFinalized, Tenant: "acme",
		Customer: billing.Party{ID: "acme", Name: "東京ラボ"}, Issuer: billing.Party{ID: "gc", Name: "GPU Cloud"},
		PeriodLabel: "2026-11", PeriodStart: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), PeriodEnd: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		TimeZone: "UTC", Currency: pricing.Currency{Code: "USD", MinorUnits: 2}}
	r := newAPIRig(t, DefaultConfig(), API{Quotas: allowAll{}, Invoices: oneInvoice{billing.StoredInvoice{Invoice: inv, Document: []byte(`{"id":"acme/2026-11/1"}`)}}})
	token := r.addKey(t, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}})
	rec := r.do(http.MethodGet, "/v1/invoices/GC-000001?format=pdf", token, "", "")
	if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), "unrenderable") || !strings.Contains(rec.Body.String(), "reports.pdf_font") {
		t.Fatalf("PDF of a name the font lacks: %d %s", rec.Code, rec.Body.String())
	}
	if rec := r.do(http.MethodGet, "/v1/invoices/GC-000001?format=csv", token, "", ""); rec.Code != http.StatusOK {
		t.Errorf("CSV of the same invoice: %d %s", rec.Code, rec.Body.String())
	}
}

// oneChargeback serves one report.
type oneChargeback struct{ r chargeback.Report }

func (o oneChargeback) Chargeback(context.Context, billing.ScopedChargebackRequest) (chargeback.Report, error) {
	return o.r, nil
}

// The chargeback is rendered whole before a byte is sent: a department
// name the PDF font cannot show is a 422 (before, a 200 with an empty
// body and the error only in the log).
func TestChargebackPDFTheFontCannotShowIsA422(t *testing.T) {
	rep := chargeback.Report{Currency: pricing.Currency{Code: "USD", MinorUnits: 2}, Mode: chargeback.IdleOwnRow,
		Period:      chargeback.Period{Label: "2026-11", Start: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), End: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		Departments: []chargeback.Department{{Name: "研究部", Tenants: []chargeback.Tenant{{Name: "acme"}}}}}
	r := newAPIRig(t, DefaultConfig(), API{Quotas: allowAll{}, Chargeback: oneChargeback{rep}})
	token := r.addKey(t, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindAdmin}})
	rec := r.do(http.MethodGet, "/v1/chargeback?month=2026-11&format=pdf", token, "", "")
	if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), "研究部") {
		t.Fatalf("PDF of a department the font lacks: %d %q", rec.Code, rec.Body.String())
	}
	if rec := r.do(http.MethodGet, "/v1/chargeback?month=2026-11&format=json", token, "", ""); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "研究部") {
		t.Errorf("JSON of the same report: %d %.200s", rec.Code, rec.Body.String())
	}
}
