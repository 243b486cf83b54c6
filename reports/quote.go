package reports

import (
	"cmp"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/pricing"
)

// WriteQuote prints a priced result as aligned columns: one row per line,
// the tier breakdown indented under it, the total, then what reservations
// covered, the usage the book does not price, and notes on reservation
// fees and true-ups. Times are shown in the location of r.Start.
func WriteQuote(w io.Writer, r pricing.Result) error {
	ew := &errWriter{w: w}
	tenant := cmp.Or(r.Tenant, "(none)")
	fmt.Fprintf(ew, "tenant %s, book %s, %s, %s to %s\n\n", tenant, r.BookVersion, r.Currency.Code,
		r.Start.Format(time.RFC3339), r.End.Format(time.RFC3339))
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SKU\tMETER\tKIND\tFROM\tTO\tQUANTITY\tUNIT PRICE\tAMOUNT\tROUNDED\t")
	when := func(t time.Time) string { return t.In(r.Start.Location()).Format("2006-01-02 15:04") }
	for _, l := range r.Lines {
		price := ""
		if l.UnitPrice != nil {
			price = l.UnitPrice.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", dash(l.SKU), dash(string(l.Meter)), l.Kind,
			when(l.From), when(l.To), l.Quantity.String()+" "+l.Unit, price, l.Amount.StringFixed(pricing.StoragePlaces),
			l.AmountRounded.StringFixed(r.Currency.MinorUnits))
		for _, t := range l.Tiers {
			price := t.UnitPrice.String()
			if !t.FlatFee.IsZero() {
				price += " + " + t.FlatFee.String() + " flat"
			}
			fmt.Fprintf(tw, "\t\t  tier %d\t\t\t%s\t%s\t%s\t\t\n", t.TierIndex+1, t.Quantity.String(), price, t.Amount.String())
		}
	}
	fmt.Fprintf(tw, "TOTAL\t\t\t\t\t\t\t\t%s %s\t\n", r.Total.StringFixed(r.Currency.MinorUnits), r.Currency.Code)
	tw.Flush()
	if len(r.Reservations) > 0 {
		fmt.Fprintln(ew, "\ngpu_hours by coverage:")
		tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SKU\tRESERVED\tCOVERED\tUNUSED\tON DEMAND\tBURST\t")
		for _, ru := range r.Reservations {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", ru.SKU, ru.ReservedGPUHours, ru.CoveredGPUHours,
				ru.UnusedGPUHours, ru.OnDemandGPUHours, ru.BurstGPUHours)
		}
		tw.Flush()
	}
	if len(r.Unpriced) > 0 {
		fmt.Fprintln(ew, "\nnot priced by this book (not billed):")
		for _, u := range r.Unpriced {
			fmt.Fprintf(ew, "  %s %s %s\n", u.SKU, u.Meter, u.Quantity)
		}
	}
	notes := ""
	for _, l := range r.Lines {
		if l.Kind == pricing.KindTrueUp || l.Kind == pricing.KindReservationFee {
			notes += fmt.Sprintf("  %s: %s\n", l.Kind, l.Description)
		}
	}
	if notes != "" {
		fmt.Fprint(ew, "\nnotes:\n"+notes)
	}
	return ew.err
}

// dash shows an empty cell as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
