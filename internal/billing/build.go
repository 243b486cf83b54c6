package billing

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/pricing"
)

// Draft is everything one invoice is built from; BuildInvoice is pure.
type Draft struct {
	ID       string
	Issuer   Issuer
	Customer Customer
	Period   Period
	Priced   pricing.Result
	// Corrections are the adjustment and credit lines for earlier periods
	// (see Correct), with what each re-priced.
	CorrectionLines []Line
	Corrections     []Correction
	// Credits, when the customer has grants, are applied (credits.go).
	Credits *CreditInput

	BookDigest, ContractDigest, InputsHash string
	RollupVersion                          uint64
	Now                                    time.Time
}

// BuildInvoice turns a priced period into a draft invoice: the engine's
// lines, then corrections of earlier periods, then one tax line on the
// subtotal. Each line's amount is its 9-place stored value, rounded once
// to the minor unit (pricing.Currency.Round); the totals are sums of
// rounded lines, so every rendering of the invoice adds up.
func BuildInvoice(d Draft) (*Invoice, error) {
	cur := d.Priced.Currency
	if d.Customer.Currency != "" && cur.Code != d.Customer.Currency {
		return nil, fmt.Errorf("customer %s: currency %s, but its book %s prices in %s",
			d.Customer.Tenant, d.Customer.Currency, d.Priced.BookVersion, cur.Code)
	}
	zone := d.Customer.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	inv := &Invoice{
		ID:     d.ID,
		Status: StatusDraft,
		Issuer: Party{ID: d.Issuer.ID, Name: d.Issuer.Name, Address: d.Issuer.Address, TaxID: d.Issuer.TaxID},
		Customer: Party{ID: d.Customer.Tenant, Name: d.Customer.Name, Address: d.Customer.Address,
			TaxID: d.Customer.TaxID, Department: d.Customer.Department},
		Tenant:         d.Customer.Tenant,
		PeriodLabel:    d.Period.Label,
		PeriodStart:    d.Period.Start.UTC(),
		PeriodEnd:      d.Period.End.UTC(),
		TimeZone:       zone,
		Currency:       cur,
		Reservations:   d.Priced.Reservations,
		Unpriced:       d.Priced.Unpriced,
		TaxRate:        d.Customer.TaxRate,
		BookVersion:    d.Priced.BookVersion,
		BookDigest:     d.BookDigest,
		ContractDigest: d.ContractDigest,
		InputsHash:     d.InputsHash,
		RollupVersion:  d.RollupVersion,
		Corrections:    d.Corrections,
		CreatedAt:      d.Now.UTC().Truncate(time.Second),
	}
	inv.PaymentDays, inv.PaymentNote = d.Issuer.termsOf(d.Customer)
	for _, l := range d.Priced.Lines {
		inv.Lines = append(inv.Lines, Line{
			Kind: l.Kind, SKU: l.SKU, Meter: l.Meter, Description: l.Description,
			From: l.From.UTC(), To: l.To.UTC(), Quantity: l.Quantity, Unit: l.Unit,
			UnitPrice: l.UnitPrice, Tiers: l.Tiers, Amount: l.Amount,
			AmountMinor: minorUnits(l.AmountRounded, cur.MinorUnits),
		})
	}
	inv.Lines = append(inv.Lines, d.CorrectionLines...)
	var sub int64
	for _, l := range inv.Lines {
		sub += l.AmountMinor
	}
	if d.Credits != nil {
		// Included and promotional credit reduce the taxable subtotal.
		pre := creditLines(d.Credits, cur, []credits.Kind{credits.Included, credits.Promotional}, d.Period, sub)
		for _, l := range pre {
			sub += l.AmountMinor
		}
		inv.Lines = append(inv.Lines, pre...)
	}
	inv.SubtotalMinor = sub
	if !d.Customer.TaxRate.IsZero() {
		base := decimal.New(sub, -cur.MinorUnits)
		// The tax line's amount is quantized like every line's; its minor
		// units are rounded from that stored value, as Validate does.
		amount := cur.Quantize(base.Mul(d.Customer.TaxRate).Div(decimal.NewFromInt(100)))
		rate := d.Customer.TaxRate.Div(decimal.NewFromInt(100))
		tax := Line{
			Kind: KindTax, Description: fmt.Sprintf("Tax %s%% on %s %s", d.Customer.TaxRate, base.StringFixed(cur.MinorUnits), cur.Code),
			From: inv.PeriodStart, To: inv.PeriodEnd, Quantity: base, Unit: cur.Code, UnitPrice: &rate,
			Amount: amount, AmountMinor: minorUnits(cur.Round(amount), cur.MinorUnits),
		}
		inv.Lines = append(inv.Lines, tax)
		inv.TaxMinor = tax.AmountMinor
	}
	if d.Credits != nil {
		// Prepaid credit pays the total after tax, like a payment.
		post := creditLines(d.Credits, cur, []credits.Kind{credits.Prepaid}, d.Period, inv.SubtotalMinor+inv.TaxMinor)
		for _, l := range post {
			inv.PrepaidMinor += l.AmountMinor
		}
		inv.Lines = append(inv.Lines, post...)
		inv.Credits = creditStatements(d.Credits, inv.Lines, cur, d.Period)
	}
	inv.TotalMinor = inv.SubtotalMinor + inv.TaxMinor + inv.PrepaidMinor
	for i := range inv.Lines {
		inv.Lines[i].No = i + 1
	}
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	return inv, nil
}

