package insights

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// BenchmarkForecastCost is one /v1/cost answer for a tenant in the middle
// of a noisy month with six weeks of history: the path prices the month
// through every day, and the band's edges on the projected days.
func BenchmarkForecastCost(b *testing.B) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	end := start.AddDate(0, 1, 0)
	asOf := time.Date(2026, 11, 17, 12, 0, 0, 0, time.UTC)
	tp := costPricing(b, "1000")
	r := rand.New(rand.NewPCG(3, 31))
	noisy := func(h time.Time) []pricing.Usage {
		return weekUsage(h, decimal.NewFromInt(int64(50+r.IntN(100))).Div(decimal.NewFromInt(100)))
	}
	in := CostForecastInput{Tenant: "acme", Pricing: tp, PeriodStart: start, PeriodEnd: end, AsOf: asOf,
		Usage: usageBetween(start.AddDate(0, 0, -42), asOf, noisy), Weeks: DefaultForecastWeeks}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ForecastCost(in); err != nil {
			b.Fatal(err)
		}
	}
}
