package quota_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// A credit_only customer's holds survive a failover, on a real
// ClickHouse: astro has 9 USD of prepaid credit and H100s cost 3.00 USD
// an hour. The leader admits 2 GPUs for the one-hour horizon (6 USD held)
// and writes its log; a new leader, a fresh quota service over the same
// store, rebuilds from it and refuses 2 more GPUs (6 USD on the 3 left),
// then admits 1. Without the rebuild it would admit the 2: 12 USD held on
// 9, the balance below zero. A retention run between the terms (pruning
// the admission log) changes none of it.
func TestCreditHoldsSurviveFailoverOnClickHouse(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	book := filepath.Join(t.TempDir(), "book.yaml")
	if err := os.WriteFile(book, []byte(`version: credit-failover-1
currency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}
skus:
  H100-SXM5-80GB: {meters: {gpu_hours: {unit_price: "3.00"}}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cs := billing.Customers{Customers: []billing.Customer{{Tenant: "astro", Name: "Astro", Currency: "USD", TimeZone: "UTC", Book: book,
		Credits: credits.Plan{Settlement: credits.CreditOnly}}}}
	ccs, err := cs.CreditCustomers()
	if err != nil {
		t.Fatal(err)
	}
	use := usage.New(s, cs, time.Now)
	balances := credits.NewService(s, use, ccs, time.Now)
	if _, err := balances.Grant(ctx, credits.Grant{Tenant: "astro", Kind: credits.Prepaid, Amount: decimal.RequireFromString("9"),
		EffectiveAt: time.Now().Add(-time.Minute), Source: "failover test"}); err != nil {
		t.Fatal(err)
	}
	replica := func(s *store.Store) *quota.Service {
		t.Helper()
		q, err := quota.NewService(use, s, cs, quota.DefaultConfig(), time.Now, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		settings := credits.DefaultSettings()
		settings.Horizon = time.Hour
		if err := q.GateCredits(balances, settings); err != nil {
			t.Fatal(err)
		}
		q.LogAdmissions(s)
		if err := q.Refresh(ctx, nil); err != nil {
			t.Fatal(err)
		}
		return q
	}
	admin := auth.Scope{Kind: auth.KindAdmin}
	h100s := func(n int) []quota.Request {
		return []quota.Request{{Tenant: "astro", GPUModel: "H100-SXM5-80GB", Count: n, Duration: time.Hour}}
	}

	leader := replica(s)
	if d, err := leader.AdmitAll(ctx, admin, h100s(2)); err != nil || !d.Allowed {
		t.Fatalf("leader, 2 GPUs on 9 USD: %+v %v", d, err)
	}
	leader.FlushLog(ctx) // as Campaign does when the term ends

	// Retention runs between the terms and deletes a part and a hold that
	// ended past the admission log's retention: never the leader's.
	ended := time.Now().Add(-rollup.AdmissionLogRetention - time.Hour)
	if err := s.SaveAdmissions(ctx, []quota.Admitted{{ID: "adm-old", Tenant: "astro", GPUModel: "H100-SXM5-80GB",
		Demand: quota.Demand{GPUs: decimal.NewFromInt(1)}, Expires: ended}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveCreditHolds(ctx, []quota.CreditHold{{Tenant: "astro", Hold: credits.Hold{ID: "adm-old", Money: decimal.NewFromInt(3), Until: ended}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rollup.NewRetention(s, rollup.DefaultRetentionConfig(), time.Now, slog.New(slog.DiscardHandler)).Run(ctx); err != nil {
		t.Fatal(err)
	}

	successor := replica(s)
	if err := successor.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := successor.AdmitAll(ctx, admin, h100s(2))
	if err != nil || d.Allowed || !d.CreditRefused ||
		!strings.Contains(d.Reason, "balance 9.00 USD, held 6.00 USD by 1 admitted, needed 6.00 USD") {
		t.Fatalf("new leader, 2 GPUs on 9 USD less the 6 held: %+v %v", d, err)
	}
	if d, err := successor.AdmitAll(ctx, admin, h100s(1)); err != nil || !d.Allowed {
		t.Fatalf("new leader, 1 GPU on the 3 USD left: %+v %v", d, err)
	}
	if held, _, _ := successor.CreditHeld("astro"); held.Count != 2 || !held.Money.Equal(decimal.NewFromInt(9)) {
		t.Fatalf("new leader holds %+v, want 9 USD by 2", held)
	}
}
