package credits

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/pricing"
)

var nov = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }
func day(n int) time.Time        { return nov.AddDate(0, 0, n-1) }
func ptr[T any](v T) *T          { return &v }

func money(id string, amount string, prio int, created int) Grant {
	return Grant{ID: id, Tenant: "acme", Kind: Prepaid, Amount: d(amount), Currency: "USD", Priority: prio,
		EffectiveAt: nov, CreatedAt: day(created).Add(-24 * time.Hour * 40)}
}

func gpu(at time.Time, sku, hours, amount string) Charge {
	return Charge{At: at, SKU: sku, Meter: pricing.GPUHours, Quantity: d(hours), Amount: d(amount)}
}

// used is each grant's Used, by id.
func used(r Result) map[string]string {
	out := map[string]string{}
	for _, b := range r.Balances {
		out[b.Grant.ID] = b.Used.String()
	}
	return out
}

func TestBurn(t *testing.T) {
	h100, mig := "H100-SXM5-80GB", "H100-SXM5-80GB/3g.40gb"
	for _, tc := range []struct {
		name      string
		grants    []Grant
		charges   []Charge
		asOf      time.Time
		used      map[string]string
		uncovered string
		check     func(t *testing.T, r Result)
	}{
		{
			name:   "the lower priority number is used first",
			grants: []Grant{money("b", "100", 2, 1), money("a", "50", 1, 2)},
			charges: []Charge{gpu(day(1), h100, "10", "30"), gpu(day(2), h100, "10", "30"),
				gpu(day(3), h100, "10", "30")},
			asOf: day(10), used: map[string]string{"a": "50", "b": "40"}, uncovered: "0",
		},
		{
			name: "equal priority: the earliest expiry first, one that never expires last, then the oldest",
			grants: func() []Grant {
				never, late, early, older := money("never", "10", 1, 1), money("late", "10", 1, 1), money("early", "10", 1, 1), money("older", "10", 1, 0)
				late.ExpiresAt, early.ExpiresAt, older.ExpiresAt = day(20), day(15), day(20)
				return []Grant{never, late, early, older}
			}(),
			charges: []Charge{gpu(day(1), h100, "1", "25")},
			asOf:    day(2), used: map[string]string{"early": "10", "older": "10", "late": "5", "never": "0"}, uncovered: "0",
		},
		{
			name: "included GPU-hours first, counting a MIG SKU of the class by its GPU-equivalent hours; other models and meters pay money",
			grants: []Grant{money("cash", "1000", 0, 1),
				{ID: "h100-hours", Tenant: "acme", Kind: Included, Amount: d("10"), Meter: pricing.GPUHours, SKUClass: h100, Priority: 5, EffectiveAt: nov}},
			charges: []Charge{
				gpu(day(1), mig, "3", "6"),                                                     // 7 × 3/7 GPU-hours of a 3g.40gb, weighted by the collector
				gpu(day(1), "A100-SXM4-80GB", "2", "4"),                                        // another model
				{At: day(1), SKU: h100, Meter: "energy_kwh", Quantity: d("5"), Amount: d("1")}, // another meter
				gpu(day(2), h100, "12", "24"),                                                  // 7 of its 12 GPU-hours included
			},
			asOf: day(3), used: map[string]string{"h100-hours": "10", "cash": "15"}, uncovered: "0",
			check: func(t *testing.T, r Result) {
				// The included part stands for its share: 7/12 of 24 is 14.
				for _, dr := range r.Draws {
					if dr.GrantID == "h100-hours" && dr.At.Equal(day(2)) && (!dr.Quantity.Equal(d("7")) || !dr.Amount.Equal(d("14"))) {
						t.Errorf("the included part of day 2: %s GPU-hours for %s, want 7 for 14", dr.Quantity, dr.Amount)
					}
				}
			},
		},
		{
			name: "expiry mid-month: usage after it pays money, the unused remainder expires and is counted",
			grants: func() []Grant {
				g := money("promo", "100", 0, 1)
				g.Kind, g.ExpiresAt = Promotional, day(15)
				return []Grant{g}
			}(),
			charges: []Charge{gpu(day(14).Add(23*time.Hour), h100, "1", "40"), gpu(day(15), h100, "1", "40")},
			asOf:    day(30), used: map[string]string{"promo": "40"}, uncovered: "40",
			check: func(t *testing.T, r Result) {
				if b := r.Balances[0]; !b.Expired.Equal(d("60")) || !b.Remaining.IsZero() {
					t.Errorf("expired %s, remaining %s; want 60 and 0", b.Expired, b.Remaining)
				}
			},
		},
		{
			name: "void after partial use: what it covered stays covered, the rest is voided, later usage pays",
			grants: func() []Grant {
				g := money("gift", "100", 0, 1)
				g.VoidedAt, g.VoidReason = ptr(day(10)), "granted to the wrong customer"
				return []Grant{g}
			}(),
			charges: []Charge{gpu(day(5), h100, "1", "30"), gpu(day(12), h100, "1", "30")},
			asOf:    day(20), used: map[string]string{"gift": "30"}, uncovered: "30",
			check: func(t *testing.T, r Result) {
				if b := r.Balances[0]; !b.Voided.Equal(d("70")) || !b.Remaining.IsZero() || !b.Expired.IsZero() {
					t.Errorf("voided %s, remaining %s, expired %s; want 70, 0, 0", b.Voided, b.Remaining, b.Expired)
				}
			},
		},
		{
			name: "a monthly allowance rolls over up to its cap into the next month's grant",
			grants: []Grant{
				{ID: "nov", Tenant: "acme", Kind: Included, Amount: d("100"), Meter: pricing.GPUHours, EffectiveAt: nov, ExpiresAt: nov.AddDate(0, 1, 0),
					Series: "plan", RolloverCap: ptr(d("30"))},
				{ID: "dec", Tenant: "acme", Kind: Included, Amount: d("100"), Meter: pricing.GPUHours, EffectiveAt: nov.AddDate(0, 1, 0),
					ExpiresAt: nov.AddDate(0, 2, 0), Series: "plan", RolloverCap: ptr(d("30"))},
			},
			charges: []Charge{gpu(day(3), h100, "50", "100"), gpu(nov.AddDate(0, 1, 2), h100, "120", "240")},
			asOf:    nov.AddDate(0, 1, 20), used: map[string]string{"nov": "50", "dec": "120"}, uncovered: "0",
			check: func(t *testing.T, r Result) {
				n, dec := r.Balances[0], r.Balances[1]
				if !n.RolledOver.Equal(d("30")) || !n.Expired.Equal(d("20")) || !dec.Granted.Equal(d("130")) || !dec.Remaining.Equal(d("10")) {
					t.Errorf("November rolled %s and expired %s; December granted %s, left %s; want 30, 20, 130, 10",
						n.RolledOver, n.Expired, dec.Granted, dec.Remaining)
				}
			},
		},
		{
			name: "prepaid pays a charge with its tax, promotional before tax: 19 % on 100 is 119, so 59.5 prepaid covers 50 of it",
			grants: func() []Grant {
				promo, cash := money("promo", "30", 0, 1), money("cash", "59.5", 1, 1)
				promo.Kind = Promotional
				return []Grant{promo, cash}
			}(),
			charges: func() []Charge {
				c := gpu(day(1), h100, "10", "100")
				c.TaxRate = d("19")
				return []Charge{c}
			}(),
			asOf: day(2), used: map[string]string{"promo": "30", "cash": "59.5"}, uncovered: "20",
		},
		{
			name:   "prepaid with tax, a partial payment's net part divides back exactly at 18 places",
			grants: []Grant{money("cash", "10", 0, 1)},
			charges: func() []Charge {
				c := gpu(day(1), h100, "3", "9")
				c.TaxRate = d("20")
				return []Charge{c}
			}(),
			asOf: day(2), used: map[string]string{"cash": "10"}, uncovered: "0.666666666666666667",
		},
		{
			name:    "credit larger than the usage: the rest remains",
			grants:  []Grant{money("big", "1000", 0, 1)},
			charges: []Charge{gpu(day(1), h100, "2", "4.123456789")},
			asOf:    day(2), used: map[string]string{"big": "4.123456789"}, uncovered: "0",
			check: func(t *testing.T, r Result) {
				if !r.Balances[0].Remaining.Equal(d("995.876543211")) {
					t.Errorf("remaining %s", r.Balances[0].Remaining)
				}
			},
		},
		{
			name: "before its effective time a grant covers nothing, and usage from asOf on has not happened",
			grants: func() []Grant {
				g := money("later", "100", 0, 1)
				g.EffectiveAt = day(10)
				return []Grant{g}
			}(),
			charges: []Charge{gpu(day(5), h100, "1", "10"), gpu(day(12), h100, "1", "10"), gpu(day(20), h100, "1", "10")},
			asOf:    day(20), used: map[string]string{"later": "10"}, uncovered: "10",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Burn(tc.grants, tc.charges, tc.asOf)
			if err != nil {
				t.Fatal(err)
			}
			for id, want := range tc.used {
				if got := used(r)[id]; !d(got).Equal(d(want)) {
					t.Errorf("grant %s used %s, want %s", id, got, want)
				}
			}
			if !r.Uncovered.Equal(d(tc.uncovered)) {
				t.Errorf("uncovered %s, want %s", r.Uncovered, tc.uncovered)
			}
			checkInvariants(t, r, tc.charges, tc.asOf)
			if tc.check != nil {
				tc.check(t, r)
			}
			// The same grants and charges in another order burn the same.
			shuffled := append([]Charge(nil), tc.charges...)
			rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			again, err := Burn(tc.grants, shuffled, tc.asOf)
			if err != nil || fmtBalances(again) != fmtBalances(r) {
				t.Errorf("shuffled charges burn differently:\n%s\nwant\n%s", fmtBalances(again), fmtBalances(r))
			}
		})
	}
}

