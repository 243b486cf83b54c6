package pricing_test

import (
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
