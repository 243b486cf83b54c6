package credits

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

const (
	h100 = "H100-SXM5-80GB"
	mig  = "H100-SXM5-80GB/3g.40gb"
	a100 = "A100-SXM4-80GB"
)

func rates() map[string]decimal.Decimal {
	return map[string]decimal.Decimal{h100: dec("3.00"), mig: dec("3.50"), a100: dec("2.00")}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cover   Cover
		held    Held
		needs   []Need
		horizon time.Duration
		allowed bool
		needed  string
		take    map[string]string // included hours held
		reason  []string
	}{
		{name: "exactly enough money is enough", cover: Cover{Currency: "USD", Money: dec("6"), Rates: rates()},
			needs: []Need{{h100, dec("2")}}, horizon: time.Hour, allowed: true, needed: "6",
			reason: []string{"balance 6.00 USD", "needed 6.00 USD", "1h horizon", "covers it"}},
		{name: "a cent short is refused", cover: Cover{Currency: "USD", Money: dec("5.99"), Rates: rates()},
			needs: []Need{{h100, dec("2")}}, horizon: time.Hour, allowed: false, needed: "6",
			reason: []string{"balance 5.99 USD, held 0.00 USD by 0 admitted, needed 6.00 USD", "cannot cover it"}},
		{name: "holds count against the balance", cover: Cover{Currency: "USD", Money: dec("10"), Rates: rates()},
			held: Held{Money: dec("7"), Count: 2}, needs: []Need{{h100, dec("1")}}, horizon: time.Hour, allowed: true, needed: "3"},
		{name: "holds past the balance refuse", cover: Cover{Currency: "USD", Money: dec("10"), Rates: rates()},
			held: Held{Money: dec("7.01"), Count: 3}, needs: []Need{{h100, dec("1")}}, horizon: time.Hour, allowed: false, needed: "3",
			reason: []string{"balance 10.00 USD, held 7.01 USD by 3 admitted, needed 3.00 USD"}},
		{name: "the horizon scales the need", cover: Cover{Currency: "USD", Money: dec("10"), Rates: rates()},
			needs: []Need{{h100, dec("1")}}, horizon: 4 * time.Hour, allowed: false, needed: "12", reason: []string{"4h horizon"}},
		{name: "a MIG slice at its weight and its own rate", cover: Cover{Currency: "USD", Money: dec("1.5"), Rates: rates()},
			needs: []Need{{mig, dec("3").Div(dec("7"))}}, horizon: time.Hour, allowed: true, needed: "1.5"},
		{name: "included hours of the class pay before money", cover: Cover{Currency: "USD", Money: dec("3"),
			Hours: map[string]decimal.Decimal{"H100-SXM5-80GB": dec("1")}, Rates: rates()},
			needs: []Need{{h100, dec("2")}}, horizon: time.Hour, allowed: true, needed: "3", take: map[string]string{"H100-SXM5-80GB": "1"},
			reason: []string{"(1 included GPU-hours)", "H100-SXM5-80GB 1 (held 0)"}},
		{name: "included hours of another class do not pay", cover: Cover{Currency: "USD", Money: dec("3"),
			Hours: map[string]decimal.Decimal{"A100-SXM4-80GB": dec("10")}, Rates: rates()},
			needs: []Need{{h100, dec("2")}}, horizon: time.Hour, allowed: false, needed: "6"},
		{name: "class hours then any-SKU hours then money", cover: Cover{Currency: "USD", Money: dec("0"),
			Hours: map[string]decimal.Decimal{"H100-SXM5-80GB": dec("0.5"), "": dec("1.5")}, Rates: rates()},
			needs: []Need{{mig, dec("3").Div(dec("7"))}, {h100, dec("1.5")}}, horizon: time.Hour, allowed: true, needed: "0",
			take: map[string]string{"H100-SXM5-80GB": "0.5", "": "1.4285714286"}},
		{name: "held hours are not used twice", cover: Cover{Currency: "USD", Money: dec("2"),
			Hours: map[string]decimal.Decimal{"H100-SXM5-80GB": dec("2")}, Rates: rates()},
			held:  Held{Money: decimal.Zero, Hours: map[string]decimal.Decimal{"H100-SXM5-80GB": dec("1.5")}, Count: 1},
			needs: []Need{{h100, dec("1")}}, horizon: time.Hour, allowed: true, needed: "1.5", take: map[string]string{"H100-SXM5-80GB": "0.5"}},
		{name: "a SKU the book does not price is refused", cover: Cover{Currency: "USD", Money: dec("1000"), Rates: rates()},
			needs: []Need{{"L40S", dec("1")}}, horizon: time.Hour, allowed: false, needed: "0", reason: []string{"prices no gpu_hours of L40S"}},
		{name: "a free SKU needs nothing", cover: Cover{Currency: "USD", Money: dec("0"), Rates: map[string]decimal.Decimal{h100: decimal.Zero}},
			needs: []Need{{h100, dec("8")}}, horizon: time.Hour, allowed: true, needed: "0"},
		{name: "a balance below its holds refuses even a cent", cover: Cover{Currency: "USD", Money: dec("1"), Rates: rates()},
			held: Held{Money: dec("4")}, needs: []Need{{mig, dec("0.01")}}, horizon: time.Minute, allowed: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chk := Decide(tc.cover, tc.held, tc.needs, tc.horizon)
			if chk.Allowed != tc.allowed {
				t.Fatalf("allowed %v, want %v: %s", chk.Allowed, tc.allowed, chk.Reason)
			}
			if tc.needed != "" && !chk.Needed.Equal(dec(tc.needed)) {
				t.Errorf("needed %s, want %s", chk.Needed, tc.needed)
			}
			if !chk.Take.Money.Equal(chk.Needed) {
				t.Errorf("take %s, needed %s", chk.Take.Money, chk.Needed)
			}
			for class, want := range tc.take {
				if got := chk.Take.Hours[class].Round(10); !got.Equal(dec(want)) {
					t.Errorf("hours of %q held %s, want %s", class, got, want)
				}
			}
			if tc.take == nil && len(chk.Take.Hours) > 0 {
				t.Errorf("hours held %v, want none", chk.Take.Hours)
			}
			for _, w := range tc.reason {
				if !strings.Contains(chk.Reason, w) {
					t.Errorf("reason %q lacks %q", chk.Reason, w)
				}
			}
		})
	}
}

