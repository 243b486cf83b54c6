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
