package credits

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// Balances (money remainders in fixed point while charges are covered
// whole) gives Burn's balances, digit for digit and exponent for
// exponent (Burn records draws and keeps every remainder a decimal):
// random grants of every kind with priorities, expiries, voids and a
// rollover series, over charges of several tax rates, amounts that run
// grants out part way, and amounts too wide for the fixed point.
func TestBalancesEqualBurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 2))
	amounts := []string{"1.250000000000000000", "0.6", "9.223372036854775807", "9.223372036854775808", "0.428571428571428571", "3", "0.000000001", "123456789012345678.9", "17.5"}
	grantAmounts := []string{"100", "500", "2000", "25.55", "0.5", "1000000000000000000000", "7"}
	rates := []string{"0", "19", "7.5", "8", "20.00"}
	for round := range 200 {
		var grants []Grant
		for k := range 1 + rng.IntN(5) {
			g := Grant{ID: fmt.Sprintf("g%d", k), Tenant: "t", Amount: decimal.RequireFromString(grantAmounts[rng.IntN(len(grantAmounts))]),
				Priority: rng.IntN(3), EffectiveAt: nov.Add(time.Duration(rng.IntN(48)) * time.Hour), CreatedAt: nov}
			switch rng.IntN(4) {
			case 0:
				g.Kind, g.Meter = Included, pricing.GPUHours
			case 1:
				g.Kind, g.Currency = Promotional, "USD"
			default:
				g.Kind, g.Currency = Prepaid, "USD"
			}
			if rng.IntN(3) == 0 {
				g.ExpiresAt = g.EffectiveAt.Add(time.Duration(1+rng.IntN(100)) * time.Hour)
			}
			if rng.IntN(5) == 0 {
				v := g.EffectiveAt.Add(time.Duration(rng.IntN(100)) * time.Hour)
				g.VoidedAt = &v
			}
			grants = append(grants, g)
		}
		if rng.IntN(3) == 0 { // a series whose remainder rolls over, capped
			cap := decimal.RequireFromString("40")
			a := Grant{ID: "s1", Tenant: "t", Kind: Prepaid, Currency: "USD", Amount: decimal.RequireFromString("300"), Series: "m",
				EffectiveAt: nov, ExpiresAt: nov.Add(50 * time.Hour), RolloverCap: &cap, CreatedAt: nov}
			b := a
			b.ID, b.EffectiveAt, b.ExpiresAt = "s2", a.ExpiresAt, a.ExpiresAt.Add(50*time.Hour)
			grants = append(grants, a, b)
		}
		var charges []Charge
		rate := decimal.RequireFromString(rates[rng.IntN(len(rates))])
		for h := range 150 {
			at := nov.Add(time.Duration(h) * time.Hour)
			for range 1 + rng.IntN(2) {
				a := amounts[0]
				if rng.IntN(5) == 0 {
					a = amounts[rng.IntN(len(amounts))]
				}
				if rng.IntN(20) == 0 {
					rate = decimal.RequireFromString(rates[rng.IntN(len(rates))])
				}
				charges = append(charges, Charge{At: at, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: decimal.RequireFromString("0.5"),
					Amount: decimal.RequireFromString(a), TaxRate: rate})
			}
		}
		asOf := nov.Add(time.Duration(100+rng.IntN(60)) * time.Hour)
		got, err1 := Balances(grants, charges, asOf)
		want, err2 := Burn(grants, charges, asOf)
		if err1 != nil || err2 != nil {
			t.Fatalf("round %d: %v, %v", round, err1, err2)
		}
		if g, w := resultText(got), resultText(want); g != w {
			t.Fatalf("round %d:\n got %s\nwant %s", round, g, w)
		}
	}
}

// resultText is a burn-down's balances and uncovered money, every digit
// and exponent.
func resultText(r Result) string {
	dec := func(d decimal.Decimal) string { return fmt.Sprintf("%s(%d)", d, d.Exponent()) }
	out := "uncovered " + dec(r.Uncovered) + ";"
	for _, b := range r.Balances {
		out += fmt.Sprintf(" %s %s: granted %s used %s expired %s voided %s rolled %s remaining %s covered %s;", b.Grant.ID, b.Grant.Kind,
			dec(b.Granted), dec(b.Used), dec(b.Expired), dec(b.Voided), dec(b.RolledOver), dec(b.Remaining), dec(b.Covered))
	}
	return out
}
