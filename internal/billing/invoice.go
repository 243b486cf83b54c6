package billing

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

// Status is where an invoice is in its life: a draft may be recomputed,
// a finalized invoice never changes (it may only be voided, keeping its
// number), a void one stays as it was with the reason beside it.
type Status string

const (
	StatusDraft     Status = "draft"
	StatusFinalized Status = "finalized"
	StatusVoid      Status = "void"
)

// Line kinds beyond the pricing engine's (pricing.Kind).
const (
	// KindAdjustment bills usage that arrived after its period was
	// invoiced; KindCredit gives back usage removed since (a re-import
	// with a fix). Both name the period and the invoice they correct.
	KindAdjustment pricing.Kind = "adjustment"
	KindCredit     pricing.Kind = "credit"
	// KindTax is the one tax line: the customer's rate on the subtotal.
	KindTax pricing.Kind = "tax"
)

// Party is the issuer or the customer as printed on the invoice: a copy
// taken when the invoice was made, so a later config change does not
// alter an issued invoice.
type Party struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	Address    []string `json:"address,omitempty"`
	TaxID      string   `json:"tax_id,omitempty"`
	Department string   `json:"department,omitempty"`
}

// Line is one invoice line. Amount is exact to pricing.StoragePlaces
// (Decimal(38, 9) in ClickHouse); AmountMinor is the amount in the
// currency's minor unit, rounded once, and what totals add up.
type Line struct {
	No          int                  `json:"no"`
	Kind        pricing.Kind         `json:"kind"`
	SKU         string               `json:"sku,omitempty"`
	Meter       pricing.Meter        `json:"meter,omitempty"`
	Description string               `json:"description"`
	From        time.Time            `json:"from"`
	To          time.Time            `json:"to"`
	Quantity    decimal.Decimal      `json:"quantity"`
	Unit        string               `json:"unit,omitempty"`
	UnitPrice   *decimal.Decimal     `json:"unit_price,omitempty"`
	Tiers       []pricing.TierCharge `json:"tiers,omitempty"`
	Amount      decimal.Decimal      `json:"amount"`
	AmountMinor int64                `json:"amount_minor"`

	// For adjustment and credit lines: the corrected period, its invoice,
	// and the kind of line the correction is to.
	AdjustsPeriod  string       `json:"adjusts_period,omitempty"`
	AdjustsInvoice string       `json:"adjusts_invoice,omitempty"`
	AdjustsKind    pricing.Kind `json:"adjusts_kind,omitempty"`
	// GrantID names the grant a credit line applies (credits.go).
	GrantID string `json:"grant_id,omitempty"`
}

// Correction records that an invoice carried the corrections of an
// earlier period: the usage it re-priced that period from, so the next
// run compares against this rather than the original invoice.
type Correction struct {
	InvoiceID     string `json:"invoice_id"`
	Number        string `json:"number"`
	Period        string `json:"period"`
	InputsHash    string `json:"inputs_hash"`
	RollupVersion uint64 `json:"rollup_version"`
}

// Invoice is one tenant's invoice for one period.
type Invoice struct {
	// ID names the invoice before it has a number: tenant/period/generation
	// (generation 2 follows a voided first invoice of the period).
	ID     string `json:"id"`
	Number string `json:"number,omitempty"`
	// Seq is the number's place in its sequence (SequenceKey).
	Seq         uint64 `json:"seq,omitempty"`
	SequenceKey string `json:"sequence_key,omitempty"`
	Status      Status `json:"status"`

	Issuer   Party  `json:"issuer"`
	Customer Party  `json:"customer"`
	Tenant   string `json:"tenant"`

	PeriodLabel string    `json:"period"`
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	TimeZone    string    `json:"time_zone"`

	Currency pricing.Currency `json:"currency"`
	Lines    []Line           `json:"lines"`
	// Reservations and Unpriced are the engine's notes on the period:
	// how reserved capacity was used, and usage the book does not price.
	Reservations []pricing.ReservationUsage `json:"reservations,omitempty"`
	Unpriced     []pricing.UnpricedUsage    `json:"unpriced,omitempty"`

	// PaymentDays and PaymentNote are the payment terms when the invoice
	// was made (a copy, like the parties); DueDate is the day it is due, in
	// its time zone, set when it is finalized (issued).
	PaymentDays int    `json:"payment_terms_days"`
	PaymentNote string `json:"payment_terms_note,omitempty"`
	DueDate     string `json:"due_date,omitempty"`

	// SubtotalMinor is the taxable subtotal: usage, corrections, included
	// and promotional credit. TotalMinor is what is due: the subtotal, its
	// tax, and PrepaidMinor, the (negative) prepaid credit paying it.
	TaxRate       decimal.Decimal `json:"tax_rate"`
	SubtotalMinor int64           `json:"subtotal_minor"`
	TaxMinor      int64           `json:"tax_minor"`
	PrepaidMinor  int64           `json:"prepaid_minor,omitempty"`
	TotalMinor    int64           `json:"total_minor"`
	// Credits are the accounts of the customer's grants over the period.
	Credits []CreditStatement `json:"credits,omitempty"`

	BookVersion    string `json:"book_version"`
	BookDigest     string `json:"book_digest"`
	ContractDigest string `json:"contract_digest,omitempty"`
	InputsHash     string `json:"inputs_hash"`
	// RollupVersion is the rollup's completed version when the period was
	// priced (rollup.State.CompletedVersion): rows above it, from a run then
	// in flight or a later one, mean its usage may have changed.
	RollupVersion uint64       `json:"rollup_version"`
	Corrections   []Correction `json:"corrections,omitempty"`

	CreatedAt   time.Time  `json:"created_at"`
	FinalizedAt *time.Time `json:"finalized_at,omitempty"`
	VoidedAt    *time.Time `json:"voided_at,omitempty"`
	VoidReason  string     `json:"void_reason,omitempty"`
}

