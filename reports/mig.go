package reports

import (
	"fmt"
	"io"

	"github.com/gpumeter/gpumeter/internal/partition"
	"github.com/gpumeter/gpumeter/internal/partition/nvmlapply"
)

// WritePlan prints a MIG partition plan: the summary, how much of the
// reserved and pending demand it meets, each GPU it changes (instances
// removed "-", created "+" and kept "="), the demand left unmet, and the
// GPUs of the fleet it did not plan, with the reason.
func WritePlan(w io.Writer, p partition.Plan) error {
	ew := &errWriter{w: w}
	s := p.Summary
	fmt.Fprintf(ew, "plan: %d GPUs, %d to change: %d instances to create, %d to destroy, %d kept (%d change tenant)\n",
		s.GPUs, s.GPUsChanged, s.Created, s.Destroyed, s.Kept, s.Reassigned)
	fmt.Fprintf(ew, "demand met (compute slices, 7 = one GPU): reserved %d of %d (%s), pending %d of %d (%s)\n",
		s.ReservedMetSlices, s.ReservedSlices, percent(s.ReservedMetSlices, s.ReservedSlices),
		s.PendingMetSlices, s.PendingSlices, percent(s.PendingMetSlices, s.PendingSlices))
	if s.GPUsChanged > 0 {
		fmt.Fprintln(ew, "\nchanges:")
	}
	for _, g := range p.GPUs {
		if !g.Changed {
			continue
		}
		fmt.Fprintf(ew, "  %s %s (%s)\n", g.Host, g.UUID, g.Model)
		for _, in := range g.Remove {
			fmt.Fprintf(ew, "    - %-11s @%d %s\n", in.Profile, in.Start, in.UUID)
		}
		for _, in := range g.Instances {
			mark, who := "=", in.Tenant
			if in.Action == partition.Create {
				mark = "+"
			}
			if who == "" {
				who = "(free)"
			}
			if in.Busy {
				who += " busy"
			}
			fmt.Fprintf(ew, "    %s %-11s @%d %s\n", mark, in.Profile, in.Start, who)
		}
	}
	if len(p.Unmet) > 0 {
		fmt.Fprintln(ew, "\nunmet:")
	}
	for _, u := range p.Unmet {
		sku := u.Profile
		if u.Model != "" {
			sku = u.Model + "/" + u.Profile
		}
		fmt.Fprintf(ew, "  %s %s %s x%d: %s\n", u.Tenant, u.Class, sku, u.Count, u.Reason)
	}
	if len(p.Skipped) > 0 {
		fmt.Fprintf(ew, "\nnot planned (%d GPUs):\n", len(p.Skipped))
	}
	for _, s := range p.Skipped {
		fmt.Fprintf(ew, "  %s %s (%s): %s\n", s.Host, s.UUID, s.Model, s.Reason)
	}
	return ew.err
}

// percent is a of b to one place, "-" when b is 0. It shows a share of
// compute slices, not an amount.
func percent(a, b int) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}

// WriteApply prints what mig apply did ("done", "not done") or would do
// (a dry run: "would"), one step a line, then the GPUs it left alone. ok
// says the apply succeeded; only then does a dry run end by saying that
// nothing changed.
func WriteApply(w io.Writer, rep nvmlapply.ApplyReport, ok bool) error {
	ew := &errWriter{w: w}
	for _, st := range rep.Steps {
		state := "done"
		switch {
		case rep.DryRun:
			state = "would"
		case !st.Done:
			state = "not done"
		}
		id := ""
		if st.Action == partition.Destroy || st.Done {
			id = fmt.Sprintf(" (GPU instance %d)", st.GPUInstanceID)
		}
		fmt.Fprintf(ew, "%-8s %-7s %s %-11s @%d%s\n", state, st.Action, st.GPU, st.Profile, st.Start, id)
	}
	if len(rep.NotOnHost) > 0 {
		fmt.Fprintf(ew, "%d GPUs of the plan are on other hosts\n", len(rep.NotOnHost))
	}
	if len(rep.Unchanged) > 0 {
		fmt.Fprintf(ew, "%d GPUs already match the plan\n", len(rep.Unchanged))
	}
	if rep.DryRun && ok {
		fmt.Fprintln(ew, "dry run: nothing changed; add --yes to apply")
	}
	return ew.err
}