// checkInvariants: every grant's account adds up, and the draws and the
// uncovered money add up to the charges up to asOf.
func checkInvariants(t *testing.T, r Result, charges []Charge, asOf time.Time) {
	t.Helper()
	for _, b := range r.Balances {
		sum := b.Used.Add(b.Expired).Add(b.Voided).Add(b.RolledOver).Add(b.Remaining)
		if !sum.Equal(b.Granted) || b.Remaining.Sign() < 0 {
			t.Errorf("grant %s: used %s + expired %s + voided %s + rolled %s + remaining %s != granted %s",
				b.Grant.ID, b.Used, b.Expired, b.Voided, b.RolledOver, b.Remaining, b.Granted)
		}
	}
	total, drawn := decimal.Zero, decimal.Zero
	for _, c := range charges {
		if c.At.Before(asOf) {
			total = total.Add(c.Amount)
		}
	}
	for _, dr := range r.Draws {
		drawn = drawn.Add(dr.Amount.Sub(dr.Tax))
	}
	if !drawn.Add(r.Uncovered).Equal(total) {
		t.Errorf("draws %s (net of tax) + uncovered %s != charges %s", drawn, r.Uncovered, total)
	}
}

func fmtBalances(r Result) string {
	var b strings.Builder
	for _, x := range r.Balances {
		b.WriteString(x.Grant.ID + " " + x.Used.String() + " " + x.Remaining.String() + " " + x.Expired.String() + "\n")
	}
	return b.String() + r.Uncovered.String()
}

