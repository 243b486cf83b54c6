package webhook

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/fault"
)

// memOutbox is an outbox in memory that records what was asked of it.
type memOutbox struct {
	events []Event
	since  time.Time
	err    error
}

func (m *memOutbox) EventsOfType(_ context.Context, typ string, since time.Time) ([]Event, error) {
	m.since = since
	var out []Event
	for _, ev := range m.events {
		if ev.Type == typ && !ev.CreatedAt.Before(since) {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (m *memOutbox) SaveEvents(_ context.Context, evs []Event) error {
	if m.err != nil {
		return m.err
	}
	m.events = append(m.events, evs...)
	return nil
}

func finalizedInvoice(id, number string, at time.Time) *billing.Invoice {
	return &billing.Invoice{ID: id, Number: number, Status: billing.StatusFinalized, Tenant: "acme", PeriodLabel: "2026-11",
		Issuer: billing.Party{ID: "gc"}, FinalizedAt: &at}
}

// AnnounceFinalized writes each finalized invoice's event once: not for
// drafts, not again for an invoice whose event is there (under its own
// id, or under a random id written before ids followed the invoice).
func TestAnnounceFinalizedWritesEachInvoiceOnce(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	a, b := finalizedInvoice("acme/2026-11/1", "GC-000001", at), finalizedInvoice("globex/2026-11/1", "GC-000002", at.Add(time.Hour))
	draft := &billing.Invoice{ID: "initech/2026-11/1", Status: billing.StatusDraft}
	legacy, err := NewEvent(TypeInvoiceFinalized, at.Add(time.Minute), map[string]any{"invoice_id": b.ID, "number": b.Number})
	if err != nil {
		t.Fatal(err)
	}
	box := &memOutbox{events: []Event{legacy}}

	n, err := AnnounceFinalized(ctx, box, []*billing.Invoice{a, b, draft}, at.Add(48*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("first: wrote %d, %v; want acme's event only", n, err)
	}
	want, _ := InvoiceFinalized(a, at)
	if len(box.events) != 2 || box.events[1].ID != want.ID || box.events[1].Type != TypeInvoiceFinalized {
		t.Fatalf("outbox %+v, want the legacy event and %s", box.events, want.ID)
	}
	if !box.since.Equal(at.Add(-announceSlack)) {
		t.Errorf("looked for events since %s, want a day before the earliest finalization", box.since)
	}
	if n, err := AnnounceFinalized(ctx, box, []*billing.Invoice{a, b, draft}, at.Add(72*time.Hour)); err != nil || n != 0 || len(box.events) != 2 {
		t.Errorf("again: wrote %d (%d in the outbox), %v; want nothing new", n, len(box.events), err)
	}
	if n, err := AnnounceFinalized(ctx, box, []*billing.Invoice{draft}, at); err != nil || n != 0 {
		t.Errorf("drafts only: wrote %d, %v", n, err)
	}

	// The event's id follows from the invoice, so two writes of it are one
	// event wherever the outbox merges by id.
	e1, _ := InvoiceFinalized(a, at)
	e2, _ := InvoiceFinalized(a, at.Add(time.Hour))
	other, _ := InvoiceFinalized(b, at)
	if e1.ID != e2.ID || e1.ID == other.ID {
		t.Errorf("ids %s, %s (same invoice) and %s (another)", e1.ID, e2.ID, other.ID)
	}

	failing := &memOutbox{err: errors.New("outbox down")}
	if _, err := AnnounceFinalized(ctx, failing, []*billing.Invoice{a}, at); err == nil {
		t.Error("a failed outbox write was not reported")
	}
}

func TestDeliveriesNameEachWantingEndpointsState(t *testing.T) {
	c := Config{MaxAttempts: 2, Endpoints: []Endpoint{
		{Name: "ok"}, {Name: "down"}, {Name: "new"}, {Name: "other", Events: []string{TypeQuotaCrossed}},
	}}
	st := Status{Event: Event{Type: TypeInvoiceFinalized}, Attempts: map[string][]Attempt{
		"ok":   {{Status: 500}, {Status: 200}},
		"down": {{Status: 500}, {Status: 502}},
		"new":  {{Status: 503}},
	}}
	got := c.Deliveries(st)
	want := []Delivery{{"ok", "delivered", 2}, {"down", "failed", 2}, {"new", "pending", 1}}
	if !slices.Equal(got, want) {
		t.Errorf("Deliveries = %v, want %v", got, want)
	}
}

type listedOutbox []Status

func (l listedOutbox) Events(context.Context, time.Time) ([]Status, error) { return l, nil }

func TestReplaySendsToTheEndpointsThatWantIt(t *testing.T) {
	var mu sync.Mutex
	got := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.URL.Path]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.Endpoints = []Endpoint{{Name: "erp", URL: srv.URL + "/erp"}, {Name: "quota", URL: srv.URL + "/quota", Events: []string{TypeQuotaCrossed}}}
	ev, err := NewEvent(TypeInvoiceFinalized, time.Now(), map[string]string{"number": "GC-000001"})
	if err != nil {
		t.Fatal(err)
	}
	outbox := listedOutbox{{Event: ev, Attempts: map[string][]Attempt{"erp": {{N: 1, Status: 204}}}}}
	rec := &memRecorder{}
	s := NewSender(cfg, rec, slog.New(slog.DiscardHandler))
	sent, err := s.Replay(context.Background(), outbox, ev.ID, "")
	if err != nil || len(sent) != 1 || sent[0].Endpoint != "erp" || sent[0].N != 2 || got["/erp"] != 1 || got["/quota"] != 0 {
		t.Fatalf("sent %+v, %v; receiver got %v", sent, err, got)
	}
	if len(rec.attempts) != 1 {
		t.Errorf("recorded %+v", rec.attempts)
	}
	// --endpoint sends even where the type is not wanted.
	if sent, err := s.Replay(context.Background(), outbox, ev.ID, "quota"); err != nil || len(sent) != 1 || got["/quota"] != 1 {
		t.Errorf("only quota: %+v, %v", sent, err)
	}
	if _, err := s.Replay(context.Background(), outbox, "evt_nosuch", ""); !fault.IsNotFound(err) {
		t.Errorf("an unknown event: %v", err)
	}
	if _, err := s.Replay(context.Background(), outbox, ev.ID, "nobody"); !fault.IsValidation(err) {
		t.Errorf("an unknown endpoint: %v", err)
	}
}
