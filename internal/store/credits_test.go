package store_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/pricing"
)

// The grant ledger on a real ClickHouse: grants read back exactly as
// written (decimals to 9 places, a rollover cap, never-expiring), by tenant
// or all; a void appends the time and reason and keeps the record, and a
// second void keeps the first.
func TestGrantLedger(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	cap30 := decimal.RequireFromString("30")
	grants := []credits.Grant{
		{ID: "cg_1", Tenant: "acme", Kind: credits.Prepaid, Amount: decimal.RequireFromString("500.123456789"), Currency: "USD",
			Priority: 2, EffectiveAt: nov, CreatedAt: nov, Source: "order 17", Note: `C:\acme "first"`},
		{ID: "cg_2", Tenant: "acme", Kind: credits.Included, Amount: decimal.RequireFromString("100"), Meter: pricing.GPUHours,
			SKUClass: "H100-SXM5-80GB", EffectiveAt: nov, ExpiresAt: nov.AddDate(0, 1, 0), Series: "plan", RolloverCap: &cap30,
			CreatedAt: nov.Add(time.Hour)},
		{ID: "cg_3", Tenant: "globex", Kind: credits.Promotional, Amount: decimal.RequireFromString("20"), Currency: "EUR",
			EffectiveAt: nov, CreatedAt: nov},
	}
	for _, g := range grants {
		if err := s.SaveGrant(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	acme, err := s.Grants(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(acme) != 2 || !sameGrant(acme[0], grants[0]) || !sameGrant(acme[1], grants[1]) {
		t.Fatalf("acme's grants read back as %+v", acme)
	}
	if all, err := s.Grants(ctx, ""); err != nil || len(all) != 3 {
		t.Fatalf("all grants: %d, %v", len(all), err)
	}

	at := nov.Add(10 * 24 * time.Hour)
	v, err := s.VoidGrant(ctx, "cg_1", at, "granted twice")
	if err != nil || v.VoidedAt == nil || !v.VoidedAt.Equal(at) {
		t.Fatalf("void: %+v, %v", v, err)
	}
	if again, err := s.VoidGrant(ctx, "cg_1", at.Add(time.Hour), "again"); err != nil || !again.VoidedAt.Equal(at) || again.VoidReason != "granted twice" {
		t.Errorf("a second void: %+v, %v; want the first kept", again, err)
	}
	got, err := s.Grant(ctx, "cg_1")
	want := grants[0]
	want.VoidedAt, want.VoidReason = &at, "granted twice"
	if err != nil || !sameGrant(got, want) {
		t.Errorf("the voided grant reads %+v, %v; want the record with its void", got, err)
	}
	if _, err := s.Grant(ctx, "cg_nope"); !fault.IsNotFound(err) {
		t.Errorf("an unknown grant: %v, want not found", err)
	}
}

// sameGrant compares grants with decimals by value.
func sameGrant(a, b credits.Grant) bool {
	if !a.Amount.Equal(b.Amount) || (a.RolloverCap == nil) != (b.RolloverCap == nil) ||
		a.RolloverCap != nil && !a.RolloverCap.Equal(*b.RolloverCap) {
		return false
	}
	a.Amount, b.Amount, a.RolloverCap, b.RolloverCap = decimal.Zero, decimal.Zero, nil, nil
	return reflect.DeepEqual(a, b)
}
