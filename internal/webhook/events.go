package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/quota"
)

// InvoiceFinalized is the event of a finalized invoice. Its id follows
// from the invoice (issuer, id and number), so the event a re-run writes
// for an invoice is the same event, never a second one.
func InvoiceFinalized(inv *billing.Invoice, at time.Time) (Event, error) {
	ev, err := NewEvent(TypeInvoiceFinalized, at, map[string]any{
		"invoice_id": inv.ID, "number": inv.Number, "tenant": inv.Tenant, "period": inv.PeriodLabel,
		"currency": inv.Currency.Code, "subtotal": inv.Money(inv.SubtotalMinor), "tax": inv.Money(inv.TaxMinor),
		"total": inv.Money(inv.TotalMinor), "lines": len(inv.Lines),
	})
	if err != nil {
		return Event{}, err
	}
	sum := sha256.Sum256([]byte(inv.Issuer.ID + "\x00" + inv.ID + "\x00" + inv.Number))
	ev.ID = "evt_invoice_" + hex.EncodeToString(sum[:12])
	return ev, nil
}

// QuotaCrossed is the event of a threshold crossed.
func QuotaCrossed(c quota.Crossing, at time.Time) (Event, error) {
	return NewEvent(TypeQuotaCrossed, at, map[string]any{
		"subject": c.Subject, "metric": c.Metric, "level": c.Level, "value": c.Value.Round(9).String(),
		"threshold": c.Limit.Round(9).String(), "month": c.Month,
	})
}

// InsightAnomaly is the event of an anomaly found (internal/insights). Its
// id follows from the anomaly's deterministic id, so enqueuing the same
// anomaly twice leaves one event in the outbox (keyed by event id).
func InsightAnomaly(a insights.Anomaly, at time.Time) (Event, error) {
	ev, err := NewEvent(TypeInsightAnomaly, at, map[string]any{
		"anomaly_id": a.ID, "tenant": a.Tenant, "meter": a.Meter, "sku": a.SKU, "direction": a.Direction,
		"start": a.Start.UTC(), "end": a.End.UTC(), "observed": a.Observed.Round(9).String(),
		"expected": a.Expected.Round(9).String(), "spread": a.Spread.Round(9).String(), "score": a.Score,
	})
	if err != nil {
		return Event{}, err
	}
	ev.ID = "evt_anomaly_" + a.ID
	return ev, nil
}
