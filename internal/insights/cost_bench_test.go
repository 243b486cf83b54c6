package insights

import "testing"

// BenchmarkForecastCost is one /v1/cost answer for a tenant in the middle
// of a noisy month with six weeks of history: the path prices the month
// through every day, and the band's edges on the projected days.
func BenchmarkForecastCost(b *testing.B) {
	in := noisyNovember(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ForecastCost(in); err != nil {
			b.Fatal(err)
		}
	}
}