func TestCoverOf(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 30, 0, 0, time.UTC)
	voided := now.Add(-time.Hour)
	grant := func(id string, k Kind, effective, expires time.Time) Grant {
		g := Grant{ID: id, Tenant: "acme", Kind: k, Amount: dec("1"), EffectiveAt: effective, ExpiresAt: expires}
		if k == Included {
			g.Meter, g.SKUClass = pricing.GPUHours, h100
		}
		return g
	}
	past, future := now.Add(-24*time.Hour), now.Add(24*time.Hour)
	voidedGrant := grant("v", Prepaid, past, time.Time{})
	voidedGrant.VoidedAt = &voided
	r := Result{AsOf: now.Truncate(time.Hour), Balances: []Balance{
		{Grant: grant("prepaid", Prepaid, past, time.Time{}), Remaining: dec("12")},
		{Grant: grant("promo", Promotional, past, future), Remaining: dec("5")},
		{Grant: grant("included", Included, past, future), Remaining: dec("7")},
		{Grant: grant("later", Prepaid, future, time.Time{}), Remaining: dec("100")},
		{Grant: grant("expired", Promotional, past.Add(-time.Hour), past), Remaining: dec("100")},
		{Grant: voidedGrant, Remaining: dec("100")},
	}}
	c := CoverOf(Customer{Tenant: "acme", Currency: "USD", TaxRate: dec("20")}, r, rates(), now)
	// Prepaid pays with tax: 12 at 20 % pays 10 of charges.
	if !c.Money.Equal(dec("15")) {
		t.Errorf("money %s, want 15 (12 prepaid at 20%% tax is 10, and 5 promotional)", c.Money)
	}
	if len(c.Hours) != 1 || !c.Hours[h100].Equal(dec("7")) {
		t.Errorf("hours %v, want 7 of %s", c.Hours, h100)
	}
	if !c.AsOf.Equal(r.AsOf) || !c.ReadAt.Equal(now) || c.Currency != "USD" {
		t.Errorf("cover %+v", c)
	}
}

