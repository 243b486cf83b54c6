package billing

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/pricing"
)

// Credit line kinds: what a grant paid of an invoice. Included and
// promotional credit reduce the taxable subtotal; prepaid credit pays the
// total after tax, like a payment.
const (
	KindIncludedCredit    pricing.Kind = "included_credit"
	KindPromotionalCredit pricing.Kind = "promotional_credit"
	KindPrepaidCredit     pricing.Kind = "prepaid_credit"
)

// creditKind is the line kind of a grant's kind.
func creditKind(k credits.Kind) pricing.Kind {
	switch k {
	case credits.Included:
		return KindIncludedCredit
	case credits.Promotional:
		return KindPromotionalCredit
	}
	return KindPrepaidCredit
}

// CreditBalances burns a customer's grants down as of several times from
// one pricing of its usage (the credit domain, credits.Service.BalancesAt):
// the runner asks for the start and the end of each invoiced period.
type CreditBalances interface {
	BalancesAt(ctx context.Context, tenant string, times ...time.Time) ([]credits.Result, error)
}

// CreditStatement is one grant's account on an invoice, in the grant's
// unit (money, or the included meter's quantity): its balance when the
// period began, what it covered, what ended in the period (expired,
// voided or rolled over; negative: rolled into it), and its balance when
// the period ended, as the usage known when the invoice was made burns it.
type CreditStatement struct {
	GrantID     string          `json:"grant_id"`
	Kind        credits.Kind    `json:"kind"`
	Description string          `json:"description"`
	Unit        string          `json:"unit"`
	Before      decimal.Decimal `json:"before"`
	Used        decimal.Decimal `json:"used"`
	Ended       decimal.Decimal `json:"ended"`
	After       decimal.Decimal `json:"after"`
	// AppliedMinor is what the grant's lines on this invoice add up to (a
	// negative amount, or positive where late corrections give back).
	AppliedMinor int64      `json:"applied_minor"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"`
	// ExpiresNextPeriod: something is left and it expires before the next
	// period ends.
	ExpiresNextPeriod bool `json:"expires_next_period,omitempty"`
}

// CreditInput is what BuildInvoice applies credits from: the burn-down at
// the period's start and end, and what earlier finalized invoices applied
// of each grant (minor units and, for included grants, quantities).
type CreditInput struct {
	Start, End    credits.Result
	AppliedMinor  map[string]int64
	AppliedQty    map[string]decimal.Decimal
	NextPeriodEnd time.Time
}

// AppliedBefore sums what the credit lines of earlier invoices applied of
// each grant: money (positive minor units; the lines are negative) and,
// for included grants, quantity.
func AppliedBefore(earlier []*Invoice) (map[string]int64, map[string]decimal.Decimal) {
	minor, qty := map[string]int64{}, map[string]decimal.Decimal{}
	for _, inv := range earlier {
		for _, l := range inv.Lines {
			if l.GrantID == "" {
				continue
			}
			minor[l.GrantID] -= l.AmountMinor
			qty[l.GrantID] = qty[l.GrantID].Add(l.Quantity)
		}
	}
	return minor, qty
}

// creditLines are the lines of one invoice's grants of the given kinds:
// per grant, what the burn-down has it cover up to the period's end
// (rounded once, as a sum), less what earlier invoices applied of it. So
// usage that arrives late for an invoiced period is covered by the grants
// as they were then, on the next invoice, and rounding never drifts.
// Lines are capped so they never take more than limit (minor units) in
// all: a grant whose part is cut applies it on a later invoice.
func creditLines(in *CreditInput, cur pricing.Currency, kinds []credits.Kind, p Period, limit int64) []Line {
	cum := map[string]decimal.Decimal{}
	cumQty := map[string]decimal.Decimal{}
	for _, d := range in.End.Draws {
		cum[d.GrantID] = cum[d.GrantID].Add(d.Amount)
		cumQty[d.GrantID] = cumQty[d.GrantID].Add(d.Quantity)
	}
	var out []Line
	left := max(limit, 0)
	inOrder := slices.Clone(in.End.Balances)
	slices.SortStableFunc(inOrder, func(a, b credits.Balance) int { return credits.CompareUse(a.Grant, b.Grant) })
	for _, b := range inOrder {
		g := b.Grant
		if !slices.Contains(kinds, g.Kind) {
			continue
		}
		full := minorUnits(cur.Round(cum[g.ID]), cur.MinorUnits) - in.AppliedMinor[g.ID]
		due := min(full, left)
		if due == 0 {
			continue
		}
		left -= due
		l := Line{Kind: creditKind(g.Kind), GrantID: g.ID, Description: CreditDescription(g), From: p.Start, To: p.End,
			Amount: decimal.New(-due, -cur.MinorUnits), AmountMinor: -due, Unit: cur.Code}
		if g.Kind == credits.Included {
			l.Quantity = cumQty[g.ID].Sub(in.AppliedQty[g.ID])
			if due != full { // a capped part stands for its share of the quantity
				l.Quantity = l.Quantity.Mul(decimal.NewFromInt(due)).DivRound(decimal.NewFromInt(full), pricing.StoragePlaces)
			}
			l.Unit, l.Meter = g.Meter.Spec().Unit, g.Meter
		}
		out = append(out, l)
	}
	return out
}

