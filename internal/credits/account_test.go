package credits

import (
	"context"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/pricing"
)

// The days walked from one burn-down equal a burn-down to each day's end:
// money and included quantities, through an expiry with rollover, a void
// after partial use and a grant that starts mid-month.
func TestDailyBalancesEqualABurnAtEachDaysEnd(t *testing.T) {
	h100 := "H100-SXM5-80GB"
	cap5 := d("5")
	grants := []Grant{
		{ID: "inc1", Tenant: "acme", Kind: Included, Amount: d("30"), Meter: pricing.GPUHours, SKUClass: h100, EffectiveAt: nov,
			ExpiresAt: day(11), Series: "s", RolloverCap: &cap5, CreatedAt: nov},
		{ID: "inc2", Tenant: "acme", Kind: Included, Amount: d("30"), Meter: pricing.GPUHours, SKUClass: h100, EffectiveAt: day(11),
			ExpiresAt: day(21), Series: "s", CreatedAt: day(11)},
		money("pre", "200", 1, 1),
		{ID: "promo", Tenant: "acme", Kind: Promotional, Amount: d("50"), Currency: "USD", EffectiveAt: day(5), CreatedAt: day(5),
			VoidedAt: ptr(day(9).Add(12 * time.Hour)), VoidReason: "refund"},
	}
	var charges []Charge
	for h := nov; h.Before(day(16)); h = h.Add(time.Hour) {
		if h.Hour()%3 == 0 {
			charges = append(charges, gpu(h, h100, "1", "3"))
		}
	}
	now := day(15).Add(17*time.Hour + 20*time.Minute)
	asOf := now.Truncate(time.Hour)
	res, err := Burn(grants, charges, asOf)
	if err != nil {
		t.Fatal(err)
	}
	days := DailyBalances(res, time.UTC, now)
	if len(days) != 15 {
		t.Fatalf("%d days, want 15 (1-15 November)", len(days))
	}
	for i, dy := range days {
		end := day(i + 2)
		if i == 14 {
			end = now // today: what is left now
		}
		if !dy.Start.Equal(day(i+1)) || !dy.End.Equal(end) {
			t.Fatalf("day %d: %s-%s, want %s-%s", i+1, dy.Start, dy.End, day(i+1), end)
		}
		at, err := Burn(grants, charges, end)
		if err != nil {
			t.Fatal(err)
		}
		money, included := decimal.Zero, decimal.Zero
		for _, b := range at.Balances {
			if b.Grant.EffectiveAt.After(end) {
				continue
			}
			if b.Grant.Kind == Included {
				included = included.Add(b.Remaining)
			} else {
				money = money.Add(b.Remaining)
			}
		}
		if !dy.Money.Equal(money) || len(dy.Included) != 1 || !dy.Included[0].Remaining.Equal(included) {
			t.Errorf("day %d: money %s, included %v; a burn-down to %s leaves %s and %s", i+1, dy.Money, dy.Included, end, money, included)
		}
	}
	// By hand: 8 charges a day of 1 GPU-hour and 3 USD; inc1 covers 30
	// hours: 24 by the end of 3 November, the rest on the 4th.
	if got := days[2].Included[0].Remaining.String(); got != "6" {
		t.Errorf("included left at the end of 3 November: %s, want 30 - 24 = 6", got)
	}
	if got := days[3].Included[0].Remaining.String(); got != "0" {
		t.Errorf("included left at the end of 4 November: %s, want 0", got)
	}
}

// chargesFake answers Charges with fixed charges.
type chargesFake struct {
	charges []Charge
	asOf    time.Time
}

func (f chargesFake) Charges(_ context.Context, _ string, _, _ time.Time) ([]Charge, time.Time, error) {
	return f.charges, f.asOf, nil
}

type ledgerFake struct{ grants []Grant }

func (l ledgerFake) SaveGrant(context.Context, Grant) error { return nil }
func (l ledgerFake) Grants(context.Context, string) ([]Grant, error) {
	return l.grants, nil
}
func (l ledgerFake) Grant(context.Context, string) (Grant, error) {
	return Grant{}, fault.NotFoundf("none")
}
func (l ledgerFake) VoidGrant(context.Context, string, time.Time, string) (Grant, error) {
	return Grant{}, nil
}

// The depletion date is the first forecast day whose end finds the money
// gone, the forecast's spend paid with its tax by prepaid credit.
func TestAccountDepletion(t *testing.T) {
	h100 := "H100-SXM5-80GB"
	now := day(10).Add(6 * time.Hour)
	var charges []Charge
	for h := nov; h.Before(day(10)); h = h.Add(24 * time.Hour) {
		c := gpu(h, h100, "4", "10") // 10 USD a day, 10 % tax
		c.TaxRate = d("10")
		charges = append(charges, c)
	}
	pre := money("pre", "200", 0, 1)
	svc := NewService(ledgerFake{[]Grant{pre}}, chargesFake{charges, now}, []Customer{{Tenant: "acme", Currency: "USD", TaxRate: d("10")}},
		func() time.Time { return now })
	// The forecast: 90 so far, then 20 a day (the rest of 10 November too).
	fc := Forecast{AsOf: now, SoFar: d("90")}
	total := d("90")
	for n := 10; n <= 30; n++ {
		total = total.Add(d("20"))
		fc.Days = append(fc.Days, ForecastDay{Start: day(n), End: day(n + 1), Total: total})
	}
	acc, err := svc.Account(context.Background(), AccountRequest{Tenant: "acme", ExpiringDays: 7,
		Forecast: func(context.Context) (Forecast, error) { return fc, nil }})
	if err != nil {
		t.Fatal(err)
	}
	// 9 days of 10 USD with 10 % tax: 99 used, 101 left; 22 a day with
	// tax after: 79 at the end of the 10th, 57, 35, 13, then -9 on the
	// 14th.
	if acc.Money.String() != "101" {
		t.Errorf("money left %s, want 101", acc.Money)
	}
	if acc.Depletion == nil || !acc.Depletion.Equal(day(14)) || acc.DaysLeft == nil || *acc.DaysLeft != 4 {
		t.Errorf("depletion %v, %v days left; want 14 November, 4", acc.Depletion, acc.DaysLeft)
	}
	if !acc.ForecastThrough.Equal(day(31)) {
		t.Errorf("forecast through %s", acc.ForecastThrough)
	}
	if len(acc.Daily) != 10 || acc.Daily[0].Money.String() != "189" || acc.Daily[9].Money.String() != "101" {
		t.Errorf("daily %+v", acc.Daily)
	}
	// A forecast spending less never depletes it within the month.
	for i := range fc.Days {
		fc.Days[i].Total = d("90").Add(d("1").Mul(decimal.NewFromInt(int64(i + 1))))
	}
	acc, err = svc.Account(context.Background(), AccountRequest{Tenant: "acme",
		Forecast: func(context.Context) (Forecast, error) { return fc, nil }})
	if err != nil || acc.Depletion != nil || acc.DaysLeft != nil {
		t.Errorf("a slow forecast: depletion %v, err %v", acc.Depletion, err)
	}
}
