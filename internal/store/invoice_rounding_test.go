package store_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
)

// The demo's customer that could never be invoiced: 24 hourly rows of
// 1,825 GPU-seconds on the demo's book (2.49 per H100 GPU-hour) come to
// 30.2949999…, stored as 30.295000000. The run, dry or not, invoices it
// at 30.30, and the stored line says the same in both columns.
func TestInvoiceRunLineOnAHalfCent(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	from := time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	samples := usageHours(from, from.Add(24*time.Hour), "halfcent", "research", "H100-SXM5-80GB", "H100-SXM5-80GB", "", 1,
		meter.Values{GPUMicroseconds: 1_825_000_000})
	insertRolledUp(t, s, samples)
	customers := gpucloudCustomers(billing.Customer{Tenant: "halfcent", Department: "research", Name: "Half Cent", Currency: "USD",
		TimeZone: "UTC", Book: "../demo/billing/cloud-book.yaml"})
	runner := billing.NewRunner(s, customers, testLease, time.Now, slog.New(slog.DiscardHandler))
	for _, req := range []billing.RunRequest{{Period: "2026-11", DryRun: true}, {Period: "2026-11"}} {
		rep, err := runner.Run(ctx, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Failed() != 0 || len(rep.Outcomes) != 1 {
			t.Fatalf("dry run %v: %v", req.DryRun, rep.Outcomes)
		}
		inv := rep.Outcomes[0].Invoice
		if len(inv.Lines) != 1 || inv.Lines[0].AmountMinor != 3030 || inv.TotalMinor != 3030 || inv.Lines[0].Amount.String() != "30.295" {
			t.Errorf("dry run %v: lines %+v, total %d; want one line of 30.295000000, 30.30", req.DryRun, inv.Lines, inv.TotalMinor)
		}
	}
	// The stored line: Decimal(38, 9) and minor units agree, and the
	// stored document reads back valid.
	n, err := s.CountForTest(ctx, "SELECT count() FROM invoice_lines WHERE tenant = 'halfcent' AND amount = toDecimal128('30.295', 9) AND amount_minor = 3030")
	if err != nil || n != 1 {
		t.Errorf("stored lines of 30.295000000 and 3030 minor units: %d, %v", n, err)
	}
	stored, err := s.Invoices(ctx, "gpucloud")
	if err != nil || len(stored) != 1 {
		t.Fatalf("stored %d invoices, %v", len(stored), err)
	}
	if err := stored[0].Invoice.Validate(); err != nil || stored[0].Invoice.Status != billing.StatusFinalized {
		t.Errorf("stored invoice %s: %v", stored[0].Invoice.Status, err)
	}
	// Run again: nothing to do, nothing failed.
	rep, err := runner.Run(ctx, billing.RunRequest{Period: "2026-11"}, nil)
	if err != nil || rep.Failed() != 0 || rep.Outcomes[0].Action != billing.ActionUnchanged {
		t.Errorf("re-run: %v, %v", rep.Outcomes, err)
	}
}
