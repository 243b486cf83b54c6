package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// creditJobRig is the credit job as serve builds it (newCreditJob: the
// credits lease, then the job) over a fresh database with three billing
// customers, each with an H100 busy for the last 48 hours (rolled up but
// for the open hours), and no grant.
type creditJobRig struct {
	store *store.Store
	svc   *credits.Service
	run   func(context.Context) (credits.JobReport, error)
}

func newCreditJobRig(tb testing.TB) *creditJobRig {
	tb.Helper()
	ctx := context.Background()
	s := storetest.New(tb)
	logger := slog.New(slog.DiscardHandler)
	book := filepath.Join(tb.TempDir(), "book.yaml")
	if err := os.WriteFile(book, []byte(invoiceCLIBook), 0o644); err != nil {
		tb.Fatal(err)
	}
	tenants := []string{"alpha", "beta", "gamma"}
	customers := billing.Customers{Issuer: billing.Issuer{ID: "gc", Name: "GPU Cloud GmbH"}, Schedule: billing.DefaultInvoiceSchedule}
	for _, tenant := range tenants {
		customers.Customers = append(customers.Customers, billing.Customer{Tenant: tenant, Name: tenant, Currency: "EUR", TimeZone: "UTC", Book: book})
	}
	creditCustomers, err := customers.CreditCustomers()
	if err != nil {
		tb.Fatal(err)
	}
	var samples []collectors.Sample
	now := time.Now().UTC().Truncate(time.Hour)
	for h := now.Add(-48 * time.Hour); h.Before(now); h = h.Add(time.Hour) {
		for i, tenant := range tenants {
			smp := collectors.Sample{Host: "h1", GPUUUID: fmt.Sprintf("GPU-%d", i), GPUModel: "H100-SXM5-80GB", SKU: "H100-SXM5-80GB",
				Tenant: tenant, Workload: "w", Start: h, End: h.Add(time.Hour), Values: meter.Values{GPUMicroseconds: 3_600_000_000}}
			smp.ID = collectors.SampleID(smp.Host, smp.GPUUUID, smp.Tenant, smp.Workload, smp.Start)
			samples = append(samples, smp)
		}
	}
	if err := s.InsertSamples(ctx, samples); err != nil {
		tb.Fatal(err)
	}
	if _, err := rollup.New(s, rollup.DefaultConfig(), time.Now, logger).Run(ctx); err != nil {
		tb.Fatal(err)
	}
	svc := credits.NewService(s, usage.New(s, customers, time.Now), creditCustomers, time.Now)
	return &creditJobRig{store: s, svc: svc, run: newCreditJob(svc, credits.DefaultSettings(), s, logger)}
}

// grantEach gives every customer a prepaid credit of 1,000 EUR from the
// start of yesterday (a balance far above every threshold: no notice).
func (r *creditJobRig) grantEach(tb testing.TB) {
	tb.Helper()
	from := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	for _, c := range r.svc.Customers() {
		if _, err := r.svc.Grant(context.Background(), credits.Grant{Tenant: c.Tenant, Kind: credits.Prepaid,
			Amount: decimal.NewFromInt(1000), EffectiveAt: from}); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkCreditJobRun times one run of the credit job as serve runs
// it, lease included: with an empty ledger; with one grant for each of
// the three customers and no notice due; and with a notice due besides
// (credits.expiring), published by a run before the timer starts.
func BenchmarkCreditJobRun(b *testing.B) {
	for _, ledger := range []string{"empty", "3 grants", "3 grants, 1 notice published"} {
		b.Run(ledger, func(b *testing.B) {
			ctx := context.Background()
			rig := newCreditJobRig(b)
			want := credits.JobReport{Customers: 3}
			if ledger != "empty" {
				rig.grantEach(b)
			}
			if ledger == "3 grants, 1 notice published" {
				rig.expiringGrant(b)
				if rep, err := rig.run(ctx); err != nil || rep.Published != 1 {
					b.Fatalf("first run: %+v, %v", rep, err)
				}
				want.Due = 1
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if rep, err := rig.run(ctx); err != nil || rep != want {
					b.Fatalf("run: %+v, %v; want %+v", rep, err, want)
				}
			}
		})
	}
}

// expiringGrant gives beta a promotional credit expiring in two days:
// credits.expiring is due.
func (r *creditJobRig) expiringGrant(tb testing.TB) {
	tb.Helper()
	if _, err := r.svc.Grant(context.Background(), credits.Grant{Tenant: "beta", Kind: credits.Promotional, Amount: decimal.NewFromInt(5000),
		ExpiresAt: time.Now().UTC().AddDate(0, 0, 2)}); err != nil {
		tb.Fatal(err)
	}
}

// The credits lease (whose settle delay was most of a run: 3 s) is taken
// only by a run with something to write: not over a ledger without
// grants, nor over grants whose notices are all in the outbox; a run with
// a notice to publish takes it and releases it, so replicas stay apart
// where there is work.
func TestCreditJobTakesTheLeaseOnlyToWrite(t *testing.T) {
	ctx := context.Background()
	rig := newCreditJobRig(t)
	claims := func() []billing.Claim {
		t.Helper()
		cs, _, err := rig.store.LeaseClaims(ctx, creditLease)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	rep, err := rig.run(ctx)
	if err != nil || rep != (credits.JobReport{Customers: 3}) {
		t.Fatalf("empty ledger: %+v, %v; want 3 customers read, nothing else", rep, err)
	}
	if cs := claims(); len(cs) != 0 {
		t.Fatalf("empty ledger: lease claims %+v; want none", cs)
	}
	rig.grantEach(t)
	if rep, err := rig.run(ctx); err != nil || rep != (credits.JobReport{Customers: 3}) {
		t.Fatalf("grants, no notice due: %+v, %v", rep, err)
	}
	if cs := claims(); len(cs) != 0 {
		t.Fatalf("grants, no notice due: lease claims %+v; want none", cs)
	}
	rig.expiringGrant(t)
	want := credits.JobReport{Customers: 3, Due: 1, Published: 1}
	if rep, err := rig.run(ctx); err != nil || rep != want {
		t.Fatalf("credits.expiring due: %+v, %v; want %+v", rep, err, want)
	}
	if cs := claims(); len(cs) != 1 || !cs[0].Released {
		t.Fatalf("credits.expiring due: lease claims %+v; want one, released", cs)
	}
	want.Published = 0
	if rep, err := rig.run(ctx); err != nil || rep != want {
		t.Fatalf("credits.expiring published: %+v, %v; want %+v", rep, err, want)
	}
	if cs := claims(); len(cs) != 1 {
		t.Errorf("credits.expiring published: lease claims %+v; want still the one", cs)
	}
}
