package reports

import (
	"fmt"
	"io"
	"time"

	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/reports/output"
)

// WriteGrantsAs lists credit grants: what each gives, to whom, when, and
// whether it was voided.
func WriteGrantsAs(w io.Writer, f output.Format, gs []credits.Grant) error {
	l := output.Listing{Columns: cols("id", "tenant", "kind", "amount#", "unit", "sku class", "priority#", "effective", "expires",
		"voided", "+void reason", "+source", "+note")}
	for _, g := range gs {
		unit := g.Currency
		if g.Kind == credits.Included {
			unit = g.Meter.Spec().Unit
		}
		var voided time.Time
		if g.VoidedAt != nil {
			voided = *g.VoidedAt
		}
		l.Rows = append(l.Rows, []string{g.ID, g.Tenant, string(g.Kind), g.Amount.String(), unit, dash(g.SKUClass),
			fmt.Sprint(g.Priority), output.Time(g.EffectiveAt), output.Time(g.ExpiresAt), output.Time(voided), g.VoidReason, g.Source, g.Note})
	}
	if gs == nil {
		gs = []credits.Grant{}
	}
	l.Items = gs
	return output.Write(w, f, l)
}

// WriteCreditBalanceAs prints a customer's burn-down: each grant's account
// in its unit, and the money no grant covered.
func WriteCreditBalanceAs(w io.Writer, f output.Format, r credits.Result) error {
	l := output.Listing{Columns: cols("grant", "kind", "unit", "granted#", "used#", "expired#", "+voided#", "+rolled over#", "remaining#")}
	for _, b := range r.Balances {
		unit := b.Grant.Currency
		if b.Grant.Kind == credits.Included {
			unit = b.Grant.Meter.Spec().Unit
		}
		l.Rows = append(l.Rows, []string{b.Grant.ID, string(b.Grant.Kind), unit, b.Granted.String(), b.Used.String(),
			b.Expired.String(), b.Voided.String(), b.RolledOver.String(), b.Remaining.String()})
	}
	l.Items = r
	if f != output.Table && f != output.Wide {
		return output.Write(w, f, l)
	}
	if err := output.Write(w, f, l); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nas of %s; usage no grant covered: %s\n", output.Time(r.AsOf), r.Uncovered.StringFixed(2))
	return err
}
