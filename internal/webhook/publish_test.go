package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/quota"
)

type memoryBox struct{ saved []Event }

func (m *memoryBox) EventsOfType(context.Context, string, time.Time) ([]Event, error) {
	return nil, nil
}
func (m *memoryBox) SaveEvents(_ context.Context, evs []Event) error {
	m.saved = append(m.saved, evs...)
	return nil
}

func TestPublisherMakesEachEvent(t *testing.T) {
	now := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	box := &memoryBox{}
	pub := NewPublisher(box, func() time.Time { return now })
	ctx := context.Background()
	if err := pub.QuotaCrossed(ctx, nil); err != nil || len(box.saved) != 0 {
		t.Fatalf("nothing crossed: %v, %d events", err, len(box.saved))
	}
	c := quota.Crossing{Subject: "acme", Metric: quota.Spend, Level: "soft", Value: decimal.NewFromInt(90), Limit: decimal.NewFromInt(80), Month: "2026-11"}
	if err := pub.QuotaCrossed(ctx, []quota.Crossing{c}); err != nil {
		t.Fatal(err)
	}
	start := now.Add(-2 * time.Hour)
	a := insights.Anomaly{ID: insights.AnomalyID("acme", "gpu_hours", "", insights.Hourly, start), Tenant: "acme", Meter: "gpu_hours",
		Start: start, End: start.Add(time.Hour), Direction: insights.Spike, Observed: decimal.NewFromInt(6), Expected: decimal.Zero, Spread: decimal.NewFromInt(1)}
	if err := pub.AnomaliesFound(ctx, []insights.Anomaly{a}); err != nil {
		t.Fatal(err)
	}
	if len(box.saved) != 2 || box.saved[0].Type != TypeQuotaCrossed || box.saved[1].Type != TypeInsightAnomaly ||
		box.saved[1].ID != "evt_anomaly_"+a.ID || !strings.Contains(string(box.saved[0].Data), `"acme"`) {
		t.Fatalf("events %+v", box.saved)
	}
}
