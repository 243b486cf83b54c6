package usage

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
)

// TestFleetUsageEqualsUsageOf: the memo (its recent entries and its map,
// emptied when full) gives each row pricing.UsageOf's meters at the row's
// hour, rows before start left out, hourly rows before raw ones.
func TestFleetUsageEqualsUsageOf(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	skus := []string{"H100-SXM5-80GB", "A100-SXM4-80GB/3g.40gb", "L4", "unknown", "H200", "B200"}
	var hourly, raw []Row
	for h := -2; h < 300; h++ {
		for k, sku := range skus[:1+(h+2)%len(skus)] {
			v := meter.Values{GPUMicroseconds: uint64(1800000000 + 1000*(h%7)*(k%2)), EnergyMillijoules: uint64(700000 * (h % 3))}
			r := Row{Bucket: start.Add(time.Duration(h) * time.Hour), SKU: sku}
			r.Values = v
			hourly = append(hourly, r)
		}
	}
	late := Row{Bucket: start.Add(300 * time.Hour), SKU: skus[0]}
	late.GPUMicroseconds = 5
	raw = append(raw, late)
	var want []pricing.Usage
	for _, r := range append(append([]Row{}, hourly...), raw...) {
		if !r.Bucket.Before(start) {
			want = append(want, pricing.UsageOf(r.Bucket, r.SKU, r.Values)...)
		}
	}
	var m usageMemo
	h, r := appendHourRows(nil, hourly), appendHourRows(nil, raw)
	got := m.fleetUsage(nil, start, h, r)
	got = m.fleetUsage(got[:0], start, h, r) // again, from the memo
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%d usage rows, want %d", len(got), len(want))
	}
	for i := range want {
		if g, w := fmt.Sprint(got[i].Hour, got[i].SKU, got[i].Meter, got[i].Quantity, got[i].Quantity.Exponent()),
			fmt.Sprint(want[i].Hour, want[i].SKU, want[i].Meter, want[i].Quantity, want[i].Quantity.Exponent()); g != w {
			t.Fatalf("row %d: %s, want %s", i, g, w)
		}
	}
}
