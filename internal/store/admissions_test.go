package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/shopspring/decimal"

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
