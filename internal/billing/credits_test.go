package billing

import (
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/pricing"
)

// burnt is a burn-down result with one draw per grant covering amount.
func burnt(draws map[string]string, grants ...credits.Grant) credits.Result {
	r := credits.Result{Uncovered: decimal.Zero}
	for _, g := range grants {
		used := decimal.Zero
		if a, ok := draws[g.ID]; ok {
			used = dec(a)
			r.Draws = append(r.Draws, credits.Draw{GrantID: g.ID, At: time.Date(2026, 10, 5, 0, 0, 0, 0, time.UTC), Amount: used})
		}
		r.Balances = append(r.Balances, credits.Balance{Grant: g, Granted: g.Amount, Used: used, Remaining: g.Amount.Sub(used)})
	}
	return r
}

func TestBuildInvoiceAppliesCredits(t *testing.T) {
	oct := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	promo := credits.Grant{ID: "cg_promo", Kind: credits.Promotional, Amount: dec("50"), EffectiveAt: oct, Source: "welcome"}
	cash := credits.Grant{ID: "cg_cash", Kind: credits.Prepaid, Amount: dec("500"), EffectiveAt: oct}
	for _, tc := range []struct {
		name                     string
		draws                    map[string]string
		applied                  map[string]int64
		sub, tax, prepaid, total int64
		credits                  int
	}{
		// 100.00 of usage, 50.00 promotional: 50.00 taxed at 10 % = 5.00,
		// prepaid pays 55.00 of its 500.00 (its draw is gross).
		{name: "promotional before tax, prepaid after", draws: map[string]string{"cg_promo": "50", "cg_cash": "55"},
			sub: 5000, tax: 500, prepaid: -5500, total: 0, credits: 2},
		// The burn says the prepaid covered 60.00 but only 55.00 is due:
		// the line stops at the total, the rest is applied later.
		{name: "never below zero", draws: map[string]string{"cg_promo": "50", "cg_cash": "60"},
			sub: 5000, tax: 500, prepaid: -5500, total: 0, credits: 2},
		// Earlier invoices applied 20.00 of the promo: 30.00 is left to apply.
		{name: "what earlier invoices applied is not applied again", draws: map[string]string{"cg_promo": "50"},
			applied: map[string]int64{"cg_promo": 2000}, sub: 7000, tax: 700, total: 7700, credits: 1},
		{name: "no draws, no lines", sub: 10000, tax: 1000, total: 11000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testDraft("10", line(pricing.KindOnDemand, "A", "100"))
			end := burnt(tc.draws, promo, cash)
			d.Credits = &CreditInput{Start: burnt(nil, promo, cash), End: end, AppliedMinor: tc.applied, NextPeriodEnd: d.Period.End.AddDate(0, 1, 0)}
			inv, err := BuildInvoice(d)
			if err != nil {
				t.Fatal(err)
			}
			if inv.SubtotalMinor != tc.sub || inv.TaxMinor != tc.tax || inv.PrepaidMinor != tc.prepaid || inv.TotalMinor != tc.total {
				t.Errorf("subtotal %d tax %d prepaid %d total %d, want %d %d %d %d",
					inv.SubtotalMinor, inv.TaxMinor, inv.PrepaidMinor, inv.TotalMinor, tc.sub, tc.tax, tc.prepaid, tc.total)
			}
			n, taxAt := 0, 0
			for i, l := range inv.Lines {
				switch {
				case l.Kind == KindTax:
					taxAt = i
				case l.GrantID != "":
					n++
					if l.Kind == KindPrepaidCredit && i < taxAt {
						t.Errorf("prepaid line %d before the tax line %d", i, taxAt)
					}
					if !strings.Contains(l.Description, l.GrantID) {
						t.Errorf("line %d %q does not name its grant", i, l.Description)
					}
				}
			}
			if n != tc.credits || len(inv.Credits) != 2 {
				t.Errorf("%d credit lines, %d accounts; want %d and 2", n, len(inv.Credits), tc.credits)
			}
		})
	}
}

func TestInvoiceValidateChecksPrepaid(t *testing.T) {
	d := testDraft("0", line(pricing.KindOnDemand, "A", "100"))
	cash := credits.Grant{ID: "cg_cash", Kind: credits.Prepaid, Amount: dec("30"), EffectiveAt: d.Period.Start}
	d.Credits = &CreditInput{Start: burnt(nil, cash), End: burnt(map[string]string{"cg_cash": "30"}, cash)}
	inv, err := BuildInvoice(d)
	if err != nil || inv.PrepaidMinor != -3000 || inv.TotalMinor != 7000 {
		t.Fatalf("prepaid %d total %d (%v), want -3000 and 7000", inv.PrepaidMinor, inv.TotalMinor, err)
	}
	inv.PrepaidMinor = 0
	if err := inv.Validate(); err == nil || !strings.Contains(err.Error(), "prepaid_minor 0: the prepaid credit lines add up to -3000") {
		t.Errorf("a wrong prepaid total: %v", err)
	}
}