func TestBurnRefusesBadInput(t *testing.T) {
	g := money("a", "10", 0, 1)
	if _, err := Burn([]Grant{g, g}, nil, day(2)); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a grant given twice: %v", err)
	}
	if _, err := Burn([]Grant{g}, []Charge{gpu(day(1), "H100-SXM5-80GB", "-1", "-2")}, day(2)); err == nil {
		t.Error("a negative charge was burned")
	}
}

func TestGrantValidate(t *testing.T) {
	customers := []Customer{{Tenant: "acme", Currency: "USD"}}
	ok := money("ok", "10", 0, 1)
	if err := ok.Validate(customers); err != nil {
		t.Fatalf("a good grant: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(g *Grant)
		want string
	}{
		{"zero amount", func(g *Grant) { g.Amount = decimal.Zero }, "amount 0: must be above zero"},
		{"negative amount", func(g *Grant) { g.Amount = d("-5") }, "must be above zero"},
		{"expiry before effective", func(g *Grant) { g.ExpiresAt = nov.Add(-time.Hour) }, "expires_at 2026-10-31T23:00:00Z: not after effective_at"},
		{"another currency", func(g *Grant) { g.Currency = "EUR" }, `currency "EUR": the customer is billed in USD`},
		{"unknown customer", func(g *Grant) { g.Tenant = "nobody" }, `tenant "nobody": not a billing customer`},
		{"unknown kind", func(g *Grant) { g.Kind = "gift" }, `kind "gift"`},
		{"unknown SKU class", func(g *Grant) { g.Kind, g.Currency, g.Meter, g.SKUClass = Included, "", pricing.GPUHours, "B9000" }, `sku_class "B9000"`},
		{"included without a meter", func(g *Grant) { g.Kind, g.Currency = Included, "" }, `meter "": not a priced meter`},
		{"included in a currency", func(g *Grant) { g.Kind, g.Meter = Included, pricing.GPUHours }, "currency: not for an included grant"},
		{"rollover without a series", func(g *Grant) { g.RolloverCap = ptr(d("5")) }, "rollover_cap: only for a recurring grant"},
		{"void without a reason", func(g *Grant) { g.VoidedAt = ptr(day(3)) }, "void_reason: required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := ok
			tc.edit(&g)
			err := g.Validate(customers)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !fault.IsValidation(err) {
				t.Errorf("error %v, want a validation error naming %q", err, tc.want)
			}
		})
	}
}
