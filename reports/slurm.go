package reports

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/internal/sacct"
)

// WriteSlurmComparison prints Slurm's allocated GPU-hours beside the
// measured ones by account, then the jobs that differ by more than
// tolerance (a share), with why.
func WriteSlurmComparison(w io.Writer, cmp sacct.Comparison, tolerance float64) error {
	hours := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Hours()) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ACCOUNT\tJOBS\tALLOCATED GPU-H\tMEASURED GPU-H\tDIFFERENCE\t")
	for _, a := range cmp.Accounts {
		name := a.Account
		if name == "" {
			name = "(not in sacct)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t\n", name, a.Jobs, hours(a.Allocated), hours(a.Measured), hours(a.Measured-a.Allocated))
	}
	fmt.Fprintf(tw, "total\t%d\t%s\t%s\t%s\t\n", cmp.JobsCompared+cmp.MeasuredNotInJob, hours(cmp.Allocated), hours(cmp.Measured), hours(cmp.Measured-cmp.Allocated))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(cmp.Differences) == 0 {
		_, err := fmt.Fprintf(w, "\nno job differs by more than %.0f%%\n", tolerance*100)
		return err
	}
	fmt.Fprintf(w, "\n%d job(s) differ by more than %.0f%%:\n", len(cmp.Differences), tolerance*100)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tACCOUNT\tTENANT\tALLOCATED GPU-H\tMEASURED GPU-H\tWHY")
	for _, d := range cmp.Differences {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.JobID, d.Account, d.Tenant, hours(d.Allocated), hours(d.Measured), d.Reason)
	}
	return tw.Flush()
}

// WriteSlurmComparisonJSON writes the comparison as JSON, GPU-hours as
// numbers.
func WriteSlurmComparisonJSON(w io.Writer, cmp sacct.Comparison) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(slurmDoc(cmp))
}

// slurmDoc is the comparison as JSON prints it.
func slurmDoc(cmp sacct.Comparison) any {
	type account struct {
		Account           string  `json:"account"`
		Jobs              int     `json:"jobs"`
		AllocatedGPUHours float64 `json:"allocated_gpu_hours"`
		MeasuredGPUHours  float64 `json:"measured_gpu_hours"`
	}
	type job struct {
		Job               string  `json:"job"`
		Account           string  `json:"account"`
		Tenant            string  `json:"tenant"`
		AllocatedGPUHours float64 `json:"allocated_gpu_hours"`
		MeasuredGPUHours  float64 `json:"measured_gpu_hours"`
		Why               string  `json:"why"`
	}
	out := struct {
		From              time.Time `json:"from"`
		To                time.Time `json:"to"`
		AllocatedGPUHours float64   `json:"allocated_gpu_hours"`
		MeasuredGPUHours  float64   `json:"measured_gpu_hours"`
		Accounts          []account `json:"accounts"`
		Differences       []job     `json:"differences"`
	}{From: cmp.From, To: cmp.To, AllocatedGPUHours: cmp.Allocated.Hours(), MeasuredGPUHours: cmp.Measured.Hours(),
		Accounts: []account{}, Differences: []job{}}
	for _, a := range cmp.Accounts {
		out.Accounts = append(out.Accounts, account{a.Account, a.Jobs, a.Allocated.Hours(), a.Measured.Hours()})
	}
	for _, d := range cmp.Differences {
		out.Differences = append(out.Differences, job{d.JobID, d.Account, d.Tenant, d.Allocated.Hours(), d.Measured.Hours(), d.Reason})
	}
	return out
}
