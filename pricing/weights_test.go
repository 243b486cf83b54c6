package pricing_test

import (
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

func TestMIGWeightComesFromTheProfileTable(t *testing.T) {
	cases := []struct {
		sku  string
		want string
		ok   bool
	}{
		{"H100-SXM5-80GB/3g.40gb", "0.428571428571428571", true},
		{"A100-SXM4-40GB/1g.5gb", "0.142857142857142857", true},
		{"H200-SXM5-141GB/7g.141gb", "1", true},
		{"H100-SXM5-80GB", "1", true},
		{"H100-SXM5-80GB/5g.99gb", "", false},
		{"T4", "1", true}, // a whole GPU of any model is one GPU-equivalent
	}
	for _, tc := range cases {
		w, ok := pricing.MIGWeight(tc.sku)
		if ok != tc.ok || (ok && !w.Equal(decimal.RequireFromString(tc.want))) {
			t.Errorf("MIGWeight(%q) = %s, %v; want %s, %v", tc.sku, w, ok, tc.want, tc.ok)
		}
	}
}

// A book prices vGPU types as SKUs "<model>/vgpu:<type>", their weights
// from the one table (a time-sliced type 1/(max instances), a MIG-backed
// one its GPU instance's slices), and quotes a vGPU tenant's usage.
func TestVGPUTypesArePricedAndWeighted(t *testing.T) {
	book, err := pricing.WithMIGTable(mustBook(t, `
version: vgpu-test
currency: {code: USD, rounding: {minor_units: 2}}
skus:
  A100-SXM4-40GB/vgpu:A100-4C:
    meters:
      gpu_hours: {unit_price: "2.50"}
  A100-SXM4-40GB/vgpu:A100-3-20C:
    meters:
      gpu_hours: {unit_price: "2.00"}
`))
	if err != nil {
		t.Fatal(err)
	}
	for sku, want := range map[string]string{"A100-SXM4-40GB/vgpu:A100-4C": "0.1", "A100-SXM4-40GB/vgpu:A100-3-20C": "0.428571428571428571"} {
		if w, ok := pricing.MIGWeight(sku); !ok || !w.Equal(dec(want)) {
			t.Errorf("weight of %s = %s %t, want %s", sku, w, ok, want)
		}
	}
	// A VM on one A100-4C for 10 hours holds 0.1 GPU-hour an hour; one on
	// an A100-3-20C for 7 hours holds 3/7 an hour: 3 GPU-hours.
	var usage []pricing.Usage
	for h := range 10 {
		usage = append(usage, pricing.Usage{Hour: hourAt(h), SKU: "A100-SXM4-40GB/vgpu:A100-4C", Meter: pricing.GPUHours, Quantity: dec("0.1")})
	}
	for h := range 7 {
		usage = append(usage, pricing.Usage{Hour: hourAt(h), SKU: "A100-SXM4-40GB/vgpu:A100-3-20C", Meter: pricing.GPUHours, Quantity: dec("0.428571428571428571")})
	}
	r := mustPrice(t, pricing.Input{Book: book, Usage: usage})
	// 1 × 2.50 + 3 × 2.00 (3/7 × 7 rounds back to 3 to the cent).
	if !r.Total.Equal(dec("8.50")) {
		t.Fatalf("total %s, want 8.50: %+v", r.Total, r.Lines)
	}
	if _, err := pricing.WithMIGTable(mustBook(t, `
version: bad
currency: {code: USD, rounding: {minor_units: 2}}
skus:
  A100-SXM4-40GB/vgpu:A100-3-40C:
    meters:
      gpu_hours: {unit_price: "2.00"}
`)); err == nil || !strings.Contains(err.Error(), "no vGPU type") {
		t.Fatalf("a vGPU type the model does not have: %v", err)
	}
}
