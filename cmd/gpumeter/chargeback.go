package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/sacct"
	"github.com/gpumeter/gpumeter/reports"
)

func newChargebackCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "chargeback --period YYYY-MM [--format csv|html|pdf|json] [--idle MODE] [--efficiency] [--out FILE]",
		Short: "charge a month's GPU use to departments and tenants",
		Long: `chargeback charges the month's GPU use to departments and tenants at the
config's internal rate card (chargeback.book): GPU-hours by SKU (MIG in
GPU-equivalents), SM-active hours and utilization, memory GiB-hours,
energy kWh and kgCO2e, cost per meter, share of the fleet, and idle
capacity as its own row or shared (--idle own_row|by_use|by_weight|evenly).
Rows add up exactly to the fleet cost in every mode. --efficiency adds
held-but-idle GPU-hours and utilization per department and tenant (HTML,
PDF and JSON; the CSV stays the cost table). With --slurm-accounts,
tenants that are Slurm accounts are charged to their parent account at
--slurm-level (docs/slurm.md).`,
		Example: "  gpumeter --config gpumeter.yaml chargeback --period 2026-11 --format html --out chargeback.html\n" +
			"  gpumeter --config gpumeter.yaml chargeback --period 2026-11 --idle by_use --efficiency --format json",
		Args: cli.NoArgs,
	}
	fs := cmd.Flags()
	period := fs.String("period", "", "the month, YYYY-MM, in chargeback.time_zone (required)")
	format := fs.String("format", "csv", "csv, html, pdf or json")
	idle := fs.String("idle", "", "idle capacity: own_row, by_use, by_weight or evenly (default: the config's chargeback.idle)")
	out := fs.String("out", "", "write here instead of standard output")
	slurmAccounts := fs.String("slurm-accounts", "", "sacctmgr --parsable2 show assoc format=Account,ParentName,User output:\n"+
		"tenants that are Slurm accounts are charged to their parent account at --slurm-level")
	slurmLevel := fs.Int("slurm-level", 1, "with --slurm-accounts: the depth below root whose accounts are the departments (1: top level)")
	efficiency := fs.Bool("efficiency", false, "add the efficiency section: held-but-idle GPU-hours and utilization per department and tenant (docs/insights.md)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if *period == "" {
			return cli.Usagef("--period is required, e.g. --period %s", billing.PreviousMonth(time.Now()))
		}
		if _, err := billing.MonthlyPeriod(*period, time.UTC); err != nil {
			return cli.Usagef("--period: %v", err)
		}
		write, err := reports.ChargebackRendererFor(*format, g.cfg.Reports.PDF)
		if err != nil {
			return fmt.Errorf("--format %w", err)
		}
		if *format == "pdf" && *out == "" && reports.IsTerminal(g.stdout) {
			return errPDFToTerminal
		}
		cfg := g.cfg.Chargeback
		if *idle != "" {
			cfg.Idle = *idle
		}
		if err := cfg.Validate(); err != nil {
			return cli.Usage(err)
		}
		if cfg.Book == "" {
			return cli.Usagef("chargeback.book: required in the config (--config): the rate card departments are charged by")
		}
		req := billing.ChargebackRequest{Period: *period, DailyUsage: *efficiency}
		if *slurmLevel < 1 {
			return cli.Usagef("--slurm-level %d: want 1 or more", *slurmLevel)
		}
		if *slurmAccounts != "" {
			accounts, err := sacct.ReadAccountsFile(*slurmAccounts)
			if err != nil {
				return err
			}
			req.Departments = accounts.Departments(*slurmLevel)
		}
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		rep, err := billing.Chargeback(ctx, s, cfg, req)
		if err != nil {
			return err
		}
		if *efficiency {
			svc := insightsService(s, insights.Prices{}, g)
			if rep.Efficiency, err = svc.ChargebackEfficiency(ctx, rep.Period.Start, rep.Period.End, req.Departments); err != nil {
				return err
			}
		}
		if *out == "" {
			return write(g.stdout, rep)
		}
		if err := reports.WriteFileAtomic(*out, func(w io.Writer) error { return write(w, rep) }); err != nil {
			return err
		}
		fmt.Fprintf(g.stderr, "wrote %s\n", *out)
		return nil
	}
	return cmd
}
