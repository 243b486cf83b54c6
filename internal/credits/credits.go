// Package credits is the prepaid-credit domain: grants of money or of
// included GPU-hours to a customer, and the burn-down that derives every
// grant's balance from the append-only grants and the priced usage, never
// from a balance updated in place (issue 34).
//
// This file holds the grants and their validation; burn.go the burn-down.
// Both are pure: the store keeps the grant rows, pricing gives the
// charges, and the invoice, admission and portal read the result.
package credits

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/pricing"
)

// Kind is what a grant gives and where an invoice applies it.
type Kind string

const (
	// Prepaid is money paid in advance: applied to an invoice's total
	// after tax, like a payment.
	Prepaid Kind = "prepaid"
	// Promotional is money given: it reduces the taxable subtotal.
	Promotional Kind = "promotional"
	// Included is a quantity of a meter on a SKU class ("100 GPU-hours of
	// H100"), used before any money.
	Included Kind = "included"
)

// Grant is one row of the grant ledger. Rows are appended, never changed:
// voiding appends the void's time and reason to the record, and what the
// grant covered before it stays covered.
type Grant struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Kind   Kind   `json:"kind"`
	// Amount is money in Currency (prepaid, promotional) or, for included
	// grants, a quantity of Meter in the meter's unit; GPU-hours are
	// GPU-equivalent hours, so MIG and vGPU SKUs count by their weight.
	Amount   decimal.Decimal `json:"amount"`
	Currency string          `json:"currency,omitempty"`
	Meter    pricing.Meter   `json:"meter,omitempty"`
	// SKUClass is the GPU model whose SKUs (the whole GPU, its MIG
	// profiles and vGPU types) an included grant covers; empty: any SKU.
	SKUClass string `json:"sku_class,omitempty"`
	// Priority orders grants of a kind: lower is used first.
	Priority int `json:"priority"`
	// The grant covers usage in [EffectiveAt, ExpiresAt); a zero
	// ExpiresAt never expires. What is left at expiry expires, counted.
	EffectiveAt time.Time `json:"effective_at"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"`
	// Series and RolloverCap make a recurring allowance: at expiry, up to
	// RolloverCap of what is left moves to the grant of the same series
	// that starts then (the next month's). Nil: nothing rolls over.
	Series      string           `json:"series,omitempty"`
	RolloverCap *decimal.Decimal `json:"rollover_cap,omitempty"`

	Source    string    `json:"source,omitempty"`
	Note      string    `json:"note,omitempty"`
	CreatedAt time.Time `json:"created_at"`

	VoidedAt   *time.Time `json:"voided_at,omitempty"`
	VoidReason string     `json:"void_reason,omitempty"`
}

// Money reports whether the grant gives money (not a quantity).
func (g Grant) Money() bool { return g.Kind == Prepaid || g.Kind == Promotional }

// activeAt reports whether the grant covers usage at t.
func (g Grant) activeAt(t time.Time) bool {
	if t.Before(g.EffectiveAt) || (!g.ExpiresAt.IsZero() && !t.Before(g.ExpiresAt)) {
		return false
	}
	return g.VoidedAt == nil || t.Before(*g.VoidedAt)
}

// Validate names every problem of a grant, as a validation error (a 4xx,
// exit status 2): nothing is stored. customers are the known customers.
func (g Grant) Validate(customers []Customer) error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	var customer *Customer
	for i := range customers {
		if customers[i].Tenant == g.Tenant {
			customer = &customers[i]
		}
	}
	switch {
	case strings.TrimSpace(g.Tenant) == "":
		add("tenant: required")
	case customer == nil:
		add("tenant %q: not a billing customer", g.Tenant)
	}
	if g.Amount.Sign() <= 0 {
		add("amount %s: must be above zero", g.Amount)
	}
	switch g.Kind {
	case Prepaid, Promotional:
		if g.Meter != "" || g.SKUClass != "" {
			add("meter, sku_class: only for included grants")
		}
		if customer != nil && g.Currency != customer.Currency {
			add("currency %q: the customer is billed in %s", g.Currency, customer.Currency)
		}
		if places := -g.Amount.Exponent(); places > pricing.StoragePlaces {
			add("amount %s: more than %d decimal places", g.Amount, pricing.StoragePlaces)
		}
	case Included:
		if g.Meter.Spec().Name == "" {
			add("meter %q: not a priced meter", g.Meter)
		}
		if g.Currency != "" {
			add("currency: not for an included grant (it gives a quantity)")
		}
		if _, known := gpucatalog.LookupModel(g.SKUClass); g.SKUClass != "" && !known {
			add("sku_class %q: not a GPU model of the catalogue", g.SKUClass)
		}
	default:
		add("kind %q: want prepaid, promotional or included", g.Kind)
	}
	if g.EffectiveAt.IsZero() {
		add("effective_at: required")
	}
	if !g.ExpiresAt.IsZero() && !g.ExpiresAt.After(g.EffectiveAt) {
		add("expires_at %s: not after effective_at %s", g.ExpiresAt.Format(time.RFC3339), g.EffectiveAt.Format(time.RFC3339))
	}
	if g.RolloverCap != nil {
		if g.Series == "" || g.ExpiresAt.IsZero() {
			add("rollover_cap: only for a recurring grant (series and expires_at)")
		}
		if g.RolloverCap.Sign() < 0 {
			add("rollover_cap %s: negative", g.RolloverCap)
		}
	}
	if g.VoidedAt != nil && strings.TrimSpace(g.VoidReason) == "" {
		add("void_reason: required")
	}
	return fault.Validation(errors.Join(errs...))
}

// VoidRequest voids a grant: the record stays, with the reason beside it.
type VoidRequest struct {
	ID     string
	Reason string
}

// Validate refuses a void without a grant or a reason.
func (r VoidRequest) Validate() error {
	var errs []error
	if strings.TrimSpace(r.ID) == "" {
		errs = append(errs, errors.New("id: required"))
	}
	if strings.TrimSpace(r.Reason) == "" {
		errs = append(errs, errors.New("reason: required (it stays on the grant's record)"))
	}
	return fault.Validation(errors.Join(errs...))
}

// NewID names a new grant: "cg_" and 12 random hex digits.
func NewID() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new grant id: %w", err)
	}
	return "cg_" + hex.EncodeToString(b[:]), nil
}
