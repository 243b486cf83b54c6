package partition

import (
	"math/rand"
	"testing"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// benchInput is the fleet of docs/performance.md: 1,000 GPUs of the four
// models on 125 hosts, about a third of the existing instances busy, and 300
// tenants asking for more than the fleet has free.
func benchInput() (Fleet, Demand) {
	r := rand.New(rand.NewSource(1000))
	cfg := genConfig{gpus: 1000, tenants: 300, models: gpucatalog.Models(), busyPct: 30, unknownStartPct: 10,
		maxExisting: 5, maxRequests: 3, maxCount: 4, anyModelPct: 20, disabledPct: 2}
	return genFleet(r, cfg), genDemand(r, cfg)
}

func BenchmarkSolve1000GPUs300Tenants(b *testing.B) {
	fleet, demand := benchInput()
	b.ReportAllocs()
	var plan Plan
	for b.Loop() {
		var err error
		if plan, err = Solve(fleet, demand); err != nil {
			b.Fatal(err)
		}
	}
	s := plan.Summary
	b.ReportMetric(float64(s.GPUsChanged), "gpus_changed")
	b.ReportMetric(100*float64(s.ReservedMetSlices)/float64(max(1, s.ReservedSlices)), "reserved_met_%")
	b.ReportMetric(100*float64(s.ReservedMetSlices+s.PendingMetSlices)/float64(max(1, s.ReservedSlices+s.PendingSlices)), "demand_met_%")
}
