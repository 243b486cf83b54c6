package webhook

import (
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/quota"
)

// InvoiceFinalized is the event of a finalized invoice.
func InvoiceFinalized(inv *billing.Invoice, at time.Time) (Event, error) {
	return NewEvent(TypeInvoiceFinalized, at, map[string]any{
		"invoice_id": inv.ID, "number": inv.Number, "tenant": inv.Tenant, "period": inv.PeriodLabel,
		"currency": inv.Currency.Code, "subtotal": inv.Money(inv.SubtotalMinor), "tax": inv.Money(inv.TaxMinor),
		"total": inv.Money(inv.TotalMinor), "lines": len(inv.Lines),
	})
}

// QuotaCrossed is the event of a threshold crossed.
func QuotaCrossed(c quota.Crossing, at time.Time) (Event, error) {
	return NewEvent(TypeQuotaCrossed, at, map[string]any{
		"subject": c.Subject, "metric": c.Metric, "level": c.Level, "value": c.Value.Round(9).String(),
		"threshold": c.Limit.Round(9).String(), "month": c.Month,
	})
}
