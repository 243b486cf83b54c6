package webhook

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/quota"
)

// Publisher is the one place events are made: domains tell it what
// happened (an invoice finalized, a quota threshold crossed, an anomaly
// found, a credit notice due: credits.go), and it builds each event (type, deterministic id, payload) and
// puts it in the outbox, from where the Sender delivers it. Domains reach
// it through small interfaces of their own.
type Publisher struct {
	box InvoiceOutbox
	now func() time.Time
}

// NewPublisher writes events to box, stamped with now.
func NewPublisher(box InvoiceOutbox, now func() time.Time) *Publisher {
	return &Publisher{box: box, now: now}
}

// InvoicesFinalized announces every finalized invoice of invs that has no
// invoice.finalized event yet (AnnounceFinalized), returning how many.
func (p *Publisher) InvoicesFinalized(ctx context.Context, invs []*billing.Invoice) (int, error) {
	return AnnounceFinalized(ctx, p.box, invs, p.now())
}

// QuotaCrossed announces quota thresholds crossed.
func (p *Publisher) QuotaCrossed(ctx context.Context, cs []quota.Crossing) error {
	return p.save(ctx, "quota crossings", len(cs), func(i int) (Event, error) { return QuotaCrossed(cs[i], p.now()) })
}

// AnomaliesFound announces newly found anomalies. Event ids follow the
// anomaly ids, so announcing one twice (a run cut short and repeated)
// leaves one event in the outbox.
func (p *Publisher) AnomaliesFound(ctx context.Context, as []insights.Anomaly) error {
	return p.save(ctx, "anomalies", len(as), func(i int) (Event, error) { return InsightAnomaly(as[i], p.now()) })
}

func (p *Publisher) save(ctx context.Context, what string, n int, event func(int) (Event, error)) error {
	if n == 0 {
		return nil
	}
	evs := make([]Event, 0, n)
	for i := range n {
		ev, err := event(i)
		if err != nil {
			return fmt.Errorf("announce %s: %w", what, err)
		}
		evs = append(evs, ev)
	}
	if err := p.box.SaveEvents(ctx, evs); err != nil {
		return fmt.Errorf("announce %s: %w", what, err)
	}
	return nil
}
