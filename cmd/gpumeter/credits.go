package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/internal/webhook"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/gpumeter/gpumeter/reports"
)

func newCreditsCmd(g *globals) *cobra.Command {
	return cli.Group(&cobra.Command{
		Use:   "credits",
		Short: "grant, list and void prepaid credits and included GPU-hours",
		Long: `credits keeps the grant ledger of the config's billing customers: money paid
in advance (prepaid) or given (promotional), and included quantities of a
meter on a GPU model ("100 GPU-hours of H100", MIG and vGPU by their
GPU-equivalent weight). Grants are appended, never changed; a void keeps the
record with its reason. docs/credits.md describes the burn-down.`,
		Example: "  gpumeter --config gpumeter.yaml credits grant --tenant acme --kind prepaid --amount 500\n" +
			"  gpumeter --config gpumeter.yaml credits list --tenant acme",
	}, newCreditsGrantCmd(g), newCreditsListCmd(g), newCreditsVoidCmd(g), newCreditsBalanceCmd(g), newCreditsNotifyCmd(g))
}

func newCreditsGrantCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "grant --tenant T --kind prepaid|promotional|included --amount N [flags]",
		Short: "grant a customer credit or included GPU-hours",
		Long: `grant appends a grant to the ledger and prints its id. Money grants are in the
customer's currency (--currency defaults to it); an included grant gives
--amount of --meter on the SKUs of --sku-class (empty: any). A grant covers
usage from --effective (default: now) until --expires (default: never).
Bad input is refused with exit status 2 and nothing is stored.`,
		Example: "  gpumeter credits grant --tenant acme --kind promotional --amount 100 --expires 2027-01-01 --note welcome\n" +
			"  gpumeter credits grant --tenant acme --kind included --amount 100 --meter gpu_hours --sku-class H100-SXM5-80GB",
		Args: cli.NoArgs,
	}
	fs := cmd.Flags()
	var gr credits.Grant
	fs.StringVar(&gr.Tenant, "tenant", "", "the customer (a tenant of the config's billing section)")
	kind := fs.String("kind", "", "prepaid, promotional or included")
	amount := fs.String("amount", "", "money in the customer's currency, or the included quantity of --meter")
	fs.StringVar(&gr.Currency, "currency", "", "the money's currency (default: the customer's)")
	meter := fs.String("meter", "", "included grants: the meter, e.g. gpu_hours")
	fs.StringVar(&gr.SKUClass, "sku-class", "", "included grants: the GPU model whose SKUs it covers (default: any)")
	fs.IntVar(&gr.Priority, "priority", 0, "lower is used first")
	effective := cli.Time(fs, "effective", "from when it covers usage (default: now)")
	expires := cli.Time(fs, "expires", "when what is left expires (default: never)")
	fs.StringVar(&gr.Source, "source", "", "where the grant comes from (an order, a plan)")
	fs.StringVar(&gr.Note, "note", "", "a note")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var err error
		if gr.Amount, err = pricing.ParseDecimal(*amount); err != nil {
			return cli.Usagef("--amount: %v", err)
		}
		gr.Kind, gr.Meter, gr.EffectiveAt, gr.ExpiresAt = credits.Kind(*kind), pricing.Meter(*meter), *effective, *expires
		svc, s, err := creditsService(cmd.Context(), g)
		if err != nil {
			return err
		}
		defer s.Close()
		if gr, err = svc.Grant(cmd.Context(), gr); err != nil {
			return cli.FlagNamed(err, map[string]string{"tenant": "--tenant", "kind": "--kind", "amount": "--amount", "currency": "--currency",
				"meter": "--meter", "sku_class": "--sku-class", "expires_at": "--expires", "effective_at": "--effective"})
		}
		_, err = fmt.Fprintln(g.stdout, gr.ID)
		return err
	}
	return cmd
}

// creditsService opens the store and builds the credit domain over the
// config's billing customers.
func creditsService(ctx context.Context, g *globals) (*credits.Service, *store.Store, error) {
	customers, err := g.cfg.Billing.CreditCustomers()
	if err != nil {
		return nil, nil, cli.Usage(err)
	}
	s, err := openStore(ctx, g)
	if err != nil {
		return nil, nil, err
	}
	return credits.NewService(s, usage.New(s, g.cfg.Billing, time.Now), customers, time.Now), s, nil
}

func newCreditsListCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "list [--tenant T] [-o FORMAT]",
		Short:   "list the grant ledger",
		Long:    "list prints the grants, of one customer or all, by customer and age, voided ones with the time and reason of their void.",
		Example: "  gpumeter credits list --tenant acme -o wide",
		Args:    cli.NoArgs,
	}
	tenant := cmd.Flags().String("tenant", "", "only this customer")
	out := cli.AddOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		svc, s, err := creditsService(cmd.Context(), g)
		if err != nil {
			return err
		}
		defer s.Close()
		gs, err := svc.Grants(cmd.Context(), *tenant) // an unknown customer is fault.NotFound: exit 2
		if err != nil {
			return cli.FlagNamed(err, map[string]string{"tenant": "--tenant"})
		}
		return reports.WriteGrantsAs(g.stdout, out.Format, gs)
	}
	return cmd
}

func newCreditsVoidCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "void GRANT_ID --reason TEXT",
		Short:   "void a grant, keeping its record",
		Long:    "void stops a grant covering usage from now on; what it covered stays covered, what is left is voided, and the record keeps the reason.",
		Example: `  gpumeter credits void cg_3f9c2a81d0e4 --reason "granted to the wrong customer"`,
		Args:    cli.OneArg("grant id"),
	}
	reason := cmd.Flags().String("reason", "", "why (required; kept on the record)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		req := credits.VoidRequest{ID: args[0], Reason: *reason}
		if err := req.Validate(); err != nil {
			return cli.FlagNamed(err, map[string]string{"reason": "--reason"})
		}
		svc, s, err := creditsService(cmd.Context(), g)
		if err != nil {
			return err
		}
		defer s.Close()
		gr, err := svc.Void(cmd.Context(), req) // an unknown grant is fault.NotFound: exit 2
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(g.stdout, "voided %s (%s) at %s: %s\n", gr.ID, gr.Tenant, gr.VoidedAt.Format(time.RFC3339), gr.VoidReason)
		return err
	}
	return cmd
}

func newCreditsBalanceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "balance --tenant T [-o FORMAT]",
		Short: "burn a customer's grants down against its priced usage",
		Long: `balance derives every grant's account of a customer from the ledger and the
usage priced as its invoices price it, month by month from its first grant to
now (this month: rollups plus raw samples not yet rolled up, the figure of
/v1/cost): granted, used, expired, voided, rolled over and remaining, and the
usage no grant covered. Nothing is stored.`,
		Example: "  gpumeter --config gpumeter.yaml credits balance --tenant acme -o wide",
		Args:    cli.NoArgs,
	}
	tenant := cmd.Flags().String("tenant", "", "the customer (required)")
	out := cli.AddOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		svc, s, err := creditsService(cmd.Context(), g)
		if err != nil {
			return err
		}
		defer s.Close()
		r, err := svc.Balance(cmd.Context(), *tenant) // an unknown customer is fault.NotFound: exit 2
		if err != nil {
			return cli.FlagNamed(err, map[string]string{"tenant": "--tenant"})
		}
		return reports.WriteCreditBalanceAs(g.stdout, out.Format, r)
	}
	return cmd
}

// creditLease names the lease the credit job runs under.
const creditLease = "credits"

// newCreditJob builds the credit job of `gpumeter serve` and `credits
// notify` over the store. A run with grants to burn takes the credits
// lease first (billing's lease over ClickHouse), so one replica runs it at
// a time: a run that finds it held leaves the work to the holder. A run
// over a ledger without grants writes nothing and takes no lease. The job
// writes nothing twice anyway (stable allowance ids, events once per
// notice), so a run outliving the lease's TTL is harmless.
func newCreditJob(svc *credits.Service, settings credits.Settings, s *store.Store, logger *slog.Logger) func(context.Context) (credits.JobReport, error) {
	job := credits.NewJob(svc, webhook.NewPublisher(s, time.Now), settings, time.Now, logger).WithLock(func(ctx context.Context) (func(), error) {
		l, err := billing.TryAcquire(ctx, s, creditLease, billing.DefaultLeaseConfig())
		if err != nil {
			return nil, err
		}
		return func() {
			if err := l.Release(context.WithoutCancel(ctx)); err != nil {
				logger.Warn("release the credits lease; it expires by itself", "err", err)
			}
		}, nil
	})
	return func(ctx context.Context) (credits.JobReport, error) {
		rep, err := job.Run(ctx)
		if errors.Is(err, billing.ErrLeaseHeld) {
			logger.Info("credit job: another run holds the lease; leaving the work to it", "err", err)
			return credits.JobReport{}, nil
		}
		return rep, err
	}
}

func newCreditsNotifyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "notify",
		Short: "run the credit job once: recurring allowances, then the credit webhooks due",
		Long: `notify runs the credit job that gpumeter serve runs on credits.schedule: it
writes the monthly allowances of the config that are due and not yet in the
ledger, burns every billing customer's grants down, and puts the credit events
due (credits.balance.threshold, credits.depleted, credits.expiring) in the
webhook outbox, each once however often it runs; serve delivers them
(docs/credits.md, "Notifications"). Exit status 1 when a customer's balance
could not be read.`,
		Example: "  gpumeter --config gpumeter.yaml credits notify",
		Args:    cli.NoArgs,
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		svc, s, err := creditsService(cmd.Context(), g)
		if err != nil {
			return err
		}
		defer s.Close()
		rep, err := newCreditJob(svc, g.cfg.Credits, s, g.logger)(cmd.Context())
		if _, perr := fmt.Fprintf(g.stdout, "%d allowance grant(s) written; %d customer(s) checked; %d notice(s) due, %d new in the outbox\n",
			rep.Recurring, rep.Customers, rep.Due, rep.Published); perr != nil && err == nil {
			err = perr
		}
		return err
	}
	return cmd
}
