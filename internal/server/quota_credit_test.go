package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/admission"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// creditServer is the fixture's API with globex a credit_only customer
// holding a prepaid grant of amount USD, the quota service's credit gate
// on with a one-hour horizon, refreshed once; acme stays
// credit_then_invoice; rules are the quotas. The Kubernetes webhook maps
// team-globex and team-acme.
func creditServer(t *testing.T, f *fixture, amount string, rules ...quota.Rule) (*httptest.Server, *quota.Service) {
	t.Helper()
	ctx := context.Background()
	cs := f.customers
	cs.Customers = slices.Clone(cs.Customers)
	for i := range cs.Customers {
		if cs.Customers[i].Tenant == "globex" {
			cs.Customers[i].Credits = credits.Plan{Settlement: credits.CreditOnly}
		}
	}
	ccs, err := cs.CreditCustomers()
	if err != nil {
		t.Fatal(err)
	}
	svc := usage.New(f.store, cs, time.Now)
	balances := credits.NewService(f.store, svc, ccs, time.Now)
	if _, err := balances.Grant(ctx, credits.Grant{Tenant: "globex", Kind: credits.Prepaid, Amount: decimal.RequireFromString(amount),
		EffectiveAt: time.Now().Add(-time.Minute), Source: "credit admission test"}); err != nil {
		t.Fatal(err)
	}
	cfg := quota.DefaultConfig()
	cfg.Rules = rules
	q, err := quota.NewService(svc, f.store, cs, cfg, time.Now, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	settings := credits.DefaultSettings()
	settings.Horizon = time.Hour
	if err := q.GateCredits(balances, settings); err != nil {
		t.Fatal(err)
	}
	if err := q.Refresh(ctx, nil); err != nil {
		t.Fatal(err)
	}
	api := storeAPI(f.store, cs, f.chargeback, svc)
	api.Quotas = q
	api.Kubernetes = admission.NewWebhook(q, admission.Config{Namespaces: map[string]string{"team-globex": "globex", "team-acme": "acme"},
		DefaultModel: "H100-SXM5-80GB", DefaultDuration: time.Hour})
	ts, _, _ := f.mount(t, api, q)
	return ts, q
}

// TestAPICreditOnlyAdmission: globex is credit_only with 21 USD of
// prepaid credit and H100s at 3.00 USD an hour, so a one-hour horizon
// pays for 7 GPUs. Through the Kubernetes webhook a Pod of 8 GPUs is
// refused with the figures; a dry run of 7 is admitted and holds
// nothing; 20 concurrent admissions of one GPU each admit exactly 7, the
// others refused saying why, and the holds stay within the balance.
// acme, credit_then_invoice without any grant, is admitted as before.
func TestAPICreditOnlyAdmission(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	ts, q := creditServer(t, f, "21")
	url := ts.URL + "/v1/admission"

	pod := func(ns, gpus string) string {
		return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","kind":{"group":"","version":"v1","kind":"Pod"},` +
			`"namespace":"` + ns + `","operation":"CREATE","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"` + ns + `"},` +
			`"spec":{"containers":[{"name":"c","image":"x","resources":{"limits":{"nvidia.com/gpu":"` + gpus + `"}}}]}}}}`
	}
	code, d := post(t, ts.URL+"/v1/admission/k8s", f.tokens["admin"], pod("team-globex", "8"))
	resp, _ := d["response"].(map[string]any)
	status, _ := resp["status"].(map[string]any)
	msg := fmt.Sprint(status["message"])
	if code != 200 || resp["allowed"] != false || fmt.Sprint(status["code"]) != "403" ||
		!strings.Contains(msg, "nvidia.com/gpu x 8 is refused for tenant globex, whose credit cannot pay for it: credit_only: balance 21.00 USD, held 0.00 USD by 0 admitted, needed 24.00 USD for 8 GPU-equivalents of H100-SXM5-80GB over the 1h horizon") {
		t.Fatalf("8 GPUs through the webhook: %d %v", code, d)
	}
	code, d = post(t, ts.URL+"/v1/admission/k8s", f.tokens["admin"], pod("team-acme", "8"))
	if resp, _ := d["response"].(map[string]any); code != 200 || resp["allowed"] != true {
		t.Fatalf("acme, credit_then_invoice, through the webhook: %d %v", code, d)
	}

	code, d = post(t, url, f.tokens["globex"], `{"gpu_model":"H100-SXM5-80GB","count":8,"expected_duration":"30m"}`)
	if code != 200 || d["allowed"] != false || d["admission_id"] != "" || d["gpu_equivalents"] != "8" || d["gpu_hours"] != "4" || d["spend"] != "12" ||
		!strings.Contains(fmt.Sprint(d["reason"]), "needed 24.00 USD for 8 GPU-equivalents of H100-SXM5-80GB over the 1h horizon") {
		t.Fatalf("8 GPUs for 30m, the horizon an hour: %d %v", code, d)
	}
	code, d = post(t, url, f.tokens["globex"], `{"gpu_model":"H100-SXM5-80GB","count":7,"expected_duration":"1h","dry_run":true}`)
	if code != 200 || d["allowed"] != true || d["admission_id"] != "" || !strings.Contains(fmt.Sprint(d["reason"]), "needed 21.00 USD") {
		t.Fatalf("dry run of 7: %d %v", code, d)
	}
	if held, _, _ := q.CreditHeld("globex"); held.Count != 0 {
		t.Fatalf("a dry run and a refusal held %+v", held)
	}

	const n, k = 20, 7
	var wg sync.WaitGroup
	answers := make([]map[string]any, n)
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			codes[i], answers[i] = post(t, url, f.tokens["globex"], `{"gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"2h"}`)
		})
	}
	wg.Wait()
	admitted := 0
	ids := map[string]bool{}
	for i, a := range answers {
		if codes[i] != 200 {
			t.Fatalf("request %d: %d %v", i, codes[i], a)
		}
		reason := fmt.Sprint(a["reason"])
		if a["allowed"] == true {
			admitted++
			ids[fmt.Sprint(a["admission_id"])] = true
			if !strings.Contains(reason, "no quota applies; credit_only: balance 21.00 USD") || !strings.Contains(reason, "covers it") {
				t.Errorf("admitted %d: %s", i, reason)
			}
			continue
		}
		if a["admission_id"] != "" || !strings.Contains(reason, "credit_only: balance 21.00 USD, held 21.00 USD by 7 admitted, needed 3.00 USD for 1 GPU-equivalents of H100-SXM5-80GB over the 1h horizon: the balance cannot cover it") {
			t.Errorf("refused %d: %v", i, a)
		}
	}
	if admitted != k || len(ids) != k {
		t.Fatalf("admitted %d (%d ids) of %d; want exactly %d", admitted, len(ids), n, k)
	}
	held, cover, ok := q.CreditHeld("globex")
	if !ok || held.Count != k || !held.Money.Equal(decimal.NewFromInt(21)) || cover.Money.Sub(held.Money).IsNegative() {
		t.Fatalf("held %+v against %+v: below zero", held, cover)
	}
	// Refreshing reads the balance again and keeps the holds: the work's
	// horizon has not been measured yet.
	if err := q.Refresh(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if held, _, _ := q.CreditHeld("globex"); held.Count != k {
		t.Fatalf("after a refresh: held %+v", held)
	}
	code, d = post(t, url, f.tokens["globex"], `{"gpu_model":"H100-SXM5-80GB","profile":"1g.10gb","count":1,"expected_duration":"1h"}`)
	if code != 200 || d["allowed"] != false {
		t.Fatalf("a MIG slice once the balance is held: %d %v", code, d)
	}

	// credit_then_invoice: acme has no grant at all and is admitted as
	// before, with no word of credit.
	code, d = post(t, url, f.tokens["acme"], `{"gpu_model":"H100-SXM5-80GB","count":50,"expected_duration":"1h"}`)
	if code != 200 || d["allowed"] != true || d["reason"] != "no quota applies" {
		t.Fatalf("acme, credit_then_invoice: %d %v", code, d)
	}
	if _, _, gated := q.CreditHeld("acme"); gated {
		t.Fatal("acme is credit_then_invoice: no credit holds")
	}
}

