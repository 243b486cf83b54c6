package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/importer"
	"github.com/gpumeter/gpumeter/internal/sacct"
)

func newSlurmCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "slurm",
		Short:   "compare Slurm's allocated GPU-hours (sacct) with measured usage",
		Long:    "slurm holds the commands that read Slurm's accounting beside gpumeter's measurements (docs/slurm.md).",
		Example: "  gpumeter slurm compare --period 2026-11 --sacct november.sacct",
		Args:    subcommandArgs,
		RunE:    wantSubcommand,
	}
	cmd.AddCommand(newSlurmCompareCmd(g))
	return cmd
}

func newSlurmCompareCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "compare --period YYYY-MM --sacct FILE [--sacct-tz ZONE] [--cluster NAME] [--tolerance 0.05] [--json]",
		Short: "set Slurm's allocated GPU-hours beside the measured ones",
		Long: `compare sets Slurm's allocation-based GPU-hours (what sreport reports:
GRES × run time, from sacct --parsable2 output) beside the GPU-hours the
collectors measured for the same jobs (workload slurm/<job id>), by
account, and lists the jobs whose counts differ by more than the
tolerance, with why: GPUs allocated but idle, jobs no collector saw, GPUs
outside the job's allocation (or missing from AccountingStorageTRES), and
measured jobs the export lacks. The period is a UTC month; export sacct
for the same range (docs/slurm.md).`,
		Example: "  gpumeter slurm compare --period 2026-11 --sacct november.sacct --json\n" +
			"  sacct ... | gpumeter slurm compare --period 2026-11 --sacct - --sacct-tz Europe/Berlin",
		Args: noArgs,
	}
	fs := cmd.Flags()
	period := fs.String("period", "", "the UTC month, YYYY-MM (required)")
	file := fs.String("sacct", "", "sacct --parsable2 output for the period, or - for stdin (required)")
	tz := fs.String("sacct-tz", "", "the time zone sacct printed its times in; needed unless they carry offsets")
	cluster := fs.String("cluster", "", "the cluster, for output without a Cluster column")
	tolerance := fs.Float64("tolerance", 0.05, "share of a job's allocation the two counts may differ by unlisted")
	asJSON := fs.Bool("json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if *period == "" || *file == "" {
			return usageErrorf("--period and --sacct are required")
		}
		p, err := billing.MonthlyPeriod(*period, time.UTC)
		if err != nil {
			return usageErrorf("--period: %v", err)
		}
		if *tolerance < 0 || *tolerance >= 1 {
			return usageErrorf("--tolerance %v: want a share in [0, 1)", *tolerance)
		}
		opts := sacct.Options{Cluster: *cluster}
		if *tz != "" {
			if opts.Location, err = time.LoadLocation(*tz); err != nil {
				return usageErrorf("--sacct-tz %q: %v", *tz, err)
			}
		}
		jobs, err := parseSacctFile(*file, opts)
		if err != nil {
			return err
		}
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		usage, err := s.SlurmJobUsage(ctx, p.Start, p.End)
		if err != nil {
			return err
		}
		in := sacct.CompareInput{From: p.Start, To: p.End, Jobs: jobs, Tolerance: *tolerance}
		for _, u := range usage {
			in.Measured = append(in.Measured, sacct.Measured{JobID: u.JobID, Tenant: u.Tenant, GPUMicroseconds: u.GPUMicroseconds})
		}
		cmp, err := sacct.Compare(in)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeComparisonJSON(g, cmp)
		}
		hours := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Hours()) }
		tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
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
			fmt.Fprintf(g.stdout, "\nno job differs by more than %.0f%%\n", *tolerance*100)
			return nil
		}
		fmt.Fprintf(g.stdout, "\n%d job(s) differ by more than %.0f%%:\n", len(cmp.Differences), *tolerance*100)
		tw = tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tACCOUNT\tTENANT\tALLOCATED GPU-H\tMEASURED GPU-H\tWHY")
		for _, d := range cmp.Differences {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.JobID, d.Account, d.Tenant, hours(d.Allocated), hours(d.Measured), d.Reason)
		}
		return tw.Flush()
	}
	return cmd
}

func writeComparisonJSON(g *globals, cmp sacct.Comparison) error {
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
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// parseSacctFile reads sacct output ("-": stdin); problems name the file,
// line and field and are input errors (exit 2).
func parseSacctFile(path string, opts sacct.Options) ([]sacct.Job, error) {
	name, in := path, os.Stdin
	if path == "-" {
		name = "stdin"
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, usageError{err}
		}
		defer f.Close()
		in = f
	}
	jobs, err := sacct.Parse(in, opts)
	var ve *importer.ValidationError
	switch {
	case errors.As(err, &ve):
		ve.InFile(name)
		return nil, usageError{ve}
	case err != nil:
		return nil, usageError{fmt.Errorf("%s: %w", name, err)}
	}
	return jobs, nil
}