// LineKey is what corrections compare by: the kind of charge, its SKU
// and meter. Price versions and reservations of one key add up.
type LineKey struct {
	Kind  pricing.Kind
	SKU   string
	Meter pricing.Meter
}

// Billed is what has been charged for one period so far, per line key:
// the original invoice's lines plus every correction issued since.
type Billed struct {
	Minor    map[LineKey]int64
	Quantity map[LineKey]decimal.Decimal
}

// BilledFor sums what orig and the corrections on later invoices charged
// for orig's period. Tax lines are left out: tax follows each invoice's
// own subtotal.
func BilledFor(orig *Invoice, later []*Invoice) Billed {
	b := Billed{Minor: map[LineKey]int64{}, Quantity: map[LineKey]decimal.Decimal{}}
	for _, l := range orig.Lines {
		if l.Kind == KindTax || l.Kind == KindAdjustment || l.Kind == KindCredit || l.GrantID != "" {
			continue // tax and grants follow each invoice's own usage
		}
		k := LineKey{l.Kind, l.SKU, l.Meter}
		b.Minor[k] += l.AmountMinor
		b.Quantity[k] = b.Quantity[k].Add(l.Quantity)
	}
	for _, inv := range later {
		for _, l := range inv.Lines {
			if (l.Kind != KindAdjustment && l.Kind != KindCredit) || l.AdjustsInvoice != orig.Number {
				continue
			}
			k := LineKey{l.AdjustsKind, l.SKU, l.Meter}
			b.Minor[k] += l.AmountMinor
			b.Quantity[k] = b.Quantity[k].Add(l.Quantity)
		}
	}
	return b
}

// Correct compares a re-pricing of orig's period with what was billed for
// it and returns one line per key whose rounded amount changed: an
// adjustment when more is due, a credit when less. The line's amount is
// the difference of rounded amounts, so the original invoice plus its
// corrections always add up to the period priced afresh.
func Correct(orig *Invoice, billed Billed, repriced pricing.Result) []Line {
	cur := orig.Currency
	now := map[LineKey]int64{}
	qty := map[LineKey]decimal.Decimal{}
	units := map[LineKey]string{}
	for _, l := range repriced.Lines {
		k := LineKey{l.Kind, l.SKU, l.Meter}
		now[k] += minorUnits(l.AmountRounded, cur.MinorUnits)
		qty[k] = qty[k].Add(l.Quantity)
		units[k] = l.Unit
	}
	keys := map[LineKey]bool{}
	for k := range now {
		keys[k] = true
	}
	for k := range billed.Minor {
		keys[k] = true
	}
	sorted := make([]LineKey, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.SKU != b.SKU {
			return a.SKU < b.SKU
		}
		if a.Meter != b.Meter {
			return a.Meter < b.Meter
		}
		return a.Kind < b.Kind
	})
	var out []Line
	for _, k := range sorted {
		diff := now[k] - billed.Minor[k]
		if diff == 0 {
			continue
		}
		kind, what := KindAdjustment, "Late usage of"
		if diff < 0 {
			kind, what = KindCredit, "Usage removed from"
		}
		subject := strings.ToLower(KindLabel(k.Kind))
		if k.SKU != "" {
			subject = fmt.Sprintf("%s %s, %s", k.SKU, k.Meter.Spec().Noun, subject)
		}
		unit := units[k]
		if unit == "" && k.Meter != "" {
			unit = k.Meter.Spec().Unit
		}
		out = append(out, Line{
			Kind:        kind,
			SKU:         k.SKU,
			Meter:       k.Meter,
			Description: fmt.Sprintf("%s %s (invoice %s): %s", what, orig.PeriodLabel, orig.Number, subject),
			From:        orig.PeriodStart, To: orig.PeriodEnd,
			Quantity:       qty[k].Sub(billed.Quantity[k]),
			Unit:           unit,
			Amount:         decimal.New(diff, -cur.MinorUnits),
			AmountMinor:    diff,
			AdjustsPeriod:  orig.PeriodLabel,
			AdjustsInvoice: orig.Number,
			AdjustsKind:    k.Kind,
		})
	}
	return out
}
