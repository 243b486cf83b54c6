package pricing_test

import (
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/pricing"
	"github.com/shopspring/decimal"
)

// benchBook prices all six meters of five SKUs, mixing unit prices,
// graduated and volume tiers, burst rules and a mid-month price change.
const benchBook = `
version: bench
currency: {code: USD, rounding: {minor_units: 2}}
skus:
  H100-SXM5-80GB:
    weight: 1
    meters:
      gpu_hours:
        mode: graduated
        tiers: [{up_to: 1000, unit_price: "2.49"}, {up_to: 5000, unit_price: "2.29"}, {unit_price: "1.99"}]
        burst: {multiplier: "1.5"}
        changes:
          - from: 2026-03-15T00:00:00Z
            mode: graduated
            tiers: [{up_to: 1000, unit_price: "2.29"}, {unit_price: "1.89"}]
            burst: {multiplier: "1.5"}
      sm_active_hours: {unit_price: "0.01"}
      memory_gib_hours: {unit_price: "0.0004"}
      energy_kwh: {unit_price: "0.12"}
      pcie_gib: {mode: graduated, tiers: [{up_to: 1000, unit_price: "0"}, {unit_price: "0.001"}]}
      nvlink_gib: {mode: graduated, tiers: [{up_to: 10000, unit_price: "0"}, {unit_price: "0.0005"}]}
  H100-SXM5-80GB/3g.40gb:
    weight: 3/7
    meters:
      gpu_hours: {unit_price: "2.69", burst: {unit_price: "3.49"}}
      sm_active_hours: {unit_price: "0.01"}
      memory_gib_hours: {unit_price: "0.0004"}
      energy_kwh: {unit_price: "0.12"}
      pcie_gib: {unit_price: "0.001"}
      nvlink_gib: {unit_price: "0.0005"}
  H200-SXM5-141GB:
    meters:
      gpu_hours:
        mode: volume
        tiers: [{up_to: 720, unit_price: "3.59"}, {up_to: 7200, unit_price: "3.29", flat_fee: "10"}, {unit_price: "2.99"}]
      sm_active_hours: {unit_price: "0.01"}
      memory_gib_hours: {unit_price: "0.0004"}
      energy_kwh: {unit_price: "0.12"}
      pcie_gib: {unit_price: "0.001"}
      nvlink_gib: {unit_price: "0.0005"}
  A100-SXM4-80GB:
    meters:
      gpu_hours: {unit_price: "1.69", burst: {multiplier: "1.25"}}
      sm_active_hours: {unit_price: "0.01"}
      memory_gib_hours: {unit_price: "0.0004"}
      energy_kwh: {unit_price: "0.14"}
      pcie_gib: {unit_price: "0.001"}
      nvlink_gib: {unit_price: "0.0005"}
  A100-SXM4-40GB:
    meters:
      gpu_hours: {unit_price: "1.29"}
      sm_active_hours: {unit_price: "0.01"}
      memory_gib_hours: {unit_price: "0.0004"}
      energy_kwh: {unit_price: "0.14"}
      pcie_gib: {unit_price: "0.001"}
      nvlink_gib: {unit_price: "0.0005"}
`

const benchContract = `
tenant: bench
start: 2026-01-01
end: 2027-01-01
minimum_commitment: {monthly_amount: "50000"}
reservations:
  - {sku: H100-SXM5-80GB, gpus: 4, rate: "1.80"}
  - {sku: H100-SXM5-80GB/3g.40gb, instances: 2, monthly_fee: "1500"}
burst:
  - {sku: A100-SXM4-80GB, above_gpus: 8}
`

// benchInput is one tenant's month: 720 hours × 5 SKUs × 6 meters = 21,600
// rows with collector-like decimals (up to 9 places).
func benchInput(tb testing.TB) pricing.Input {
	tb.Helper()
	book, err := pricing.ParseBook([]byte(benchBook))
	if err != nil {
		tb.Fatal(err)
	}
	contract, err := pricing.ParseContract([]byte(benchContract))
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	usage := make([]pricing.Usage, 0, 720*5*6)
	for h := range 720 {
		hour := start.Add(time.Duration(h) * time.Hour)
		for s, sku := range book.SKUs() {
			for m, meter := range pricing.Meters() {
				// Vary quantities by hour so coverage, burst and tiers all
				// take both branches.
				q := decimal.New(int64((h*7919+s*104729+m*1299709)%9000000+1), -6)
				if meter == pricing.GPUHours {
					q = decimal.New(int64((h*31+s*17)%7+1)*428571429, -9)
				}
				usage = append(usage, pricing.Usage{Hour: hour, SKU: sku, Meter: meter, Quantity: q})
			}
		}
	}
	return pricing.Input{Tenant: "bench", Start: start, End: start.Add(720 * time.Hour), Usage: usage, Contract: contract, Book: book}
}

// BenchmarkPriceMonth prices one tenant-month. Tenants are independent, so
// 10,000 tenants take 10,000 × ns/op on one core, divided by the cores used.
func BenchmarkPriceMonth(b *testing.B) {
	in := benchInput(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := pricing.Price(in); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	perOp := b.Elapsed() / time.Duration(b.N)
	b.Logf("rows per tenant: %d; 10,000 tenants on one core ≈ %v", len(in.Usage), perOp*10000)
}

// BenchmarkPriceMonthParallel prices tenant-months on all GOMAXPROCS cores
// sharing one book, as an invoice run does.
func BenchmarkPriceMonthParallel(b *testing.B) {
	in := benchInput(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := pricing.Price(in); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
