package billing

import (
	"context"
	"fmt"
)

// RunScheduled is the invoice job `gpumeter serve` runs on the billing
// schedule: the previous month, keeping drafts under review, logging what
// changed. It fails when any customer could not be invoiced.
func (r *Runner) RunScheduled(ctx context.Context) error {
	rep, err := r.Run(ctx, RunRequest{Period: PreviousMonth(r.now()), KeepDrafts: true}, nil)
	if err != nil {
		return err
	}
	for _, o := range rep.Outcomes {
		if o.Action != ActionUnchanged {
			r.logger.Info("invoice run", "outcome", o.String())
		}
	}
	if n := rep.Failed(); n > 0 {
		return fmt.Errorf("%d customer(s) could not be invoiced", n)
	}
	return nil
}
