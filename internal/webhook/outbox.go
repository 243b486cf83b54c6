package webhook

import (
	"context"
	"errors"
	"sync"
	"time"
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
		statuses, err := box.Events(ctx, s.now().Add(-outboxWindow))
		if err != nil && ctx.Err() == nil {
			s.logger.Warn("read webhook outbox", "err", err)
		}
		for _, ep := range s.cfg.Endpoints {
			mu.Lock()
			if busy[ep.Name] {
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