// TestHoldsConcurrent: 20 admissions at once against a balance that pays
// for exactly 7 admit exactly 7, and the holds never pass the balance.
func TestHoldsConcurrent(t *testing.T) {
	h := NewHolds()
	now := time.Date(2026, 12, 6, 10, 30, 0, 0, time.UTC)
	h.SetCover("acme", Cover{AsOf: now.Truncate(time.Hour), ReadAt: now, Currency: "USD", Money: dec("21"), Rates: rates()})
	p := Policy{Horizon: time.Hour, StaleAfter: time.Minute}
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted, refused := 0, 0
	for i := range 20 {
		wg.Go(func() {
			chk, err := h.Admit("acme", []Need{{h100, dec("1")}}, p, now, func() (string, error) { return "adm-" + string(rune('a'+i)), nil })
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if chk.Allowed {
				admitted++
			} else {
				refused++
				if !strings.Contains(chk.Reason, "balance 21.00 USD, held 21.00 USD by 7 admitted, needed 3.00 USD") {
					t.Errorf("refusal: %s", chk.Reason)
				}
			}
		})
	}
	wg.Wait()
	if admitted != 7 || refused != 13 {
		t.Fatalf("admitted %d, refused %d; want 7 and 13", admitted, refused)
	}
	held, _, _ := h.Held("acme")
	if !held.Money.Equal(dec("21")) || held.Count != 7 {
		t.Fatalf("held %s by %d", held.Money, held.Count)
	}
}

func TestHoldsLifetime(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 30, 0, 0, time.UTC)
	p := Policy{Horizon: time.Hour, StaleAfter: 5 * time.Minute}
	need := []Need{{h100, dec("1")}}
	cover := Cover{AsOf: now.Truncate(time.Hour), ReadAt: now, Currency: "USD", Money: dec("6"), Rates: rates()}
	ok := func(id string) func() (string, error) { return func() (string, error) { return id, nil } }

	t.Run("no cover yet fails closed, or open by the policy", func(t *testing.T) {
		h := NewHolds()
		chk, _ := h.Admit("acme", need, p, now, ok("x"))
		if chk.Allowed || !chk.Stale || !strings.Contains(chk.Reason, "no credit balance read yet; failing closed") {
			t.Fatalf("%+v", chk)
		}
		open := p
		open.FailOpen = true
		chk, _ = h.Admit("acme", need, open, now, ok("x"))
		if !chk.Allowed || !strings.Contains(chk.Reason, "failing open") {
			t.Fatalf("%+v", chk)
		}
		if held, _, _ := h.Held("acme"); held.Count != 1 || !held.Money.IsZero() {
			t.Fatalf("failing open with no balance ever read holds the admission at no price: %+v", held)
		}
		h.SetCover("acme", cover)
		chk, _ = h.Admit("acme", need, open, now.Add(time.Hour), ok("y"))
		if held, _, _ := h.Held("acme"); !chk.Allowed || !chk.Stale || held.Count != 2 || !held.Money.Equal(dec("3")) {
			t.Fatalf("failing open on a stale cover holds what it prices the work at: %+v %+v", chk, held)
		}
	})
	t.Run("a stale cover fails closed", func(t *testing.T) {
		h := NewHolds()
		h.SetCover("acme", cover)
		chk, _ := h.Admit("acme", need, p, now.Add(6*time.Minute), ok("x"))
		if chk.Allowed || !strings.Contains(chk.Reason, "6m0s old (stale after 5m0s)") {
			t.Fatalf("%+v", chk)
		}
	})
	t.Run("a quota refusal, a dry run or an error holds nothing", func(t *testing.T) {
		h := NewHolds()
		h.SetCover("acme", cover)
		for _, admit := range []func() (string, error){ok(""), func() (string, error) { return "", errors.New("boom") }} {
			_, _ = h.Admit("acme", need, p, now, admit)
		}
		if held, _, _ := h.Held("acme"); held.Count != 0 || !held.Money.IsZero() {
			t.Fatalf("held %+v", held)
		}
	})
	t.Run("a hold lasts until the balance's usage runs past its horizon", func(t *testing.T) {
		h := NewHolds()
		h.SetCover("acme", cover)
		for _, id := range []string{"a", "b"} {
			if chk, _ := h.Admit("acme", need, p, now, ok(id)); !chk.Allowed {
				t.Fatal(chk.Reason)
			}
		}
		if chk, _ := h.Admit("acme", need, p, now, ok("c")); chk.Allowed {
			t.Fatal("a third admitted past the balance")
		}
		// Usage measured to 11:00 has not measured the horizon to 11:30.
		c := cover
		c.AsOf, c.ReadAt = now.Truncate(time.Hour).Add(time.Hour), now.Add(time.Hour)
		h.SetCover("acme", c)
		if held, _, _ := h.Held("acme"); held.Count != 2 {
			t.Fatalf("dropped before the horizon was measured: %+v", held)
		}
		// To 12:00 it has: the balance now shows the work's spend itself.
		c.AsOf, c.ReadAt, c.Money = c.AsOf.Add(time.Hour), now.Add(90*time.Minute), dec("0")
		h.SetCover("acme", c)
		if held, _, _ := h.Held("acme"); held.Count != 0 || !held.Money.IsZero() {
			t.Fatalf("held after the horizon was measured: %+v", held)
		}
	})
	t.Run("usage measured exactly to its end ends a hold", func(t *testing.T) {
		h := NewHolds()
		at := now.Truncate(time.Hour)
		c := cover
		c.ReadAt = at
		h.SetCover("acme", c)
		if chk, _ := h.Admit("acme", need, p, at, ok("a")); !chk.Allowed {
			t.Fatal(chk.Reason)
		}
		c.AsOf, c.ReadAt = at.Add(time.Hour), at.Add(61*time.Minute)
		h.SetCover("acme", c)
		if held, _, _ := h.Held("acme"); held.Count != 0 {
			t.Fatalf("held %+v with its hour measured", held)
		}
	})
}

