package insights

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

var t0 = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) // a Monday

const step = 10 * time.Second

// seg is a run of n equal intervals of 10 s.
type seg struct {
	n          int
	share      float64 // of the GPU held
	sm         float64 // SM-active fraction of the time held
	memGB      float64 // peak, decimal GB
	unmeasured bool
	gap        time.Duration // before the segment
}

// intervals lays segments end to end from start.
func intervals(start time.Time, segs ...seg) []Interval {
	var out []Interval
	at := start
	for _, s := range segs {
		at = at.Add(s.gap)
		for i := 0; i < s.n; i++ {
			d := step.Microseconds()
			g := int64(float64(d) * s.share)
			iv := Interval{Start: at, DurationMicros: d, GPUMicros: g, MemPeakBytes: int64(s.memGB * 1e9)}
			if s.unmeasured {
				iv.SMUnmeasured = true
			} else {
				iv.SMActiveMicros = int64(float64(g) * s.sm)
			}
			out = append(out, iv)
			at = at.Add(step)
		}
	}
	return out
}

func holding(tenant, dept, gpu, sku string, ivs []Interval) Holding {
	return Holding{Tenant: tenant, Department: dept, Host: "h1", GPUUUID: gpu, SKU: sku, Intervals: ivs}
}

const testBook = `
version: test-1
currency:
  code: USD
  rounding:
    minor_units: 2
    mode: half_away_from_zero
skus:
  A100-SXM4-40GB:
    weight: 1
    meters:
      gpu_hours:
        unit_price: "2.00"
  A100-SXM4-40GB/3g.20gb:
    weight: 3/7
    meters:
      gpu_hours:
        unit_price: "2.10"
  A100-SXM4-40GB/2g.10gb:
    weight: 2/7
    meters:
      gpu_hours:
        unit_price: "2.10"
  A100-SXM4-40GB/1g.5gb:
    weight: 1/7
    meters:
      gpu_hours:
        unit_price: "2.10"
  A100-SXM4-40GB/7g.40gb:
    weight: 1
    meters:
      gpu_hours:
        unit_price: "2.10"
  H100-SXM5-80GB:
    weight: 1
    meters:
      gpu_hours:
        mode: graduated
        tiers:
          - up_to: 1
            unit_price: "10"
          - unit_price: "1"
`

func book(t testing.TB) *pricing.Book {
	t.Helper()
	b, err := pricing.ParseBook([]byte(testBook))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }
