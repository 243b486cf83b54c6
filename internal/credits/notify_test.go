package credits

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// summary is a notice in a line: kind, what it is about and its figures.
func summary(n Notice) string {
	switch n.Kind {
	case NoticeThreshold:
		return fmt.Sprintf("threshold %d %s %s/%s", n.Threshold, n.Grant.ID, n.Remaining, n.Granted)
	case NoticeExpiring:
		return fmt.Sprintf("expiring %s %s of %s", n.Grant.ID, n.Expiring, n.Remaining)
	default:
		return fmt.Sprintf("depleted %s %s %s", n.Pool, n.Grant.ID, n.Action)
	}
}

func TestDue(t *testing.T) {
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 11, 20, 10, 30, 0, 0, time.UTC)
	d := decimal.RequireFromString
	cap20 := d("20")
	money := func(id string, kind Kind) Grant {
		return Grant{ID: id, Tenant: "acme", Kind: kind, Amount: d("100"), Currency: "USD", EffectiveAt: nov, CreatedAt: nov}
	}
	prepaid, promo := money("cg_pre", Prepaid), money("cg_promo", Promotional)
	hours := Grant{ID: "cg_hours", Tenant: "acme", Kind: Included, Amount: d("100"), Meter: pricing.GPUHours, SKUClass: "H100-SXM5-80GB",
		EffectiveAt: nov, CreatedAt: nov}
	with := func(g Grant, f func(*Grant)) Grant { f(&g); return g }
	expiresIn := func(g Grant, d time.Duration) Grant { return with(g, func(g *Grant) { g.ExpiresAt = now.Add(d) }) }
	bal := func(g Grant, remaining string) Balance {
		r := d(remaining)
		return Balance{Grant: g, Granted: g.Amount, Used: g.Amount.Sub(r), Remaining: r}
	}
	creditOnly := Customer{Tenant: "acme", Currency: "USD", Plan: Plan{Settlement: CreditOnly}}
	invoiced := Customer{Tenant: "acme", Currency: "USD"}
	stop := DefaultSettings()
	stop.AtZero = StopWebhook
	for _, tc := range []struct {
		name     string
		customer Customer
		settings Settings
		balances []Balance
		want     []string
	}{
		{"51 % left: no threshold yet", invoiced, DefaultSettings(), []Balance{bal(prepaid, "51")}, nil},
		{"exactly 50 % left: the 50 % threshold (to or below)", invoiced, DefaultSettings(), []Balance{bal(prepaid, "50")},
			[]string{"threshold 50 cg_pre 50/100"}},
		{"15 % left: 50 and 20 % in one run", invoiced, DefaultSettings(), []Balance{bal(prepaid, "15")},
			[]string{"threshold 50 cg_pre 15/100", "threshold 20 cg_pre 15/100"}},
		{"a fraction below 10 %", invoiced, DefaultSettings(), []Balance{bal(prepaid, "9.999999999")},
			[]string{"threshold 50 cg_pre 9.999999999/100", "threshold 20 cg_pre 9.999999999/100", "threshold 10 cg_pre 9.999999999/100"}},
		{"thresholds of the config, given twice and unordered, each once", invoiced,
			Settings{Thresholds: []int{25, 75, 25}, AtZero: NotifyOnly}, []Balance{bal(prepaid, "25")},
			[]string{"threshold 75 cg_pre 25/100", "threshold 25 cg_pre 25/100"}},
		{"rollover raises what was granted: 30 of 120 is 25 %", invoiced, DefaultSettings(),
			[]Balance{{Grant: prepaid, Granted: d("120"), Used: d("90"), Remaining: d("30")}}, []string{"threshold 50 cg_pre 30/120"}},
		{"at zero: every threshold, and the money is depleted (credit_then_invoice: notify)", invoiced, stop, []Balance{bal(prepaid, "0")},
			[]string{"threshold 50 cg_pre 0/100", "threshold 20 cg_pre 0/100", "threshold 10 cg_pre 0/100", "depleted money cg_pre notify"}},
		{"credit_only, at_zero webhook: the depletion asks to stop", creditOnly, stop, []Balance{bal(prepaid, "0")},
			[]string{"threshold 50 cg_pre 0/100", "threshold 20 cg_pre 0/100", "threshold 10 cg_pre 0/100", "depleted money cg_pre stop"}},
		{"credit_only, at_zero notify: notify only", creditOnly, DefaultSettings(), []Balance{bal(prepaid, "0")},
			[]string{"threshold 50 cg_pre 0/100", "threshold 20 cg_pre 0/100", "threshold 10 cg_pre 0/100", "depleted money cg_pre notify"}},
		{"one money grant empty, another with some left: not depleted", creditOnly, stop,
			[]Balance{bal(prepaid, "0"), bal(promo, "80")},
			[]string{"threshold 50 cg_pre 0/100", "threshold 20 cg_pre 0/100", "threshold 10 cg_pre 0/100"}},
		{"included hours gone, money left: their pool is depleted, and usage falls to money (notify)", creditOnly, stop,
			[]Balance{bal(hours, "0"), bal(promo, "80")},
			[]string{"threshold 50 cg_hours 0/100", "threshold 20 cg_hours 0/100", "threshold 10 cg_hours 0/100", "depleted included:gpu_hours:H100-SXM5-80GB cg_hours notify"}},
		{"included hours gone and no money at all: stop", creditOnly, stop, []Balance{bal(hours, "0")},
			[]string{"threshold 50 cg_hours 0/100", "threshold 20 cg_hours 0/100", "threshold 10 cg_hours 0/100", "depleted included:gpu_hours:H100-SXM5-80GB cg_hours stop"}},
		{"the last money grant expired: no threshold (expiry is not usage), but the money is gone", creditOnly, stop,
			[]Balance{{Grant: expiresIn(promo, -time.Hour), Granted: d("100"), Used: d("10"), Expired: d("90"), Remaining: decimal.Zero}},
			[]string{"depleted money cg_promo stop"}},
		{"a voided grant says nothing of thresholds", invoiced, DefaultSettings(),
			[]Balance{{Grant: with(prepaid, func(g *Grant) { v := now.Add(-time.Hour); g.VoidedAt, g.VoidReason = &v, "x" }),
				Granted: d("100"), Used: d("10"), Voided: d("90"), Remaining: decimal.Zero}, bal(promo, "70")}, nil},
		{"a grant not yet effective: nothing, and it is no pool yet", creditOnly, stop,
			[]Balance{bal(with(prepaid, func(g *Grant) { g.EffectiveAt = now.Add(time.Hour) }), "100")}, nil},
		{"a grant not yet effective does not refill an empty pool", creditOnly, stop,
			[]Balance{bal(promo, "0"), bal(with(prepaid, func(g *Grant) { g.EffectiveAt, g.CreatedAt = now.Add(time.Hour), now }), "100")},
			[]string{"threshold 50 cg_promo 0/100", "threshold 20 cg_promo 0/100", "threshold 10 cg_promo 0/100", "depleted money cg_promo stop"}},
		{"expiring within the 7 days, with some left", invoiced, DefaultSettings(), []Balance{bal(expiresIn(promo, 7*24*time.Hour), "60")},
			[]string{"expiring cg_promo 60 of 60"}},
		{"expiring in 7 days and a minute: not yet", invoiced, DefaultSettings(), []Balance{bal(expiresIn(promo, 7*24*time.Hour+time.Minute), "60")}, nil},
		{"expiring_days 0: no expiry notices", invoiced, Settings{AtZero: NotifyOnly}, []Balance{bal(expiresIn(promo, time.Hour), "60")}, nil},
		{"expiring with nothing left: no expiry notice", invoiced, Settings{AtZero: NotifyOnly, ExpiringDays: 7},
			[]Balance{bal(expiresIn(promo, time.Hour), "0")}, []string{"depleted money cg_promo notify"}},
		{"a recurring grant loses what its rollover cap does not carry", invoiced, DefaultSettings(),
			[]Balance{bal(with(expiresIn(hours, 24*time.Hour), func(g *Grant) { g.Series, g.RolloverCap = "plan", &cap20 }), "60")},
			[]string{"expiring cg_hours 40 of 60"}},
		{"a recurring grant with less left than its cap: no expiry notice", invoiced, DefaultSettings(),
			[]Balance{bal(with(expiresIn(hours, 24*time.Hour), func(g *Grant) { g.Series, g.RolloverCap = "plan", &cap20 }), "15")},
			[]string{"threshold 50 cg_hours 15/100", "threshold 20 cg_hours 15/100"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Result{AsOf: now.Truncate(time.Hour), Balances: tc.balances, Uncovered: decimal.Zero}
			var got []string
			for _, n := range Due(tc.customer, r, tc.settings, now) {
				got = append(got, summary(n))
				if n.Tenant != "acme" || !n.AsOf.Equal(r.AsOf) || n.Key == "" || n.Settlement != tc.customer.settlement() {
					t.Errorf("notice %+v", n)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("due:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// A notice's key is what it is once for: the same grant and threshold
// found by a later run is the same key; another threshold, grant or
// tenant is another. A depletion's key changes when a new grant refilled
// the pool, and only then.
func TestDueKeys(t *testing.T) {
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	d := decimal.RequireFromString
	c := Customer{Tenant: "acme", Currency: "USD"}
	a := Grant{ID: "cg_a", Tenant: "acme", Kind: Prepaid, Amount: d("100"), Currency: "USD", EffectiveAt: nov, CreatedAt: nov}
	b := a
	b.ID, b.CreatedAt, b.EffectiveAt = "cg_b", nov.AddDate(0, 0, 10), nov.AddDate(0, 0, 10)
	keys := func(now time.Time, bs ...Balance) map[string]string {
		out := map[string]string{}
		for _, n := range Due(c, Result{AsOf: now.Truncate(time.Hour), Balances: bs}, DefaultSettings(), now) {
			out[summary(n)] = n.Key
		}
		return out
	}
	empty := func(g Grant) Balance {
		return Balance{Grant: g, Granted: g.Amount, Used: g.Amount, Remaining: decimal.Zero}
	}

	first := keys(nov.AddDate(0, 0, 5), empty(a))
	later := keys(nov.AddDate(0, 0, 8), empty(a))
	if len(first) != 4 || !maps.Equal(first, later) {
		t.Fatalf("the same state found twice: %v then %v", first, later)
	}
	distinct := map[string]bool{}
	for _, k := range first {
		distinct[k] = true
	}
	if len(distinct) != 4 {
		t.Errorf("keys not distinct: %v", first)
	}
	// b refills the money on the 10th and is used up: a second depletion.
	refilled := keys(nov.AddDate(0, 0, 12), empty(a), empty(b))
	if refilled["depleted money cg_b notify"] == "" || refilled["depleted money cg_b notify"] == first["depleted money cg_a notify"] {
		t.Errorf("depletion after a refill: %v, before %v", refilled, first)
	}
	if refilled["threshold 50 cg_a 0/100"] != first["threshold 50 cg_a 0/100"] {
		t.Error("a's threshold key changed when b came")
	}
	other := Due(Customer{Tenant: "globex", Currency: "USD"}, Result{Balances: []Balance{empty(a)}}, DefaultSettings(), nov.AddDate(0, 0, 5))
	for _, n := range other {
		for _, k := range first {
			if n.Key == k {
				t.Errorf("another tenant's notice has acme's key %q", k)
			}
		}
	}
}
