package credits

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// BenchmarkBurn10kCustomers burns down a month for 10,000 customers with
// three grants each (included H100 GPU-hours, a promotional and a prepaid
// credit) over 720 hourly charges each (two SKUs), the pure part of the
// issue's balance benchmark (reading the rollups is the store's).
func BenchmarkBurn10kCustomers(b *testing.B) {
	grants, charges := benchMonth()
	asOf := nov.AddDate(0, 1, 0)
	b.ResetTimer()
	for range b.N {
		for range 10_000 {
			if _, err := Balances(grants, charges, asOf); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkAccountDays derives a customer's days of a month (what the
// account's daily series and the portal's burn-down show) from one
// burn-down of the bench's grants over 720 hourly charges on two SKUs.
func BenchmarkAccountDays(b *testing.B) {
	grants, charges := benchMonth()
	now := nov.AddDate(0, 0, 30).Add(-time.Minute)
	res, err := Burn(grants, charges, now.Truncate(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if days := DailyBalances(res, time.UTC, now); len(days) != 30 {
			b.Fatalf("%d days", len(days))
		}
	}
}

// benchMonth is one customer's month: three grants (included H100
// GPU-hours, a promotional credit expiring mid-month, a prepaid credit)
// and 720 hourly charges on two SKUs.
func benchMonth() ([]Grant, []Charge) {
	grants := []Grant{
		{ID: "hours", Tenant: "t", Kind: Included, Amount: decimal.NewFromInt(100), Meter: pricing.GPUHours, SKUClass: "H100-SXM5-80GB", EffectiveAt: nov},
		{ID: "promo", Tenant: "t", Kind: Promotional, Amount: decimal.NewFromInt(500), Currency: "USD", EffectiveAt: nov, ExpiresAt: nov.AddDate(0, 0, 15)},
		{ID: "prepaid", Tenant: "t", Kind: Prepaid, Amount: decimal.NewFromInt(2000), Currency: "USD", EffectiveAt: nov},
	}
	var charges []Charge
	for h := range 720 {
		at := nov.Add(time.Duration(h) * time.Hour)
		charges = append(charges,
			Charge{At: at, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: decimal.RequireFromString("0.5"), Amount: decimal.RequireFromString("1.25")},
			Charge{At: at, SKU: "A100-SXM4-80GB/3g.40gb", Meter: pricing.GPUHours, Quantity: decimal.RequireFromString("0.428571428"), Amount: decimal.RequireFromString("0.6")})
	}
	return grants, charges
}
