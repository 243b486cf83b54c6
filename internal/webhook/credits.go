package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/credits"
)

// creditTypes maps a credit notice to its event type.
var creditTypes = map[credits.NoticeKind]string{
	credits.NoticeThreshold: TypeCreditsThreshold,
	credits.NoticeDepleted:  TypeCreditsDepleted,
	credits.NoticeExpiring:  TypeCreditsExpiring,
}

// CreditNotice is the event of a credit notice. Its id follows from the
// notice's key (type, tenant, grant and threshold, or pool and the grant
// that refilled it last), so the same notice found by two job runs, or
// two replicas, is one event.
func CreditNotice(n credits.Notice, at time.Time) (Event, error) {
	typ, ok := creditTypes[n.Kind]
	if !ok {
		return Event{}, fmt.Errorf("credit notice %q: unknown kind", n.Kind)
	}
	g := n.Grant
	data := map[string]any{"tenant": n.Tenant, "settlement": n.Settlement, "at": n.AsOf.UTC()}
	unit := func() {
		if g.Money() {
			data["currency"] = g.Currency
			return
		}
		data["meter"] = g.Meter
		if g.SKUClass != "" {
			data["sku_class"] = g.SKUClass
		}
	}
	grant := func() {
		data["grant_id"], data["kind"] = g.ID, g.Kind
		data["granted"], data["remaining"] = n.Granted.String(), n.Remaining.String()
		data["effective_at"] = g.EffectiveAt.UTC()
		if !g.ExpiresAt.IsZero() {
			data["expires_at"] = g.ExpiresAt.UTC()
		}
		if g.Series != "" {
			data["series"] = g.Series
		}
		unit()
	}
	switch n.Kind {
	case credits.NoticeThreshold:
		grant()
		data["threshold"] = n.Threshold
	case credits.NoticeExpiring:
		grant()
		data["expiring"] = n.Expiring.String()
		if g.RolloverCap != nil {
			data["rollover_cap"] = g.RolloverCap.String()
		}
	case credits.NoticeDepleted:
		data["pool"], data["last_grant_id"], data["action"] = n.Pool, g.ID, n.Action
		unit()
	}
	ev, err := NewEvent(typ, at, data)
	if err != nil {
		return Event{}, err
	}
	sum := sha256.Sum256([]byte(typ + "\x00" + n.Key))
	ev.ID = "evt_credits_" + hex.EncodeToString(sum[:12])
	return ev, nil
}

// CreditNotices puts the credit notices the outbox lacks in it, and says
// how many it wrote. The outbox merges rows of one event id only within a
// month's partition, so the events already there are looked up first: a
// notice found again by a later run, even months later, writes nothing.
// An event about a grant is never older than the grant (its effective or
// creation time, less a day for clocks that disagree), which bounds the
// lookup. The credit job runs under a lease, so no two publish at once.
func (p *Publisher) CreditNotices(ctx context.Context, ns []credits.Notice) (int, error) {
	fresh, err := p.unpublished(ctx, ns)
	if err != nil || len(fresh) == 0 {
		return 0, err
	}
	if err := p.box.SaveEvents(ctx, fresh); err != nil {
		return 0, fmt.Errorf("announce credit notices: %w", err)
	}
	return len(fresh), nil
}

// UnpublishedCreditNotices says how many of the credit notices the outbox
// lacks, what CreditNotices would write now; it writes nothing. The credit
// job asks before it takes its lease, and takes none when there are none.
func (p *Publisher) UnpublishedCreditNotices(ctx context.Context, ns []credits.Notice) (int, error) {
	fresh, err := p.unpublished(ctx, ns)
	return len(fresh), err
}

// unpublished are the events of the notices the outbox lacks, each once.
func (p *Publisher) unpublished(ctx context.Context, ns []credits.Notice) ([]Event, error) {
	if len(ns) == 0 {
		return nil, nil
	}
	now := p.now()
	evs := make([]Event, 0, len(ns))
	since := map[string]time.Time{}
	for _, n := range ns {
		ev, err := CreditNotice(n, now)
		if err != nil {
			return nil, fmt.Errorf("announce credit notices: %w", err)
		}
		evs = append(evs, ev)
		from := n.Grant.EffectiveAt
		if n.Grant.CreatedAt.Before(from) {
			from = n.Grant.CreatedAt
		}
		if s, ok := since[ev.Type]; !ok || from.Before(s) {
			since[ev.Type] = from
		}
	}
	seen := map[string]bool{}
	for typ, from := range since {
		have, err := p.box.EventsOfType(ctx, typ, from.Add(-announceSlack))
		if err != nil {
			return nil, fmt.Errorf("announce credit notices: %w", err)
		}
		for _, ev := range have {
			seen[ev.ID] = true
		}
	}
	var fresh []Event
	for _, ev := range evs {
		if !seen[ev.ID] {
			seen[ev.ID] = true
			fresh = append(fresh, ev)
		}
	}
	return fresh, nil
}

var _ credits.NoticePublisher = (*Publisher)(nil)
