package reports

import (
	"fmt"
	"io"
	"time"

	"github.com/gpumeter/gpumeter/internal/rollup"
)

// WriteRollupRun prints what a run of the scheduled rollup did.
func WriteRollupRun(w io.Writer, res rollup.RunResult) error {
	for _, r := range res.Closed {
		if _, err := fmt.Fprintf(w, "closed %s .. %s\n", r.From.Format(time.RFC3339), r.To.Format(time.RFC3339)); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "recomputed %d hour(s) with late samples\n", len(res.Late))
	return err
}

// WriteRollupRange prints that [from, to) was rolled up and how far the
// hourly rollups are closed now (st; ok false: never), since invoices
// wait for closed hours, and what closes the rest.
func WriteRollupRange(w io.Writer, from, to time.Time, st rollup.State, ok bool, grace time.Duration) error {
	if _, err := fmt.Fprintf(w, "rolled up %s .. %s\n", from.Format(time.RFC3339), to.Format(time.RFC3339)); err != nil {
		return err
	}
	closed := st.ClosedThrough.Format(time.RFC3339)
	var err error
	switch {
	case !ok || st.ClosedThrough.Before(from.UTC().Truncate(time.Hour)):
		if !ok {
			closed = "nothing"
		}
		_, err = fmt.Fprintf(w, "hourly rollups are closed through %s: raw samples before %s are not all rolled up, so this range stays open to invoicing; `gpumeter rollup --scheduled` rolls up and closes every hour past the grace (%s)\n",
			closed, from.Format(time.RFC3339), grace)
	case st.ClosedThrough.Before(to):
		_, err = fmt.Fprintf(w, "hourly rollups are closed through %s; later hours are within the rollup grace (%s) and close on a later `gpumeter rollup --scheduled`\n",
			closed, grace)
	default:
		_, err = fmt.Fprintf(w, "hourly rollups are closed through %s\n", closed)
	}
	return err
}

// nothingToDrop is what retention says when no month may go yet.
const nothingToDrop = "nothing to drop (months are kept until invoiced, rolled up and past the window)"

// RetentionPlan is what a retention run would do now: the months of raw
// samples it would drop, and the admission log's rows it would delete
// (those ended before LogBefore).
type RetentionPlan struct {
	Months    []time.Time
	LogRows   int64
	LogBefore time.Time
}

// WriteRetentionPlan prints what a retention run would do now.
func WriteRetentionPlan(w io.Writer, p RetentionPlan) error {
	if len(p.Months) == 0 && p.LogRows == 0 {
		_, err := fmt.Fprintln(w, nothingToDrop)
		return err
	}
	for _, m := range p.Months {
		if _, err := fmt.Fprintf(w, "would drop raw samples of %s (partition %s)\n", m.Format("2006-01"), m.Format("200601")); err != nil {
			return err
		}
	}
	if p.LogRows > 0 {
		rows := "rows"
		if p.LogRows == 1 {
			rows = "row"
		}
		if _, err := fmt.Fprintf(w, "would delete %d %s of the admission log that ended before %s\n", p.LogRows, rows, p.LogBefore.UTC().Format(time.RFC3339)); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(w, "dry run: nothing dropped")
	return err
}

// WriteRetentionRun prints the months a retention run dropped; done says
// the run finished (a failed run lists what it dropped before it failed).
func WriteRetentionRun(w io.Writer, dropped []time.Time, done bool) error {
	for _, m := range dropped {
		if _, err := fmt.Fprintf(w, "dropped raw samples of %s\n", m.Format("2006-01")); err != nil {
			return err
		}
	}
	if done && len(dropped) == 0 {
		_, err := fmt.Fprintln(w, nothingToDrop)
		return err
	}
	return nil
}