// Period is the invoice's billing period.
func (inv *Invoice) Period() Period {
	return Period{Label: inv.PeriodLabel, Start: inv.PeriodStart, End: inv.PeriodEnd}
}

// Money formats minor units in the invoice's currency ("1234.50").
func (inv *Invoice) Money(minor int64) string {
	return FormatMinor(minor, inv.Currency.MinorUnits)
}

// FormatMinor writes an amount in minor units with the currency's places.
func FormatMinor(minor int64, places int32) string {
	return decimal.New(minor, -places).StringFixed(places)
}

// Document is the canonical JSON of the invoice: the bytes stored with it
// and served for it. Encoding is deterministic (struct field order, UTC
// times, decimals in their shortest form), and a finalized invoice's
// document is written once, so reading it back is byte-identical.
func (inv *Invoice) Document() ([]byte, error) {
	c := *inv
	c.PeriodStart, c.PeriodEnd, c.CreatedAt = c.PeriodStart.UTC(), c.PeriodEnd.UTC(), c.CreatedAt.UTC()
	c.Lines = make([]Line, len(inv.Lines))
	for i, l := range inv.Lines {
		l.From, l.To = l.From.UTC(), l.To.UTC()
		c.Lines[i] = l
	}
	c.Credits = append([]CreditStatement(nil), inv.Credits...)
	stamps := []**time.Time{&c.FinalizedAt, &c.VoidedAt}
	for i := range c.Credits {
		stamps = append(stamps, &c.Credits[i].ExpiresAt)
	}
	for _, t := range stamps {
		if *t != nil {
			u := (*t).UTC()
			*t = &u
		}
	}
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("invoice %s: encode: %w", inv.ID, err)
	}
	return b, nil
}

// ParseDocument reads a stored document back.
func ParseDocument(doc []byte) (*Invoice, error) {
	var inv Invoice
	if err := json.Unmarshal(doc, &inv); err != nil {
		return nil, fmt.Errorf("decode invoice document: %w", err)
	}
	return &inv, nil
}

// Validate checks the invoice's own arithmetic: lines numbered from 1,
// every amount in minor units and the totals the sum of the lines. Every
// invoice is checked before it is stored.
func (inv *Invoice) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if inv.ID == "" {
		add("id: required")
	}
	switch inv.Status {
	case StatusDraft, StatusFinalized, StatusVoid:
	default:
		add("status %q: want draft, finalized or void", inv.Status)
	}
	if (inv.Status == StatusFinalized || inv.FinalizedAt != nil) && inv.Number == "" {
		add("number: required once finalized")
	}
	if inv.Status == StatusVoid && strings.TrimSpace(inv.VoidReason) == "" {
		add("void_reason: required")
	}
	if !inv.PeriodEnd.After(inv.PeriodStart) {
		add("period: end must be after start")
	}
	var sub, tax, prepaid int64
	for i, l := range inv.Lines {
		if l.No != i+1 {
			add("lines[%d].no %d: want %d", i, l.No, i+1)
		}
		if got := minorUnits(inv.Currency.Round(l.Amount), inv.Currency.MinorUnits); got != l.AmountMinor {
			add("lines[%d].amount_minor %d: the amount %s rounds to %d", i, l.AmountMinor, l.Amount, got)
		}
		switch l.Kind {
		case KindTax:
			tax += l.AmountMinor
		case KindPrepaidCredit:
			prepaid += l.AmountMinor
		default:
			sub += l.AmountMinor
		}
	}
	if prepaid != inv.PrepaidMinor {
		add("prepaid_minor %d: the prepaid credit lines add up to %d", inv.PrepaidMinor, prepaid)
	}
	if sub != inv.SubtotalMinor {
		add("subtotal_minor %d: lines add up to %d", inv.SubtotalMinor, sub)
	}
	if tax != inv.TaxMinor {
		add("tax_minor %d: the tax line is %d", inv.TaxMinor, tax)
	}
	if inv.TotalMinor != sub+tax+prepaid {
		add("total_minor %d: want subtotal + tax + prepaid credit = %d", inv.TotalMinor, sub+tax+prepaid)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("invoice %s: %w", inv.ID, errors.Join(errs...))
}

// minorUnits is a rounded amount as an integer count of minor units.
func minorUnits(rounded decimal.Decimal, places int32) int64 {
	return rounded.Shift(places).IntPart()
}
