package insights

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// TestDailySpendPricesEachDayInTheTenantsZone: rows fall on the calendar
// day of their hour in the tenant's zone, each day is priced and rounded
// once, days without rows are absent and rows outside the range ignored.
func TestDailySpendPricesEachDayInTheTenantsZone(t *testing.T) {
	book, err := pricing.ParseBook([]byte("version: flat\ncurrency: {code: EUR, rounding: {minor_units: 2, mode: half_away_from_zero}}\nskus:\n  H100-SXM5-80GB:\n    meters:\n      gpu_hours: {unit_price: \"2.005\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 11, 2, 0, 0, 0, 0, berlin)
	to := from.AddDate(0, 0, 3)
	row := func(at time.Time, h int64) pricing.Usage {
		return pricing.Usage{Hour: at.UTC(), SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: decimal.NewFromInt(h)}
	}
	usage := []pricing.Usage{
		row(from, 1),                   // 23:00 UTC of Nov 1: Berlin's Nov 2
		row(from.Add(5*time.Hour), 2),  // Nov 2
		row(from.AddDate(0, 0, 2), 3),  // Nov 4
		row(from.Add(-time.Hour), 100), // before the range
		row(to, 100),                   // after it
	}
	s, err := DailySpend("acme", TenantPricing{Book: book}, from, to, usage)
	if err != nil {
		t.Fatal(err)
	}
	want := []Point{{At: from, Value: decimal.RequireFromString("6.02")}, {At: from.AddDate(0, 0, 2), Value: decimal.RequireFromString("6.02")}}
	if len(s.Points) != len(want) {
		t.Fatalf("points %+v, want %+v", s.Points, want)
	}
	for i, p := range s.Points {
		if !p.At.Equal(want[i].At) || !p.Value.Equal(want[i].Value) {
			t.Errorf("point %d: %s %s, want %s %s", i, p.At, p.Value, want[i].At, want[i].Value)
		}
	}
	if err := s.Validate(); err != nil {
		t.Errorf("the series is not valid: %v", err)
	}
	if _, err := DailySpend("acme", TenantPricing{Book: book}, from.Add(time.Hour), to, usage); err == nil {
		t.Error("a range starting off midnight was accepted")
	}
}

func TestDailyUsageSumsOneMeterPerDay(t *testing.T) {
	from := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	u := func(at time.Time, m pricing.Meter, q string) pricing.Usage {
		return pricing.Usage{Hour: at, SKU: "H100-SXM5-80GB", Meter: m, Quantity: decimal.RequireFromString(q)}
	}
	s, err := DailyUsage("acme", pricing.GPUHours, from, from.AddDate(0, 0, 2), []pricing.Usage{
		u(from, pricing.GPUHours, "1.5"), u(from.Add(23*time.Hour), pricing.GPUHours, "0.25"),
		u(from.Add(time.Hour), pricing.Meter("energy_kwh"), "9"), u(from.AddDate(0, 0, 2), pricing.GPUHours, "7"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Points) != 1 || !s.Points[0].At.Equal(from) || !s.Points[0].Value.Equal(decimal.RequireFromString("1.75")) || s.Meter != "gpu_hours" {
		t.Errorf("series %+v, want one day of 1.75 gpu_hours", s)
	}
}
