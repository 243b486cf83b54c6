package reports

import (
	"fmt"
	"io"

	"github.com/gpumeter/gpumeter/internal/partition"
)

// WritePlanWithFiles prints the plan, then where its files were written
// (planPath, migPartedPath; empty: not written).
func WritePlanWithFiles(w io.Writer, p partition.Plan, planPath, migPartedPath string) error {
	if err := WritePlan(w, p); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	ew := &errWriter{w: w}
	if planPath != "" {
		fmt.Fprintf(ew, "\nwrote plan to %s (apply it on each host: gpumeter mig apply --plan %s)\n", planPath, planPath)
	}
	if migPartedPath != "" {
		fmt.Fprintf(ew, "wrote mig-parted config to %s\n", migPartedPath)
	}
	return ew.err
}
