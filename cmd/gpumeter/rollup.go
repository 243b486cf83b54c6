package main

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/reports"
)

func newRollupCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollup (--from TIME --to TIME | --scheduled)",
		Short: "recompute hourly rollups for a range, or run the scheduled job once",
		Long: `rollup recomputes usage_hourly by hand for a range (rounded out to whole
hours), closing it when nothing before it is left unrolled, or runs the
scheduled job once (--scheduled): it rolls up and closes every hour past
rollup.grace and recomputes hours with late samples. Invoices wait for
closed hours (docs/import.md: import, rollup, invoice). TIME is RFC 3339 or
YYYY-MM-DD (00:00 UTC).`,
		Example: "  gpumeter rollup --from 2026-11-01 --to 2026-12-01\n  gpumeter rollup --scheduled",
		Args:    cli.NoArgs,
	}
	fs := cmd.Flags()
	from := cli.Time(fs, "from", "start of the range (RFC 3339 or YYYY-MM-DD), rounded down to the hour")
	to := cli.Time(fs, "to", "end of the range, exclusive, rounded up to the hour")
	scheduled := fs.Bool("scheduled", false, "run the scheduled job once: closed hours and late samples")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		f, t := *from, *to
		switch {
		case *scheduled == (!f.IsZero() || !t.IsZero()):
			return cli.Usagef("give either --from and --to, or --scheduled")
		case *scheduled:
		case f.IsZero() || t.IsZero():
			return errors.Join(cli.Required("from", f), cli.Required("to", t))
		case !t.After(f):
			return cli.Usagef("--to must be after --from")
		}
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		job := rollup.New(s, g.cfg.Rollup, time.Now, g.logger)
		if *scheduled {
			res, err := job.Run(ctx)
			if err != nil {
				return err
			}
			return reports.WriteRollupRun(g.stdout, res)
		}
		if err := job.RollupRange(ctx, f, t); err != nil {
			return err
		}
		// Invoices wait for closed hours: say how far that is now.
		st, ok, err := s.LoadRollupState(ctx, rollup.StateKey)
		if err != nil {
			return err
		}
		return reports.WriteRollupRange(g.stdout, f, t, st, ok, g.cfg.Rollup.Grace)
	}
	return cmd
}

func newRetentionCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "retention [--raw-days N] [--dry-run]",
		Short: "drop raw-sample months past the retention window; prune the admission log",
		Long: `retention drops, once, the months (partitions) of raw samples past the
retention window (retention.raw_days of the config, or --raw-days), never a
month not yet invoiced or rolled up; serve runs it on retention.schedule.
It also deletes the admission log's rows that ended more than 7 days ago,
where the server does not expire them by TTL (docs/operations.md).
--dry-run lists the months it would drop and counts the admission log's
rows it would delete, and drops and deletes nothing.`,
		Example: "  gpumeter retention --dry-run\n  gpumeter retention --raw-days 180",
		Args:    cli.NoArgs,
	}
	fs := cmd.Flags()
	days := fs.Int("raw-days", g.cfg.Retention.RawDays, "keep raw samples this many days")
	dryRun := fs.Bool("dry-run", false, "list the months (partitions) a run would drop now and count the admission log's rows it would delete; drop and delete nothing")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		cli.ConfigDefault(fs, "raw-days", days, g.cfg.Retention.RawDays)
		cfg := g.cfg.Retention
		cfg.RawDays = *days
		if err := cfg.Validate(); err != nil {
			return cli.Usage(err)
		}
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		job := rollup.NewRetention(s, cfg, time.Now, g.logger)
		if *dryRun {
			months, err := job.Plan(ctx)
			if err != nil {
				return err
			}
			rows, before, err := job.PlanAdmissionLog(ctx)
			if err != nil {
				return err
			}
			return reports.WriteRetentionPlan(g.stdout, reports.RetentionPlan{Months: months, LogRows: rows, LogBefore: before})
		}
		dropped, err := job.Run(ctx)
		if werr := reports.WriteRetentionRun(g.stdout, dropped, err == nil); err == nil {
			err = werr
		}
		return err
	}
	return cmd
}
