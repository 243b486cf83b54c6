package insights

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// FuzzHoldings feeds arbitrary intervals to Efficiency and RightSize: no
// panic, and either an error or totals that reconcile.
func FuzzHoldings(f *testing.F) {
	f.Add([]byte{10, 0, 0, 0, 255, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, uint8(0))
	f.Add(make([]byte, 64), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, skuPick uint8) {
		skus := []string{a100, a100 + "/3g.20gb", a100 + "/vgpu:A100-10C", a100 + "/vgpu:A100-3-20C", "Tesla-T4", h100 + "/nope"}
		sku := skus[int(skuPick)%len(skus)]
		var ivs []Interval
		at := t0
		for len(data) >= 8 && len(ivs) < 2000 {
			dur := int64(binary.LittleEndian.Uint16(data[0:])) * 1000
			gpu := int64(binary.LittleEndian.Uint16(data[2:])) * 1000
			sm := int64(binary.LittleEndian.Uint16(data[4:])) * 1000
			flags := data[6]
			mem := int64(data[7]) * 500_000_000
			data = data[8:]
			if flags&1 != 0 {
				at = at.Add(time.Duration(flags) * time.Second)
			}
			if flags&2 != 0 {
				at = at.Add(-time.Second) // may overlap: Validate must say so
			}
			ivs = append(ivs, Interval{Start: at, DurationMicros: dur, GPUMicros: gpu, SMActiveMicros: sm, MemPeakBytes: mem, SMUnmeasured: flags&4 != 0})
			at = at.Add(time.Duration(dur) * time.Microsecond)
		}
		hs := []Holding{holding("acme", "r", "gpu-1", sku, ivs)}
		b := book(t)
		rep, err := Efficiency(EfficiencyInput{From: t0, To: t0.Add(48 * time.Hour), Params: DefaultIdleParams(), Holdings: hs, Pricing: map[string]TenantPricing{"acme": {Book: b}}})
		if err == nil {
			for _, r := range rep.Tenants {
				if r.HeldGPUMicros != r.MeasuredGPUMicros+r.UnmeasuredGPUMicros || r.IdleGPUMicros > r.MeasuredGPUMicros || r.SMActiveMicros > r.MeasuredGPUMicros {
					t.Fatalf("totals do not reconcile: %+v", r.Totals)
				}
			}
		}
		rs, err := RightSize(RightSizeInput{From: t0, To: t0.Add(48 * time.Hour), Params: DefaultRightSizeParams(), Holdings: hs, Pricing: map[string]TenantPricing{"acme": {Book: b}}})
		if err == nil {
			for _, r := range rs.Tenants {
				if r.SavedGPUMicros < 0 || r.SavedGPUMicros != r.HeldGPUMicros-r.RecommendedGPUMicros {
					t.Fatalf("savings do not reconcile: %+v", r)
				}
			}
		}
	})
}

// FuzzSeries feeds arbitrary series to Detect, ForecastPeriod and
// Capacity: no panic, and either an error or a result (a forecast's path
// one point per step of the period, ending at its total).
func FuzzSeries(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, true, uint16(400), uint16(40))
	f.Add(make([]byte, 40), false, uint16(30), uint16(3))
	f.Fuzz(func(t *testing.T, data []byte, hourly bool, steps, ahead uint16) {
		step := Daily
		if hourly {
			step = Hourly
		}
		n := int(steps % 3000)
		s := Series{Tenant: "acme", Meter: "gpu_hours", Step: step, From: t0}
		s.To = s.at(n)
		for i := 0; i < len(data)/2; i++ {
			idx := int(data[2*i]) * n / 256
			if data[2*i]&1 == 1 && n > 0 {
				idx = (idx*7 + i) % max(n, 1)
			}
			s.Points = append(s.Points, Point{At: s.at(idx), Value: decimal.New(int64(data[2*i+1])-8, -1)})
		}
		end := s.at(n + int(ahead%500))
		if _, err := Detect(AnomalyInput{Series: []Series{s}, EvaluateFrom: s.at(n / 2), Params: DefaultAnomalyParams()}); err != nil && s.Validate() == nil {
			t.Fatalf("valid series refused: %v", err)
		}
		if fc, err := ForecastPeriod(ForecastInput{Series: s, PeriodStart: s.at(n / 2), PeriodEnd: end, Weeks: 4}); err == nil {
			if fc.Total.LessThan(fc.Actual) || fc.Low.GreaterThan(fc.Total) || fc.High.LessThan(fc.Total) {
				t.Fatalf("forecast out of order: %+v", fc)
			}
			if k := len(fc.Path); k != n-n/2+int(ahead%500) || k > 0 && !fc.Path[k-1].Total.Equal(fc.Total) {
				t.Fatalf("path of %d points for %d steps, ending away from the total %s", k, n-n/2+int(ahead%500), fc.Total)
			}
		}
		_, _ = Capacity(CapacityInput{Model: a100, CapacityGPUs: dec("4"), Target: dec("1"), Demand: s, Weeks: 4, Until: end})
	})
}
