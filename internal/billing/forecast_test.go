package billing

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

func TestPriceMonthToDate(t *testing.T) {
	book, err := pricing.ParseBook([]byte(`version: f-1
currency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}
skus:
  H100-SXM5-80GB: {meters: {gpu_hours: {unit_price: "2.00"}, energy_kwh: {unit_price: "0.10"}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := MonthlyPeriod("2026-11", time.UTC) // 720 h
	var usage []pricing.Usage
	for h := p.Start; h.Before(p.Start.Add(240 * time.Hour)); h = h.Add(time.Hour) {
		usage = append(usage, pricing.Usage{Hour: h, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: decimal.NewFromInt(2)},
			pricing.Usage{Hour: h, SKU: "H100-SXM5-80GB", Meter: pricing.EnergyKWh, Quantity: decimal.NewFromInt(1)})
	}
	dec := decimal.RequireFromString
	cases := []struct {
		name                  string
		asOf                  time.Time
		soFarGPU, forecastGPU string
		soFarKWh, forecastKWh string
		wantAsOf              time.Time
	}{
		// 10 days of 2 GPUs at 2.00: 960.00 so far; 2 GPUs for the 30 days
		// is 2,880.00. Energy 240 kWh x 0.10 = 24.00, month 72.00.
		{"a third of the month", p.Start.Add(240*time.Hour + 30*time.Minute), "960", "2880", "24", "72", p.Start.Add(240 * time.Hour)},
		// After the tenth day no more usage came: so far stays, and the
		// forecast carries the lower average (960 over 480 h) on.
		{"two thirds, idle since", p.Start.Add(480 * time.Hour), "960", "1440", "24", "36", p.Start.Add(480 * time.Hour)},
		{"the month is over", p.End.Add(72 * time.Hour), "960", "960", "24", "24", p.End},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := PriceMonthToDate("acme", p, time.UTC, usage, book, nil, c.asOf)
			if err != nil {
				t.Fatal(err)
			}
			so, fc := CostByMeter(m.SoFar), CostByMeter(m.Forecast)
			if !m.AsOf.Equal(c.wantAsOf) || !so[pricing.GPUHours].Equal(dec(c.soFarGPU)) || !fc[pricing.GPUHours].Equal(dec(c.forecastGPU)) ||
				!so[pricing.EnergyKWh].Equal(dec(c.soFarKWh)) || !fc[pricing.EnergyKWh].Equal(dec(c.forecastKWh)) {
				t.Fatalf("as of %s: so far %v, forecast %v", m.AsOf, so, fc)
			}
		})
	}
	if _, err := PriceMonthToDate("acme", p, time.UTC, usage, book, nil, p.Start); err == nil {
		t.Fatal("a month priced before it began")
	}
}
