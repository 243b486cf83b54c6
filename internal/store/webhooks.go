package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/webhook"
)

// The statements of this file (internal/chdbcheck runs them on chDB too).
const (
	insertEventSQL   = "INSERT INTO webhook_events (event_id, type, created_at, body)"
	insertAttemptSQL = "INSERT INTO webhook_attempts (event_id, endpoint, attempt, at, status, error, duration_ms)"
	// eventsSQL and attemptsSQL take the time the listing starts at.
	eventsSQL = "SELECT body FROM webhook_events FINAL WHERE created_at >= ? ORDER BY created_at, event_id"
	// eventsOfTypeSQL takes the type and the time the listing starts at.
	eventsOfTypeSQL = "SELECT body FROM webhook_events FINAL WHERE type = ? AND created_at >= ? ORDER BY created_at, event_id"
	attemptsSQL     = "SELECT event_id, endpoint, attempt, at, status, error, duration_ms FROM webhook_attempts" +
		" WHERE at >= ? ORDER BY event_id, endpoint, attempt"
)

// eventRow is ev's row of insertEventSQL: the body is the whole event.
func eventRow(ev webhook.Event) ([]any, error) {
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("save event %s: %w", ev.ID, err)
	}
	return []any{ev.ID, ev.Type, ev.CreatedAt.UTC(), string(body)}, nil
}

// attemptRow is a's row of insertAttemptSQL.
func attemptRow(a webhook.Attempt) []any {
	return []any{a.EventID, a.Endpoint, uint32(a.N), a.At.UTC(), uint16(a.Status), a.Error, uint32(a.Duration.Milliseconds())}
}

// SaveEvents puts events in the outbox.
func (s *Store) SaveEvents(ctx context.Context, evs []webhook.Event) error {
	if len(evs) == 0 {
		return nil
	}
	rows := make([][]any, len(evs))
	for i, ev := range evs {
		row, err := eventRow(ev)
		if err != nil {
			return err
		}
		rows[i] = row
	}
	return s.insert(ctx, "save events", insertEventSQL, rows, func(i int) string { return "save event " + evs[i].ID })
}

// RecordAttempt records one delivery attempt.
func (s *Store) RecordAttempt(ctx context.Context, a webhook.Attempt) error {
	return s.insert(ctx, "record attempt", insertAttemptSQL, [][]any{attemptRow(a)}, nil)
}

// EventsOfType lists the outbox's events of one type created since a
// time, oldest first, without their attempts.
func (s *Store) EventsOfType(ctx context.Context, typ string, since time.Time) ([]webhook.Event, error) {
	return s.readEvents(ctx, eventsOfTypeSQL, typ, since.UTC())
}

// readEvents reads the events a query of event bodies lists.
func (s *Store) readEvents(ctx context.Context, sql string, args ...any) ([]webhook.Event, error) {
	return queryAll(ctx, s, "read events", sql, args, func(scan scanFunc) (webhook.Event, error) {
		var body string
		var ev webhook.Event
		if err := scan(&body); err != nil {
			return ev, err
		}
		if err := json.Unmarshal([]byte(body), &ev); err != nil {
			return ev, fmt.Errorf("read events: %w", err)
		}
		return ev, nil
	})
}

// Events lists the outbox since a time, oldest first, with attempts.
func (s *Store) Events(ctx context.Context, since time.Time) ([]webhook.Status, error) {
	evs, err := s.readEvents(ctx, eventsSQL, since.UTC())
	if err != nil {
		return nil, err
	}
	var out []webhook.Status
	index := map[string]int{}
	for _, ev := range evs {
		index[ev.ID] = len(out)
		out = append(out, webhook.Status{Event: ev, Attempts: map[string][]webhook.Attempt{}})
	}
	if len(out) == 0 {
		return out, nil
	}
	err = s.eachRow(ctx, "read attempts", attemptsSQL, []any{since.UTC()}, func(scan scanFunc) error {
		var a webhook.Attempt
		var n uint32
		var status uint16
		var ms uint32
		if err := scan(&a.EventID, &a.Endpoint, &n, &a.At, &status, &a.Error, &ms); err != nil {
			return err
		}
		a.N, a.Status, a.Duration, a.At = int(n), int(status), time.Duration(ms)*time.Millisecond, a.At.UTC()
		if i, ok := index[a.EventID]; ok {
			out[i].Attempts[a.Endpoint] = append(out[i].Attempts[a.Endpoint], a)
		}
		return nil
	})
	return out, err
}
