package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/fault"
)

// Status is an outbox event with its attempts per endpoint.
type Status struct {
	Event    Event
	Attempts map[string][]Attempt // endpoint name → attempts in order
}

// Delivered says whether the event reached the endpoint.
func (s Status) Delivered(endpoint string) bool {
	for _, a := range s.Attempts[endpoint] {
		if a.Delivered() {
			return true
		}
	}
	return false
}

// Outbox is where events wait (ClickHouse in serve).
type Outbox interface {
	Events(ctx context.Context, since time.Time) ([]Status, error)
	Recorder
}

// outboxWindow is how far back the dispatcher looks for undelivered events.
const outboxWindow = 7 * 24 * time.Hour

// Run delivers the outbox until ctx ends: every Poll it finds events an
// endpoint wants and has neither received nor exhausted its attempts on,
// and sends them, one endpoint's in order, endpoints side by side. An
// event whose attempts ran out waits for `gpumeter webhooks replay`.
func (s *Sender) Run(ctx context.Context, box Outbox) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	busy := map[string]bool{}
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	for {
		// Only endpoints idle before the outbox is read are served from
		// that read: one whose sending ended during it would find attempts
		// it just recorded missing, and send those events again.
		idle := map[string]bool{}
		mu.Lock()
		for _, ep := range s.cfg.Endpoints {
			idle[ep.Name] = !busy[ep.Name]
		}
		mu.Unlock()
		statuses, err := box.Events(ctx, s.now().Add(-outboxWindow))
		if err != nil && ctx.Err() == nil {
			s.logger.Warn("read webhook outbox", "err", err)
		}
		for _, ep := range s.cfg.Endpoints {
			mu.Lock()
			if !idle[ep.Name] || busy[ep.Name] {
				mu.Unlock()
				continue
			}
			var todo []Status
			for _, st := range statuses {
				if ep.Wants(st.Event.Type) && !st.Delivered(ep.Name) && len(st.Attempts[ep.Name]) < s.cfg.MaxAttempts {
					todo = append(todo, st)
				}
			}
			if len(todo) == 0 {
				mu.Unlock()
				continue
			}
			busy[ep.Name] = true
			mu.Unlock()
			wg.Add(1)
			go func(ep Endpoint, todo []Status) {
				defer wg.Done()
				defer func() { mu.Lock(); busy[ep.Name] = false; mu.Unlock() }()
				for _, st := range todo {
					made := len(st.Attempts[ep.Name])
					if _, err := s.Deliver(ctx, ep, st.Event, made+1, s.cfg.MaxAttempts-made); err != nil {
						if errors.Is(err, context.Canceled) {
							return
						}
						s.logger.Error("webhook not delivered; replay it with gpumeter webhooks replay", "event", st.Event.ID, "endpoint", ep, "err", err)
					}
				}
			}(ep, todo)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// InvoiceOutbox is what AnnounceFinalized needs of the outbox.
type InvoiceOutbox interface {
	// EventsOfType lists the outbox's events of one type created since a time.
	EventsOfType(ctx context.Context, typ string, since time.Time) ([]Event, error)
	SaveEvents(ctx context.Context, evs []Event) error
}

// announceSlack is how long before an invoice's finalization its event is
// looked for: events are written after the invoice, by clocks that may
// disagree a little.
const announceSlack = 24 * time.Hour

// AnnounceFinalized puts an invoice.finalized event in the outbox for
// each finalized invoice of invs that has none there yet, and returns how
// many it wrote. An invoice's event is found by its id (InvoiceFinalized)
// or, for events written before ids followed the invoice, by the invoice
// id and number it carries. Every invoice run calls it with each invoice
// it finds finalized, so a run cut short between storing invoices and
// writing their events is repaired by the next, and a repeated run adds
// nothing. Callers hold the issuer's billing lease, so no two announce at
// once.
func AnnounceFinalized(ctx context.Context, box InvoiceOutbox, invs []*billing.Invoice, now time.Time) (int, error) {
	var since time.Time
	var final []*billing.Invoice
	for _, inv := range invs {
		if inv.Status != billing.StatusFinalized {
			continue
		}
		final = append(final, inv)
		at := now
		if inv.FinalizedAt != nil {
			at = *inv.FinalizedAt
		}
		if since.IsZero() || at.Before(since) {
			since = at
		}
	}
	if len(final) == 0 {
		return 0, nil
	}
	have, err := box.EventsOfType(ctx, TypeInvoiceFinalized, since.Add(-announceSlack))
	if err != nil {
		return 0, fmt.Errorf("announce finalized invoices: %w", err)
	}
	seen := map[string]bool{}
	for _, ev := range have {
		seen[ev.ID] = true
		var d struct {
			InvoiceID string `json:"invoice_id"`
			Number    string `json:"number"`
		}
		if json.Unmarshal(ev.Data, &d) == nil && d.InvoiceID != "" {
			seen[d.InvoiceID+"\x00"+d.Number] = true
		}
	}
	var evs []Event
	for _, inv := range final {
		ev, err := InvoiceFinalized(inv, now)
		if err != nil {
			return 0, err
		}
		if seen[ev.ID] || seen[inv.ID+"\x00"+inv.Number] {
			continue
		}
		seen[ev.ID] = true
		evs = append(evs, ev)
	}
	if err := box.SaveEvents(ctx, evs); err != nil {
		return 0, fmt.Errorf("announce finalized invoices: %w", err)
	}
	return len(evs), nil
}

// Delivery is where an event stands with one endpoint that wants it.
type Delivery struct {
	Endpoint string `json:"endpoint"`
	State    string `json:"state"` // delivered, failed (attempts exhausted: replay it) or pending
	Attempts int    `json:"attempts"`
}

// Deliveries are the event's states at every configured endpoint that
// wants its type, in the config's order.
func (c Config) Deliveries(st Status) []Delivery {
	var out []Delivery
	for _, ep := range c.Endpoints {
		if !ep.Wants(st.Event.Type) {
			continue
		}
		d := Delivery{Endpoint: ep.Name, State: "pending", Attempts: len(st.Attempts[ep.Name])}
		switch {
		case st.Delivered(ep.Name):
			d.State = "delivered"
		case d.Attempts >= c.MaxAttempts:
			d.State = "failed"
		}
		out = append(out, d)
	}
	return out
}

// EventLister lists the outbox (the store meets it).
type EventLister interface {
	Events(ctx context.Context, since time.Time) ([]Status, error)
}

// Replay sends the event id of the last year's outbox again now, to every
// configured endpoint that wants its type, or only to the endpoint named
// only, recording each attempt; it returns the last attempt per endpoint.
// An event not in the outbox is fault.NotFound, no endpoint to send it to
// fault.Validation.
func (s *Sender) Replay(ctx context.Context, outbox EventLister, id, only string) ([]Attempt, error) {
	evs, err := outbox.Events(ctx, s.now().AddDate(-1, 0, 0))
	if err != nil {
		return nil, err
	}
	var st *Status
	for i := range evs {
		if evs[i].Event.ID == id {
			st = &evs[i]
		}
	}
	if st == nil {
		return nil, fault.NotFoundf("event %q: not in the outbox of the last year", id)
	}
	var sent []Attempt
	for _, ep := range s.cfg.Endpoints {
		if (only != "" && ep.Name != only) || (only == "" && !ep.Wants(st.Event.Type)) {
			continue
		}
		last, err := s.Deliver(ctx, ep, st.Event, len(st.Attempts[ep.Name])+1, s.cfg.MaxAttempts)
		if err != nil {
			return sent, err
		}
		sent = append(sent, last)
	}
	if len(sent) == 0 {
		return nil, fault.Validationf("no endpoint to replay %s to (endpoint %q)", id, only)
	}
	return sent, nil
}
