package quota

import (
	"testing"

	"github.com/shopspring/decimal"
)

// A holding counts its GPU time over its length: a whole GPU is 1, a
// 3g.40gb instance 3/7, a time-sliced half 0.5; a zero-length sample
// counts nothing.
func TestLiveConcurrencySumsShares(t *testing.T) {
	const tenS = 10_000_000
	got := liveConcurrency([]Holding{
		{Tenant: "acme", GPUModel: "H100-SXM5-80GB", GPUMicroseconds: tenS, Seconds: 10},
		{Tenant: "acme", GPUModel: "H100-SXM5-80GB", GPUMicroseconds: tenS * 3 / 7, Seconds: 10},
		{Tenant: "acme", GPUModel: "A100-SXM4-40GB", GPUMicroseconds: tenS / 2, Seconds: 10},
		{Tenant: "beta", GPUModel: "H100-SXM5-80GB", GPUMicroseconds: 5, Seconds: 0},
	})
	h100 := decimal.NewFromInt(1).Add(decimal.NewFromInt(tenS*3/7).DivRound(decimal.NewFromInt(tenS), 18))
	if !got["acme"]["H100-SXM5-80GB"].Equal(h100) || !got["acme"]["A100-SXM4-40GB"].Equal(decimal.RequireFromString("0.5")) {
		t.Errorf("acme %v", got["acme"])
	}
	if _, ok := got["beta"]; ok {
		t.Errorf("a zero-length sample counted: %v", got["beta"])
	}
}
