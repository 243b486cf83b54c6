package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/shopspring/decimal"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/webhook"
	"github.com/gpumeter/gpumeter/reports"
)

func newInsightsCmd(g *globals) *cobra.Command {
	return cli.Group(&cobra.Command{
		Use:   "insights",
		Short: "efficiency, right-sizing, anomalies and capacity from metered usage",
		Long: `insights reads the metered usage for what it says about the fleet: GPUs held
but idle and their cost, the profiles that would have been enough, usage and
spend far from a tenant's seasonal baseline, and when demand outgrows each
GPU model. Periods are whole UTC hours; billing customers are priced by
their book and contract, other tenants by --book (without it they get no
money figures). The same reports are under /v1/insights/* and in the portal;
docs/insights.md describes the methods.`,
		Example: "  gpumeter insights efficiency --period 2026-11\n  gpumeter insights capacity --weeks 8",
	},
		newInsightsPeriodCmd(g, "efficiency", "held-but-idle GPU-hours and their cost, per tenant and department",
			`efficiency reports GPU-hours held, the SM-active share, unmeasured time
and held-but-idle GPU-hours with their cost, per tenant and department.`),
		newInsightsPeriodCmd(g, "rightsize", "the smallest MIG or vGPU profile that would have held each tenant's demand",
			`rightsize finds the smallest MIG or vGPU profile that would have held each
tenant's demand, what it saves, and the MIG layout of the right-sized demand.`),
		newInsightsPeriodCmd(g, "anomalies", "hours and days far from the tenant's seasonal baseline",
			`anomalies lists the hours (gpu_hours) and days (spend) of the period far
from the tenant's seasonal baseline, from the weeks before; --save stores
them and enqueues each new one once as an insight.anomaly webhook.`),
		newInsightsCapacityCmd(g))
}

// periodFlags are the period and pricing flags of the period subcommands.
type periodFlags struct {
	period, tenant, book string
	from, to             *time.Time
}

func (p *periodFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&p.period, "period", "", "a UTC month, YYYY-MM (or --from and --to)")
	p.from = cli.Time(fs, "from", "start, RFC 3339 or YYYY-MM-DD, a whole UTC hour")
	p.to = cli.Time(fs, "to", "end, exclusive, RFC 3339 or YYYY-MM-DD, a whole UTC hour")
	fs.StringVar(&p.tenant, "tenant", "", "only this tenant")
	fs.StringVar(&p.book, "book", "", "price book for tenants that are not billing customers")
}

// request reads the period flags into a validated request.
func (p *periodFlags) request() (insights.Request, error) {
	r := insights.Request{From: *p.from, To: *p.to, Tenant: p.tenant}
	if p.period != "" {
		if !r.From.IsZero() || !r.To.IsZero() {
			return r, cli.Usagef("give --period or --from and --to, not both")
		}
		m, err := billing.MonthlyPeriod(p.period, time.UTC)
		if err != nil {
			return r, cli.Usagef("--period: %v", err)
		}
		r.From, r.To = m.Start, m.End
	} else if err := errors.Join(cli.Required("from", r.From), cli.Required("to", r.To)); err != nil {
		return r, err
	}
	return r, cli.Usage(r.Validate())
}

func newInsightsPeriodCmd(g *globals, sub, short, long string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   sub + " (--period YYYY-MM | --from TIME --to TIME) [--tenant T] [--book FILE] [-o FORMAT]",
		Short: short,
		Long: long + `

TIME is RFC 3339 or YYYY-MM-DD, a whole UTC hour. Billing customers are
priced by their book and contract, other tenants by --book (without it they
get no money figures).`,
		Example: "  gpumeter insights " + sub + " --period 2026-11\n" +
			"  gpumeter insights " + sub + " --from 2026-11-01 --to 2026-11-08 --tenant acme --book pricing/books/gpu-cloud.yaml -o json",
		Args: cli.NoArgs,
	}
	fs := cmd.Flags()
	var p periodFlags
	p.register(fs)
	out := cli.AddOutputFlag(cmd)
	save := false
	if sub == "anomalies" {
		fs.BoolVar(&save, "save", false, "store the anomalies and enqueue each new one as an insight.anomaly webhook")
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		req, err := p.request()
		if err != nil {
			return err
		}
		prices, err := insightPrices(g, p.book)
		if err != nil {
			return err
		}
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		svc := insightsService(s, prices, g)
		switch sub {
		case "efficiency":
			rep, err := svc.Efficiency(ctx, req, nil)
			if err != nil {
				return err
			}
			return reports.WriteEfficiency(g.stdout, out.Format, rep)
		case "rightsize":
			rep, err := svc.RightSize(ctx, req)
			if err != nil {
				return err
			}
			return reports.WriteRightSize(g.stdout, out.Format, rep)
		}
		found, fresh, err := svc.Detect(ctx, req, save)
		if err != nil {
			return err
		}
		if save {
			fmt.Fprintf(g.stderr, "%d anomalies, %d new: stored and enqueued as webhooks\n", len(found), len(fresh))
		}
		return reports.WriteAnomalies(g.stdout, out.Format, found)
	}
	return cmd
}

func newInsightsCapacityCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "capacity [--to TIME] [--until TIME] [--weeks N] [--target F] [-o FORMAT]",
		Short: "when demand outgrows each GPU model's capacity",
		Long: `capacity forecasts, per GPU model, when demand (trend plus weekly season,
fitted to the weeks of history before --to) exceeds the target share of the
GPUs.`,
		Example: "  gpumeter insights capacity\n  gpumeter insights capacity --weeks 8 --target 0.8 --until 2027-06-01",
		Args:    cli.NoArgs,
	}
	fs := cmd.Flags()
	to := cli.Time(fs, "to", "end of the history, a whole UTC hour (default: the current hour)")
	until := cli.Time(fs, "until", "project up to here (default: 90 days after --to)")
	weeks := fs.Int("weeks", insights.DefaultCapacityWeeks, "weeks of history to fit (2 to 52)")
	target := fs.String("target", insights.DefaultCapacityTarget, "share of the GPUs that counts as full, within (0, 1]")
	out := cli.AddOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		req := insights.CapacityRequest{To: cmp.Or(*to, time.Now().UTC().Truncate(time.Hour)), Weeks: *weeks}
		req.Until = cmp.Or(*until, req.To.Add(insights.DefaultCapacityHorizon))
		var err error
		if req.Target, err = decimal.NewFromString(*target); err != nil {
			return cli.Usagef("--target: %q is not a number", *target)
		}
		if err := req.Validate(); err != nil {
			return cli.Usage(err)
		}
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		svc := insightsService(s, insights.Prices{}, g)
		fc, err := svc.Capacity(ctx, req)
		if err != nil {
			return err
		}
		return reports.WriteCapacity(g.stdout, out.Format, fc)
	}
	return cmd
}

// insightPrices prices billing customers by their book and contract, in
// their time zone, and everyone else by book (when given), in UTC.
func insightPrices(g *globals, book string) (insights.Prices, error) {
	p, err := insights.CustomerPrices(g.cfg.Billing.Customers, os.ReadFile)
	if err == nil && book != "" {
		if p.Default, err = insights.BookPrices(book, os.ReadFile); err != nil {
			err = fmt.Errorf("--book: %w", err)
		}
	}
	return p, err
}

// insightsService is the insights service over the store, announcing
// through its outbox.
func insightsService(s *store.Store, prices insights.Prices, g *globals) *insights.Service {
	return insights.New(store.NewInsightsReader(s), webhook.NewPublisher(s, time.Now), prices, time.Now, g.logger)
}