// Restore (a new leader's rebuild) replaces every tenant's holds, keeps
// the covers, drops what a cover has measured already, and the restored
// holds refuse what would go below zero; Admit hands back the hold it
// took with its ID and end, which is what the log records.
func TestHoldsRestore(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 30, 0, 0, time.UTC)
	p := Policy{Horizon: time.Hour, StaleAfter: 5 * time.Minute}
	cover := Cover{AsOf: now.Truncate(time.Hour), ReadAt: now, Currency: "USD", Money: dec("6"),
		Hours: map[string]decimal.Decimal{h100: dec("1")}, Rates: rates()}

	old := NewHolds()
	old.SetCover("acme", cover)
	chk, err := old.Admit("acme", []Need{{h100, dec("2")}}, p, now, func() (string, error) { return "adm-1", nil })
	if err != nil || !chk.Allowed {
		t.Fatalf("%+v %v", chk, err)
	}
	taken := chk.Take
	if taken.ID != "adm-1" || !taken.Until.Equal(now.Add(time.Hour)) || !taken.Money.Equal(dec("3")) || !taken.Hours[h100].Equal(dec("1")) {
		t.Fatalf("the hold taken: %+v", taken)
	}

	successor := NewHolds()
	successor.SetCover("acme", cover)
	successor.SetCover("astro", cover)
	if chk, _ := successor.Admit("astro", []Need{{h100, dec("1")}}, p, now, func() (string, error) { return "adm-stale", nil }); !chk.Allowed {
		t.Fatal(chk.Reason)
	}
	measured := Hold{ID: "adm-0", Money: dec("100"), Until: cover.AsOf}
	successor.Restore(map[string][]Hold{"acme": {taken, measured}})
	held, _, _ := successor.Held("acme")
	if held.Count != 1 || !held.Money.Equal(dec("3")) || !held.Hours[h100].Equal(dec("1")) {
		t.Fatalf("acme restored: %+v, want adm-1 alone (adm-0 ended at the cover's AsOf)", held)
	}
	if held, _, _ := successor.Held("astro"); held.Count != 0 || !held.Money.IsZero() {
		t.Fatalf("astro, missing from the log, still holds %+v", held)
	}
	// 6 USD and 1 included hour, of which adm-1 holds 3 USD and the hour:
	// 2 more GPUs need 6 USD.
	chk, _ = successor.Admit("acme", []Need{{h100, dec("2")}}, p, now, func() (string, error) { return "adm-2", nil })
	if chk.Allowed || !strings.Contains(chk.Reason, "balance 6.00 USD, held 3.00 USD by 1 admitted, needed 6.00 USD") {
		t.Fatalf("after the rebuild: %+v", chk)
	}
	if chk, _ = successor.Admit("acme", []Need{{h100, dec("1")}}, p, now, func() (string, error) { return "adm-3", nil }); !chk.Allowed {
		t.Fatalf("1 GPU on the 3 USD left: %s", chk.Reason)
	}
	// Before any cover, nothing is dropped.
	fresh := NewHolds()
	fresh.Restore(map[string][]Hold{"acme": {taken, measured}})
	if held, _, _ := fresh.Held("acme"); held.Count != 2 || !held.Money.Equal(dec("103")) {
		t.Fatalf("restored with no cover: %+v", held)
	}
}
