package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/sacct"
	"github.com/gpumeter/gpumeter/reports"
)

func newSlurmCmd(g *globals) *cobra.Command {
	return cli.Group(&cobra.Command{
		Use:     "slurm",
		Short:   "compare Slurm's allocated GPU-hours (sacct) with measured usage",
		Long:    "slurm holds the commands that read Slurm's accounting beside gpumeter's measurements (docs/slurm.md).",
		Example: "  gpumeter slurm compare --period 2026-11 --sacct november.sacct",
	}, newSlurmCompareCmd(g))
}

func newSlurmCompareCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "compare --period YYYY-MM --sacct FILE [--sacct-tz ZONE] [--cluster NAME] [--tolerance 0.05] [-o FORMAT]",
		Short: "set Slurm's allocated GPU-hours beside the measured ones",
		Long: `compare sets Slurm's allocation-based GPU-hours (what sreport reports:
GRES × run time, from sacct --parsable2 output) beside the GPU-hours the
collectors measured for the same jobs (workload slurm/<job id>), by
account, and lists the jobs whose counts differ by more than the
tolerance, with why: GPUs allocated but idle, jobs no collector saw, GPUs
outside the job's allocation (or missing from AccountingStorageTRES), and
measured jobs the export lacks. The period is a UTC month; export sacct
for the same range (docs/slurm.md).`,
		Example: "  gpumeter slurm compare --period 2026-11 --sacct november.sacct -o json\n" +
			"  sacct ... | gpumeter slurm compare --period 2026-11 --sacct - --sacct-tz Europe/Berlin",
		Args: cli.NoArgs,
	}
	fs := cmd.Flags()
	period := fs.String("period", "", "the UTC month, YYYY-MM (required)")
	file := fs.String("sacct", "", "sacct --parsable2 output for the period, or - for stdin (required)")
	tz := cli.Zone(fs, "sacct-tz", "the time zone sacct printed its times in; needed unless they carry offsets")
	cluster := fs.String("cluster", "", "the cluster, for output without a Cluster column")
	tolerance := fs.Float64("tolerance", 0.05, "share of a job's allocation the two counts may differ by unlisted")
	out := cli.AddOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if *period == "" || *file == "" {
			return cli.Usagef("--period and --sacct are required")
		}
		p, err := billing.MonthlyPeriod(*period, time.UTC)
		if err != nil {
			return cli.Usagef("--period: %v", err)
		}
		if *tolerance < 0 || *tolerance >= 1 {
			return cli.Usagef("--tolerance %v: want a share in [0, 1)", *tolerance)
		}
		jobs, err := sacct.ParseFile(*file, sacct.Options{Cluster: *cluster, Location: *tz})
		if err != nil {
			return cli.Usage(err)
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
		return reports.WriteSlurm(g.stdout, out.Format, cmp, *tolerance)
	}
	return cmd
}
