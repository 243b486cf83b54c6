package reports

import (
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
)

// An invoice that applies credits (billing/credits.go) prints them in
// every format the same way: included and promotional credit lines in
// their own group before the subtotal, which they reduce (it is the
// taxable one); the tax; the total after tax; the prepaid credit lines
// paying it, like payments; the amount due (TotalMinor). Then each
// grant's account over the period and the credit that expires in the
// next one. An invoice with no credit line and no grant account prints as
// it always did.

// Labels of the totals of an invoice with credits.
const (
	creditsGroup       = "Credits"
	taxableSubtotal    = "Subtotal (taxable)"
	totalAfterTax      = "Total after tax"
	amountDue          = "Amount due"
	creditBalancesHead = "Credit balances over the period"
	// balancesNote says what the Ended column holds and how figures are
	// shown.
	balancesNote = "Ended: expired, voided or rolled over to the next grant of its series in the period; a negative figure rolled into the grant from the one before. " +
		"Money is shown to the currency's minor unit, quantities to their unit's places."
)

// hasCredits reports whether inv applies or accounts for credits: a line
// of a grant or a grant's account.
func hasCredits(inv *billing.Invoice) bool {
	if len(inv.Credits) > 0 {
		return true
	}
	for _, l := range inv.Lines {
		if l.GrantID != "" {
			return true
		}
	}
	return false
}

// isPrepaidLine reports whether l pays the total after tax (printed after
// it, as a payment) rather than reducing the subtotal.
func isPrepaidLine(l billing.Line) bool { return l.Kind == billing.KindPrepaidCredit }

// isSubtotalCredit reports whether l is an included or promotional credit
// line: printed in the Credits group, before the subtotal.
func isSubtotalCredit(l billing.Line) bool {
	return l.Kind == billing.KindIncludedCredit || l.Kind == billing.KindPromotionalCredit || (l.GrantID != "" && !isPrepaidLine(l))
}

// creditBalanceRow is one grant's account as every format prints it: the
// figures formatted in the grant's unit.
type creditBalanceRow struct {
	Description                string
	Unit                       string
	Before, Used, Ended, After string
}

// creditBalances are inv's grant accounts and one sentence per grant whose
// remainder expires in the next period, dates in loc.
func creditBalances(inv *billing.Invoice, loc *time.Location) (rows []creditBalanceRow, expiring []string) {
	for _, st := range inv.Credits {
		show := statementFormat(inv.Currency, st)
		unit := unitLabel(st.Unit)
		rows = append(rows, creditBalanceRow{Description: st.Description, Unit: unit,
			Before: show(st.Before), Used: show(st.Used), Ended: show(st.Ended), After: show(st.After)})
		if st.ExpiresNextPeriod && st.ExpiresAt != nil {
			what := strings.TrimSuffix(st.Description, ", grant "+st.GrantID)
			expiring = append(expiring, fmt.Sprintf("%s %s of grant %s, %s, expires on %s.",
				show(st.After), unit, st.GrantID, what, expiryDate(*st.ExpiresAt, loc)))
		}
	}
	return rows, expiring
}

// statementFormat formats a grant's figures: money rounded to the
// currency's minor unit, in its rounding mode (a burn-down's figures are
// exact to 9 places, which no reader wants: "81.937234735 JPY"), an
// included quantity with its meter's places, as usage lines print it.
func statementFormat(cur pricing.Currency, st billing.CreditStatement) func(decimal.Decimal) string {
	if st.Kind != credits.Included {
		return func(d decimal.Decimal) string { return cur.Round(d).StringFixed(cur.MinorUnits) }
	}
	m := statementMeter(st.Unit)
	return func(q decimal.Decimal) string { return shownQuantity(q, m) }
}

// statementMeter is the priced meter an included grant's unit names: the
// unit as invoices print it ("GPU-hours") or, from an older document, the
// meter's name; empty when no meter has it.
func statementMeter(unit string) pricing.Meter {
	for _, p := range meter.PricedMeters {
		if p.Unit == unit || p.Name == unit {
			return pricing.Meter(p.Name)
		}
	}
	return ""
}

// expiryDate is when a grant expires, in the invoice's zone: the day, and
// the time when it is not the day's start.
func expiryDate(t time.Time, loc *time.Location) string {
	t = t.In(loc)
	if t.Hour() == 0 && t.Minute() == 0 && t.Second() == 0 {
		return t.Format("2 Jan 2006")
	}
	return t.Format("2 Jan 2006 15:04 MST")
}