// A credit_only customer is still under its quotas: work its credit pays
// for but a quota refuses holds no credit.
func TestAPICreditOnlyUnderQuota(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	ts, q := creditServer(t, f, "100", quota.Rule{Tenant: "globex", ConcurrentGPUs: lim("2")})
	code, d := post(t, ts.URL+"/v1/admission", f.tokens["globex"], `{"gpu_model":"H100-SXM5-80GB","count":3,"expected_duration":"1h"}`)
	if code != 200 || d["allowed"] != false || !strings.Contains(fmt.Sprint(d["reason"]), "tenant globex: concurrent_gpus") {
		t.Fatalf("over the quota: %d %v", code, d)
	}
	if held, _, _ := q.CreditHeld("globex"); held.Count != 0 {
		t.Fatalf("a quota refusal held credit: %+v", held)
	}
	code, d = post(t, ts.URL+"/v1/admission", f.tokens["globex"], `{"gpu_model":"H100-SXM5-80GB","count":2,"expected_duration":"1h"}`)
	if code != 200 || d["allowed"] != true {
		t.Fatalf("within both: %d %v", code, d)
	}
	if held, _, _ := q.CreditHeld("globex"); held.Count != 1 || !held.Money.Equal(decimal.NewFromInt(6)) {
		t.Fatalf("held %+v, want 6 USD by 1", held)
	}
}