// CreditDescription names a grant on an invoice line: "Included GPU-hours
// of H100-SXM5-80GB", "Promotional credit", "Prepaid credit", then its
// source or note in parentheses.
func CreditDescription(g credits.Grant) string {
	var what string
	switch g.Kind {
	case credits.Included:
		class := g.SKUClass
		if class == "" {
			class = "any GPU"
		}
		what = fmt.Sprintf("Included %s of %s", g.Meter.Spec().Unit, class)
	case credits.Promotional:
		what = "Promotional credit"
	default:
		what = "Prepaid credit"
	}
	if about := cmp.Or(g.Source, g.Note); about != "" {
		what += " (" + about + ")"
	}
	return what + ", grant " + g.ID
}

// creditStatements are the accounts of the grants that were alive in the
// period or carry a balance through it, with what this invoice applied.
func creditStatements(in *CreditInput, lines []Line, cur pricing.Currency, p Period) []CreditStatement {
	start := map[string]credits.Balance{}
	for _, b := range in.Start.Balances {
		start[b.Grant.ID] = b
	}
	applied := map[string]int64{}
	for _, l := range lines {
		if l.GrantID != "" {
			applied[l.GrantID] += l.AmountMinor
		}
	}
	var out []CreditStatement
	for _, b := range in.End.Balances {
		g := b.Grant
		endedBefore := (!g.ExpiresAt.IsZero() && !g.ExpiresAt.After(p.Start)) || (g.VoidedAt != nil && !g.VoidedAt.After(p.Start))
		if !g.EffectiveAt.Before(p.End) || (endedBefore && applied[g.ID] == 0) {
			continue // not yet begun, or ended before the period with nothing late to apply
		}
		before := decimal.Zero
		if s, ok := start[g.ID]; ok && g.EffectiveAt.Before(p.Start) {
			before = s.Remaining
		}
		if !g.EffectiveAt.Before(p.Start) {
			before = b.Granted.Sub(rolledInto(b, in.End.Balances))
		}
		unit := cur.Code
		if g.Kind == credits.Included {
			unit = g.Meter.Spec().Unit
		}
		st := CreditStatement{GrantID: g.ID, Kind: g.Kind, Description: CreditDescription(g), Unit: unit, Before: before,
			Used: b.Used.Sub(usedBy(in.Start.Balances, g.ID)), After: b.Remaining, AppliedMinor: applied[g.ID]}
		st.Ended = st.Before.Sub(st.Used).Sub(st.After)
		if !g.ExpiresAt.IsZero() {
			exp := g.ExpiresAt
			st.ExpiresAt = &exp
			st.ExpiresNextPeriod = b.Remaining.Sign() > 0 && !exp.Before(p.End) && exp.Before(in.NextPeriodEnd)
		}
		out = append(out, st)
	}
	return out
}

// rolledInto is what the grants before b's rolled into it.
func rolledInto(b credits.Balance, all []credits.Balance) decimal.Decimal {
	in := decimal.Zero
	for _, o := range all {
		if o.Grant.Series == b.Grant.Series && b.Grant.Series != "" && o.Grant.ExpiresAt.Equal(b.Grant.EffectiveAt) {
			in = in.Add(o.RolledOver)
		}
	}
	return in
}

func usedBy(bs []credits.Balance, id string) decimal.Decimal {
	for _, b := range bs {
		if b.Grant.ID == id {
			return b.Used
		}
	}
	return decimal.Zero
}
