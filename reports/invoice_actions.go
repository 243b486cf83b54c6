package reports

import (
	"cmp"
	"fmt"
	"io"

	"github.com/gpumeter/gpumeter/internal/billing"
)

// WriteFinalized lists what finalize did, one outcome a line, and the
// count.
func WriteFinalized(w io.Writer, outs []billing.Outcome) error {
	ew := &errWriter{w: w}
	for _, o := range outs {
		fmt.Fprintln(ew, o)
	}
	fmt.Fprintf(ew, "finalized %d invoice(s)\n", len(outs))
	return ew.err
}

// WriteVoided says which invoice was voided, and why.
func WriteVoided(w io.Writer, inv *billing.Invoice) error {
	_, err := fmt.Fprintf(w, "voided %s (%s): %s\n", inv.ID, cmp.Or(inv.Number, "-"), inv.VoidReason)
	return err
}
