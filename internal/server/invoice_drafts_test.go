package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/server"
)

// A draft is the operator's to review: customers (a tenant key and its
// portal token) neither list it nor read it by id, in any format, while
// admin and department keys do. Void and finalized invoices stay visible.
func TestAPIDraftsAreOperatorsOnly(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	ctx := context.Background()
	runner := invoiceRunner(f.store, f.customers)
	// acme's October invoice is voided and its period drafted again.
	void, err := runner.Void(ctx, f.invs["acme"].Number, "wrong department")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := runner.Run(ctx, billing.RunRequest{Period: "2026-10", Tenant: "acme", Draft: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Outcomes) != 1 || rep.Outcomes[0].Action != billing.ActionCreated {
		t.Fatalf("want a new draft, got %v", rep.Outcomes)
	}
	draft := rep.Outcomes[0].Invoice
	if draft.Status != billing.StatusDraft || draft.ID != "acme/2026-10/2" {
		t.Fatalf("draft %s is %s", draft.ID, draft.Status)
	}

	// A portal token of a department is handed to people outside
	// operations too: a customer's view, no drafts.
	_, deptPortal := saveKey(t, f.store, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindDepartment, Name: "research"}, Portal: true, Expires: time.Hour}, time.Now())

	list := func(token, query string) map[string]string {
		t.Helper()
		code, body, _ := f.get(t, token, "/v1/invoices"+query)
		if code != http.StatusOK {
			t.Fatalf("list: %d %s", code, body)
		}
		var out struct {
			Invoices []struct{ ID, Status string }
		}
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		ids := map[string]string{}
		for _, inv := range out.Invoices {
			ids[inv.ID] = inv.Status
		}
		return ids
	}
	for _, who := range []struct {
		name, token, query string
		seesDraft          bool
	}{
		{"tenant key", f.tokens["acme"], "", false},
		{"tenant key asking for its period", f.tokens["acme"], "?period=2026-10&tenant=acme", false},
		{"portal token", f.tokens["portal"], "", false},
		{"portal token in the URL, as the portal lists", "", "?access_token=" + url.QueryEscape(f.tokens["portal"]), false},
		{"admin key", f.tokens["admin"], "", true},
		{"department key", f.tokens["research"], "", true},
		{"department portal token", deptPortal, "", false},
	} {
		t.Run(who.name, func(t *testing.T) {
			ids := list(who.token, who.query)
			if _, ok := ids[draft.ID]; ok != who.seesDraft {
				t.Errorf("lists the draft %v, want %v: %v", ok, who.seesDraft, ids)
			}
			if ids[void.ID] != string(billing.StatusVoid) {
				t.Errorf("does not list the void invoice %s: %v", void.ID, ids)
			}
			if who.token == "" {
				// The portal's download links: the token in the URL beside
				// the format (before, a 400: access_token over 16 bytes).
				token := url.QueryEscape(f.tokens["portal"])
				if code, body, _ := f.get(t, "", "/v1/invoices/"+void.Number+"?format=pdf&access_token="+token); code != http.StatusOK {
					t.Errorf("downloading the void invoice as the portal links it: %d %.100s", code, body)
				}
				if code, _, _ := f.get(t, "", "/v1/invoices/"+draft.ID+"?format=pdf&access_token="+token); code != http.StatusNotFound {
					t.Errorf("downloading the draft as the portal would: %d, want 404", code)
				}
				return
			}
			want := http.StatusNotFound
			if who.seesDraft {
				want = http.StatusOK
			}
			for _, format := range []string{"json", "csv", "pdf"} {
				path := "/v1/invoices/" + draft.ID + "?format=" + format
				if code, body, _ := f.get(t, who.token, path); code != want {
					t.Errorf("reading the draft as %s: %d, want %d: %.100s", format, code, want, body)
				}
			}
			if code, _, _ := f.get(t, who.token, "/v1/invoices/"+void.Number); code != http.StatusOK {
				t.Errorf("reading the void invoice %s: %d", void.Number, code)
			}
		})
	}
	// Once finalized, the customer sees it.
	if _, err := runner.Finalize(ctx, []string{draft.ID}, ""); err != nil {
		t.Fatal(err)
	}
	if ids := list(f.tokens["acme"], ""); ids[draft.ID] != string(billing.StatusFinalized) {
		t.Errorf("the finalized invoice is not listed for acme: %v", ids)
	}
	if code, body, _ := f.get(t, f.tokens["acme"], "/v1/invoices/"+draft.ID); code != http.StatusOK {
		t.Errorf("reading the finalized invoice: %d %s", code, body)
	}
}
