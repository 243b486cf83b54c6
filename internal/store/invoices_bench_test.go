package store_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
)

// BenchmarkInvoiceRun1000Tenants invoices a month of hourly rollups for
// 1,000 customers (two SKUs each, half in Europe/Berlin, every tenth
// with a reservation contract): read, price, build, number and store
// every invoice under the lease. Each iteration bills for an issuer of
// its own, so every run does the whole work. Reports seconds per run.
func BenchmarkInvoiceRun1000Tenants(b *testing.B) {
	const tenants = 1000
	ctx := context.Background()
	s := storetest.New(b)
	logger := slog.New(slog.DiscardHandler)
	dir := b.TempDir()
	book := filepath.Join(dir, "book.yaml")
	if err := os.WriteFile(book, []byte(invoiceTestBook), 0o644); err != nil {
		b.Fatal(err)
	}
	from := time.Date(2026, 9, 30, 22, 0, 0, 0, time.UTC)
	to := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	chunk := make([]collectors.Sample, 0, 100_000)
	for h := from; h.Before(to); h = h.Add(time.Hour) {
		for i := range tenants {
			tenant := fmt.Sprintf("tenant-%04d", i)
			for k, sku := range []string{"H100-SXM5-80GB", "A100-SXM4-80GB"} {
				x := collectors.Sample{Host: "h", GPUUUID: fmt.Sprintf("GPU-%04d-%d", i, k), GPUModel: sku, SKU: sku,
					Tenant: tenant, Department: fmt.Sprintf("dept-%d", i%7), Workload: "w", Start: h, End: h.Add(time.Hour),
					Values: meter.Values{GPUMicroseconds: uint64(1+i%3) * 1_200_000_000, EnergyMillijoules: 2_000_000_000}}
				x.ID = collectors.SampleID(x.Host, x.GPUUUID, x.Tenant, x.Workload, x.Start)
				chunk = append(chunk, x)
			}
		}
		if len(chunk) >= 98_000 {
			if err := s.InsertSamples(ctx, chunk); err != nil {
				b.Fatal(err)
			}
			chunk = chunk[:0]
		}
	}
	if err := s.InsertSamples(ctx, chunk); err != nil {
		b.Fatal(err)
	}
	if err := s.RollupRange(ctx, from, to, 1); err != nil {
		b.Fatal(err)
	}
	if _, err := rollup.New(s, rollup.DefaultConfig(), time.Now, logger).Run(ctx); err != nil {
		b.Fatal(err)
	}
	var customers []billing.Customer
	for i := range tenants {
		c := billing.Customer{Tenant: fmt.Sprintf("tenant-%04d", i), Department: fmt.Sprintf("dept-%d", i%7), Name: fmt.Sprintf("Tenant %d", i),
			Currency: "USD", TimeZone: "UTC", TaxRate: decimal.NewFromInt(int64(i % 20)), Book: book}
		if i%2 == 1 {
			c.TimeZone = "Europe/Berlin"
		}
		if i%10 == 0 {
			c.Contract = filepath.Join(dir, c.Tenant+".yaml")
			body := strings.Replace(invoiceTestContract, "tenant: acme", "tenant: "+c.Tenant, 1)
			if err := os.WriteFile(c.Contract, []byte(body), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		customers = append(customers, c)
	}
	lease := billing.LeaseConfig{TTL: time.Minute, Settle: 2 * time.Second, Retry: 200 * time.Millisecond}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		cs := billing.Customers{Issuer: billing.Issuer{ID: fmt.Sprintf("bench-%d", n), Name: "Bench"},
			Schedule: billing.DefaultInvoiceSchedule, Customers: customers}
		rep, err := billing.NewRunner(s, cs, lease, time.Now, logger).Run(ctx, billing.RunRequest{Period: "2026-10"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range rep.Outcomes {
			if o.Action != billing.ActionFinalized {
				b.Fatalf("%s", o)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
}
