package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/webhook"
)

// errKilled stands for a run killed between storing its invoices and
// writing their events to the outbox.
var errKilled = errors.New("killed before the outbox write")

// A run dies after its invoices are stored and before their
// invoice.finalized events are: the next run of the period, which finds
// them finalized, writes each missing event, exactly once; a third run
// adds no row. The same holds for invoice finalize --period.
func TestInvoiceEventsSurviveARunCutShort(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	logger := slog.New(slog.DiscardHandler)
	book := writeTestBook(t, t.TempDir())
	customers := gpucloudCustomers(
		billing.Customer{Tenant: "acme", Department: "research", Name: "Acme", Currency: "USD", TimeZone: "UTC", Book: book},
		billing.Customer{Tenant: "globex", Department: "research", Name: "Globex", Currency: "USD", TimeZone: "UTC", Book: book},
	)
	from, to := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 9, 3, 0, 0, 0, 0, time.UTC)
	var samples []collectors.Sample
	for _, tenant := range []string{"acme", "globex"} {
		samples = append(samples, usageHours(from, to, tenant, "research", "H100-SXM5-80GB", "H100-SXM5-80GB", "", 1,
			meter.Values{GPUMicroseconds: 1_825_000_000})...)
		samples = append(samples, usageHours(from.AddDate(0, 1, 0), to.AddDate(0, 1, 0), tenant, "research", "H100-SXM5-80GB",
			"H100-SXM5-80GB", "", 1, meter.Values{GPUMicroseconds: 3_600_000_000})...)
	}
	insertRolledUp(t, s, samples)
	runner := billing.NewRunner(s, customers, testLease, time.Now, logger)
	killed := true
	runner.Announce = killable{pub: webhook.NewPublisher(s, time.Now), killed: &killed}
	run := func(period string) billing.Report {
		t.Helper()
		rep, err := runner.Run(ctx, billing.RunRequest{Period: period}, nil)
		if killed != errors.Is(err, errKilled) || (!killed && err != nil) {
			t.Fatalf("run %s (killed %v): %v", period, killed, err)
		}
		return rep
	}

	// September: the run dies after storing both invoices.
	rep := run("2026-09")
	var sep []*billing.Invoice
	for _, o := range rep.Outcomes {
		if o.Action != billing.ActionFinalized {
			t.Fatalf("first run: %s", o)
		}
		sep = append(sep, o.Invoice)
	}
	assertEvents(t, s, nil)
	assertFinalized(t, s, sep)

	// The re-run finds them finalized and writes their events.
	killed = false
	for _, o := range run("2026-09").Outcomes {
		if o.Action != billing.ActionUnchanged {
			t.Errorf("re-run: %s", o)
		}
	}
	assertEvents(t, s, sep)
	rows := eventRows(t, s)
	// A third run adds no row, FINAL or not.
	run("2026-09")
	assertEvents(t, s, sep)
	if n := eventRows(t, s); n != rows {
		t.Errorf("a third run wrote %d event rows more", n-rows)
	}

	// October: drafts, finalized by invoice finalize --period, which dies
	// before the outbox write; finalize --period again makes it good.
	if _, err := runner.Run(ctx, billing.RunRequest{Period: "2026-10", Draft: true}, nil); err != nil {
		t.Fatal(err)
	}
	killed = true
	outs, err := runner.Finalize(ctx, nil, "2026-10")
	if !errors.Is(err, errKilled) || len(outs) != 2 {
		t.Fatalf("finalize: %d outcomes, %v", len(outs), err)
	}
	oct := []*billing.Invoice{outs[0].Invoice, outs[1].Invoice}
	assertEvents(t, s, sep)
	killed = false
	if outs, err := runner.Finalize(ctx, nil, "2026-10"); err != nil || len(outs) != 0 {
		t.Fatalf("finalize again: %v, %v", outs, err)
	}
	all := append(slices.Clone(sep), oct...)
	assertEvents(t, s, all)
	rows = eventRows(t, s)
	run("2026-10")
	assertEvents(t, s, all)
	if n := eventRows(t, s); n != rows {
		t.Errorf("a run after finalize wrote %d event rows more", n-rows)
	}
}

// assertEvents checks that the outbox holds exactly one invoice.finalized
// event per invoice of want, with its number, and none other.
func assertEvents(t *testing.T, s *store.Store, want []*billing.Invoice) {
	t.Helper()
	evs, err := s.EventsOfType(context.Background(), webhook.TypeInvoiceFinalized, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, ev := range evs {
		var d struct {
			InvoiceID string `json:"invoice_id"`
			Number    string `json:"number"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		got[d.InvoiceID+" "+d.Number]++
	}
	for _, inv := range want {
		if n := got[inv.ID+" "+inv.Number]; n != 1 {
			t.Errorf("invoice %s (%s): %d events, want 1", inv.ID, inv.Number, n)
		}
		delete(got, inv.ID+" "+inv.Number)
	}
	for k, n := range got {
		t.Errorf("unexpected event(s) for %s: %d", k, n)
	}
}

// assertFinalized checks that the invoices are stored finalized.
func assertFinalized(t *testing.T, s *store.Store, invs []*billing.Invoice) {
	t.Helper()
	stored, err := s.Invoices(context.Background(), "gpucloud")
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]billing.Status{}
	for _, si := range stored {
		status[si.Invoice.ID] = si.Invoice.Status
	}
	for _, inv := range invs {
		if status[inv.ID] != billing.StatusFinalized {
			t.Errorf("invoice %s is stored %q, want finalized", inv.ID, status[inv.ID])
		}
	}
}

// eventRows counts the outbox's rows, duplicates FINAL would merge included.
func eventRows(t *testing.T, s *store.Store) uint64 {
	t.Helper()
	n, err := s.CountForTest(context.Background(), "SELECT count() FROM webhook_events")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// killable is a Publisher that fails while killed is set, as a process
// killed between storing invoices and announcing them would.
type killable struct {
	pub    *webhook.Publisher
	killed *bool
}

func (k killable) InvoicesFinalized(ctx context.Context, invs []*billing.Invoice) (int, error) {
	if *k.killed {
		return 0, errKilled
	}
	return k.pub.InvoicesFinalized(ctx, invs)
}
