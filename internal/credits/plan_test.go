package credits

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/pricing"
)

func TestPlanValidate(t *testing.T) {
	ok := Recurring{Series: "plan", Kind: Included, Amount: d("100"), Meter: pricing.GPUHours, SKUClass: "H100-SXM5-80GB", Start: "2026-10"}
	for _, tc := range []struct {
		name string
		plan Plan
		want []string // each must be in the error; none: valid
	}{
		{name: "a monthly H100 allowance, credit only", plan: Plan{Settlement: CreditOnly, Recurring: []Recurring{ok}}},
		{name: "unknown settlement", plan: Plan{Settlement: "invoice_later"}, want: []string{`c.settlement "invoice_later"`}},
		{name: "every field wrong", plan: Plan{Recurring: []Recurring{{Series: "bad series", Kind: "gift", Amount: d("0"), Start: "Oct", RolloverCap: ptr(d("-1"))}}},
			want: []string{`c.recurring[0].series "bad series"`, `c.recurring[0].start "Oct"`, "c.recurring[0].amount 0", "c.recurring[0].rollover_cap -1", `c.recurring[0].kind "gift"`}},
		{name: "a series twice", plan: Plan{Recurring: []Recurring{ok, ok}}, want: []string{`c.recurring[1].series "plan": used twice`}},
		{name: "unknown SKU class and meter", plan: Plan{Recurring: []Recurring{{Series: "x", Kind: Included, Amount: d("1"), Meter: "hugs", SKUClass: "Z9000", Start: "2026-10"}}},
			want: []string{`c.recurring[0].meter "hugs"`, `c.recurring[0].sku_class "Z9000"`}},
		{name: "a meter on money", plan: Plan{Recurring: []Recurring{{Series: "x", Kind: Prepaid, Amount: d("1"), Meter: pricing.GPUHours, Start: "2026-10"}}},
			want: []string{"c.recurring[0]: meter and sku_class are only for included grants"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.plan.Validate("c")
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("valid plan refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestRecurringGrantsThrough(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	r := Recurring{Series: "plan", Kind: Promotional, Amount: d("50"), Start: "2026-10", RolloverCap: ptr(d("10"))}
	gs, err := r.GrantsThrough("acme", "EUR", berlin, time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	if err != nil || len(gs) != 3 {
		t.Fatalf("grants October to December: %d (%v)", len(gs), err)
	}
	// October in Berlin starts at 22:00 UTC on 30 September (CEST) and
	// November at 23:00 UTC on 31 October (CET): each grant ends where the
	// next starts, so rollover finds it.
	if want := time.Date(2026, 9, 30, 22, 0, 0, 0, time.UTC); !gs[0].EffectiveAt.Equal(want) {
		t.Errorf("October starts %s, want %s", gs[0].EffectiveAt, want)
	}
	for i := 1; i < len(gs); i++ {
		if !gs[i].EffectiveAt.Equal(gs[i-1].ExpiresAt) || gs[i].Series != "plan" || gs[i].ID == gs[i-1].ID {
			t.Errorf("grant %d (%s from %s) does not follow %s ending %s", i, gs[i].ID, gs[i].EffectiveAt, gs[i-1].ID, gs[i-1].ExpiresAt)
		}
		if err := gs[i].Validate([]Customer{{Tenant: "acme", Currency: "EUR"}}); err != nil {
			t.Errorf("grant %d invalid: %v", i, err)
		}
	}
	again, _ := r.GrantsThrough("acme", "EUR", berlin, time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC))
	if len(again) != 3 || again[2].ID != gs[2].ID || !again[2].CreatedAt.Equal(gs[2].CreatedAt) {
		t.Errorf("a later run names December's grant %s, first %s: want the same grant", again[2].ID, gs[2].ID)
	}
	other, _ := r.GrantsThrough("globex", "EUR", berlin, time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
	if other[0].ID == gs[0].ID {
		t.Errorf("two customers' October grants share id %s", gs[0].ID)
	}
}
