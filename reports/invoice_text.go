package reports

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
)

// WriteInvoiceText prints an invoice for a terminal (invoice show): the
// header, one row per line with corrections naming what they correct,
// and the stored subtotal, tax and total; with credits, the taxable
// subtotal, tax, total after tax, prepaid credit and amount due, then the
// grants' balances.
func WriteInvoiceText(w io.Writer, inv *billing.Invoice) error {
	ew := &errWriter{w: w}
	loc, err := time.LoadLocation(inv.TimeZone)
	if err != nil {
		loc = time.UTC
	}
	number := cmp.Or(inv.Number, "(draft, no number yet)")
	fmt.Fprintf(ew, "invoice %s  %s  [%s]\n", number, inv.ID, inv.Status)
	if inv.Status == billing.StatusVoid {
		fmt.Fprintf(ew, "void: %s\n", inv.VoidReason)
	}
	fmt.Fprintf(ew, "from    %s\nto      %s (%s, department %s)\n", inv.Issuer.Name, inv.Customer.Name, inv.Tenant, dash(inv.Customer.Department))
	fmt.Fprintf(ew, "period  %s: %s to %s (%s)\n", inv.PeriodLabel, inv.PeriodStart.In(loc).Format("2006-01-02 15:04"),
		inv.PeriodEnd.In(loc).Format("2006-01-02 15:04"), inv.TimeZone)
	fmt.Fprintf(ew, "due     %s (%s)\n", dueText(inv), paymentTerms(inv))
	fmt.Fprintf(ew, "book    %s, inputs %s\n\n", inv.BookVersion, short(inv.InputsHash))
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NO\tKIND\tSKU\tMETER\tQUANTITY\tAMOUNT\tDESCRIPTION\t")
	for _, l := range inv.Lines {
		qty := strings.TrimSpace(l.Quantity.String() + " " + unitLabel(l.Unit))
		if l.GrantID != "" && l.Meter == "" {
			qty = "-" // a grant of money: the amount is all there is
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", l.No, l.Kind, dash(l.SKU), dash(string(l.Meter)),
			qty, inv.Money(l.AmountMinor), l.Description)
	}
	tw.Flush()
	if hasCredits(inv) {
		writeCreditTotalsText(ew, inv, loc)
	} else {
		fmt.Fprintf(ew, "\nsubtotal  %s %s\ntax       %s %s\ntotal     %s %s\n", inv.Money(inv.SubtotalMinor), inv.Currency.Code,
			inv.Money(inv.TaxMinor), inv.Currency.Code, inv.Money(inv.TotalMinor), inv.Currency.Code)
	}
	if line, _ := unpricedUsage(inv.Unpriced); line != "" {
		fmt.Fprintf(ew, "\n%s\n", line)
	}
	return ew.err
}

// writeCreditTotalsText prints the totals of an invoice with credits (the
// lines above list every credit line) and the grants' accounts.
func writeCreditTotalsText(w io.Writer, inv *billing.Invoice, loc *time.Location) {
	type total struct {
		label string
		minor int64
	}
	totals := []total{{"subtotal (taxable)", inv.SubtotalMinor}, {"tax", inv.TaxMinor}}
	if slices.ContainsFunc(inv.Lines, isPrepaidLine) {
		totals = append(totals, total{"total after tax", inv.SubtotalMinor + inv.TaxMinor}, total{"prepaid credit", inv.PrepaidMinor})
	}
	totals = append(totals, total{"amount due", inv.TotalMinor})
	// Labels to the left, amounts aligned on the right.
	width := 0
	for _, t := range totals {
		width = max(width, len(inv.Money(t.minor)))
	}
	fmt.Fprintln(w)
	for _, t := range totals {
		fmt.Fprintf(w, "%-18s  %*s %s\n", t.label, width, inv.Money(t.minor), inv.Currency.Code)
	}
	rows, expiring := creditBalances(inv, loc)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\ncredit balances over the period\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GRANT\tUNIT\tBEFORE\tUSED\tENDED\tAFTER\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Description, r.Unit, r.Before, r.Used, r.Ended, r.After)
	}
	tw.Flush()
	fmt.Fprintf(w, "%s\n", balancesNote)
	for _, e := range expiring {
		fmt.Fprintf(w, "%s\n", e)
	}
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}
