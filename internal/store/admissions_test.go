package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
)

// The admission log on a real ClickHouse: held parts read back exactly
// (decimals to 18 places, the expiry rounded up to the second); a part
// written again as released, and one expired, are not held.
func TestAdmissionLog(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	d := func(v string) decimal.Decimal { return decimal.RequireFromString(v) }
	held := quota.Admitted{ID: "adm-1-1", Tenant: "acme", Department: "research", GPUModel: "H100-SXM5-80GB",
		Demand:  quota.Demand{GPUs: d("0.375"), GPUHours: d("0.123456789012345678"), Spend: d("12.5")},
		Expires: now.Add(10*time.Minute + 300*time.Millisecond)}
	started := quota.Admitted{ID: "adm-1-2", Tenant: "acme", GPUModel: "A100-SXM4-80GB", Demand: quota.Demand{GPUs: d("2")}, Expires: now.Add(time.Minute)}
	expired := quota.Admitted{ID: "adm-1-3", Tenant: "acme", GPUModel: "A100-SXM4-80GB", Part: 1, Demand: quota.Demand{GPUs: d("1")}, Expires: now.Add(-time.Second)}
	if err := s.SaveAdmissions(ctx, []quota.Admitted{held, started, expired}); err != nil {
		t.Fatal(err)
	}
	started.Released = true
	if err := s.SaveAdmissions(ctx, []quota.Admitted{started}); err != nil {
		t.Fatal(err)
	}
	got, err := s.HeldAdmissions(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("held admissions: %+v, want adm-1-1 alone", got)
	}
	g := got[0]
	want := held
	want.Expires = now.Add(10*time.Minute + time.Second)
	if g.ID != want.ID || g.Part != 0 || g.Tenant != want.Tenant || g.Department != want.Department || g.GPUModel != want.GPUModel ||
		!g.Demand.GPUs.Equal(want.Demand.GPUs) || !g.Demand.GPUHours.Equal(want.Demand.GPUHours) || !g.Demand.Spend.Equal(want.Demand.Spend) ||
		!g.Expires.Equal(want.Expires) || g.Released {
		t.Errorf("held admission read back as %+v, want %+v", g, want)
	}
}

// Credit holds on a real ClickHouse: money and included hours of a class
// and of any SKU read back exactly (18 places), the end rounded up to the
// second; a replayed write is read once; holds ended by since are not
// read.
func TestCreditHoldLog(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	d := func(v string) decimal.Decimal { return decimal.RequireFromString(v) }
	hours := quota.CreditHold{Tenant: "astro", Hold: credits.Hold{ID: "adm-1-1", Money: d("1.285714285714285714"),
		Hours: map[string]decimal.Decimal{"H100-SXM5-80GB": d("0.428571428571428571"), "": d("2")}, Until: now.Add(time.Hour + 300*time.Millisecond)}}
	money := quota.CreditHold{Tenant: "astro", Hold: credits.Hold{ID: "adm-1-2", Money: d("6"), Until: now.Add(-2 * time.Hour)}}
	ended := quota.CreditHold{Tenant: "globex", Hold: credits.Hold{ID: "adm-1-3", Money: d("3"), Until: now.Add(-25 * time.Hour)}}
	for range 2 {
		if err := s.SaveCreditHolds(ctx, []quota.CreditHold{hours, money, ended}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.CreditHolds(ctx, now.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("credit holds: %+v, want adm-1-1 and adm-1-2, once each", got)
	}
	h, m := got[0], got[1]
	if h.Tenant != "astro" || h.ID != "adm-1-1" || !h.Money.Equal(hours.Money) || len(h.Hours) != 2 ||
		!h.Hours["H100-SXM5-80GB"].Equal(hours.Hours["H100-SXM5-80GB"]) || !h.Hours[""].Equal(d("2")) ||
		!h.Until.Equal(now.Add(time.Hour+time.Second)) {
		t.Errorf("hold with hours read back as %+v, want %+v (its end rounded up)", h, hours)
	}
	if m.Tenant != "astro" || m.ID != "adm-1-2" || !m.Money.Equal(d("6")) || len(m.Hours) != 0 || !m.Until.Equal(money.Until) {
		t.Errorf("money hold read back as %+v, want %+v", m, money)
	}
}
