package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/internal/webhook"
	"github.com/gpumeter/gpumeter/reports"
)

func newInvoiceCmd(g *globals) *cobra.Command {
	return cli.Group(&cobra.Command{
		Use:   "invoice",
		Short: "run, list, show, finalize, void and render invoices",
		Long: `invoice runs the month's invoices for the customers in the config's billing
section and keeps the ledger: numbers are gapless, a finalized invoice never
changes, and usage that arrives late for an invoiced month is billed on the
next month's invoice. docs/invoices.md describes the ledger.`,
		Example: "  gpumeter --config gpumeter.yaml invoice run --period 2026-11\n" +
			"  gpumeter --config gpumeter.yaml invoice render --period 2026-11 --format pdf --out-dir invoices/",
	}, newInvoiceRunCmd(g), newInvoiceListCmd(g), newInvoiceShowCmd(g), newInvoiceFinalizeCmd(g),
		newInvoiceVoidCmd(g), newInvoiceRenderCmd(g))
}

// invoiceRunner opens the store and builds the runner over the config's
// customers.
func invoiceRunner(ctx context.Context, g *globals) (*billing.Runner, *store.Store, error) {
	if len(g.cfg.Billing.Customers) == 0 {
		return nil, nil, cli.Usagef("no customers: add a billing section to the config (--config; see docs/invoices.md)")
	}
	s, err := openStore(ctx, g)
	if err != nil {
		return nil, nil, err
	}
	r := billing.NewRunner(s, g.cfg.Billing, billing.DefaultLeaseConfig(), time.Now, g.logger)
	r.Announce = webhook.NewPublisher(s, time.Now)
	customers, err := g.cfg.Billing.CreditCustomers()
	if err != nil {
		s.Close()
		return nil, nil, cli.Usage(err)
	}
	r.Credits = credits.NewService(s, usage.New(s, g.cfg.Billing, time.Now), customers, time.Now)
	// import → invoice run works without a rollup by hand in between.
	r.Rollup = rollup.New(s, g.cfg.Rollup, time.Now, g.logger)
	return r, s, nil
}

func newInvoiceRunCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run --period YYYY-MM [--tenant T] [--dry-run] [--draft] [-o FORMAT]",
		Short: "invoice a month for the config's customers",
		Long: `run invoices the month (in each customer's time zone) for the customers in
the config's billing section, once the hourly rollups cover it (it rolls up
what is missing first); a re-run changes nothing that is finalized. --draft
stores drafts for review (invoice finalize numbers them), --dry-run prices
and stores nothing. A progress bar is drawn when stderr is a terminal.`,
		Example: "  gpumeter --config gpumeter.yaml invoice run --period 2026-11\n" +
			"  gpumeter --config gpumeter.yaml invoice run --period 2026-11 --tenant acme --dry-run -o json",
		Args: cli.NoArgs,
	}
	fs := cmd.Flags()
	var req billing.RunRequest
	fs.StringVar(&req.Period, "period", "", "the month to invoice, YYYY-MM (required)")
	fs.StringVar(&req.Tenant, "tenant", "", "only this customer")
	fs.BoolVar(&req.DryRun, "dry-run", false, "price and print, store nothing")
	fs.BoolVar(&req.Draft, "draft", false, "store drafts; finalize them with invoice finalize")
	out := cli.AddOutputFlag(cmd)
	quiet := fs.Bool("quiet", false, "no progress bar")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if req.Period == "" {
			return cli.Usagef("--period is required, e.g. --period %s", billing.PreviousMonth(time.Now()))
		}
		if err := req.Validate(); err != nil {
			return cli.Usage(err)
		}
		runner, s, err := invoiceRunner(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		var progress billing.Progress
		if !*quiet {
			progress = reports.ProgressBar(g.stderr, "invoicing "+req.Period)
		}
		rep, err := runner.Run(ctx, req, progress) // a tenant that is no customer: fault.NotFound, exit 2
		if err != nil {
			return err
		}
		for i := range rep.Outcomes {
			if o := &rep.Outcomes[i]; o.Action == billing.ActionWaiting {
				o.Detail += " (the scheduled rollup is `gpumeter rollup --scheduled`)"
			}
		}
		if err := reports.WriteOutcomes(g.stdout, out.Format, rep); err != nil {
			return err
		}
		if n := rep.Failed(); n > 0 {
			return fmt.Errorf("%d customer(s) could not be invoiced (see above)", n)
		}
		return nil
	}
	return cmd
}

// errPDFToTerminal: a PDF on a terminal is binary noise that can upset it.
var errPDFToTerminal = cli.Usagef("--format pdf writes binary data, not for a terminal: give --out FILE or redirect standard output")

func newInvoiceListCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "list [--period YYYY-MM] [--tenant T] [-o FORMAT]",
		Short:   "list stored invoices",
		Long:    "list prints the stored invoices (drafts, finalized and void), or their canonical JSON documents (-o json or yaml).",
		Example: "  gpumeter --config gpumeter.yaml invoice list --period 2026-11",
		Args:    cli.NoArgs,
	}
	fs := cmd.Flags()
	period := fs.String("period", "", "only this month, YYYY-MM")
	tenant := fs.String("tenant", "", "only this tenant")
	out := cli.AddOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if *period != "" {
			if _, err := billing.MonthlyPeriod(*period, time.UTC); err != nil {
				return cli.Usagef("--period: %v", err)
			}
		}
		runner, s, err := invoiceRunner(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		invs, err := runner.Invoices(ctx, *period, *tenant)
		if err != nil {
			return err
		}
		return reports.WriteInvoiceList(g.stdout, out.Format, invs)
	}
	return cmd
}

func newInvoiceShowCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "show ID|NUMBER [--json]",
		Short:   "print one invoice",
		Long:    "show prints one invoice, found by its id or number, as text or as its stored canonical JSON document.",
		Example: "  gpumeter --config gpumeter.yaml invoice show GM-2026-000001",
		Args:    cli.OneArg("invoice id or number"),
	}
	asJSON := cmd.Flags().Bool("json", false, "print the stored canonical JSON document")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		runner, s, err := invoiceRunner(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		si, err := runner.Invoice(ctx, args[0])
		if err != nil {
			return err
		}
		if *asJSON {
			return reports.WriteInvoiceJSON(g.stdout, si.Document)
		}
		return reports.WriteInvoiceText(g.stdout, si.Invoice)
	}
	return cmd
}

func newInvoiceFinalizeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "finalize (ID|NUMBER ... | --period YYYY-MM)",
		Short: "finalize draft invoices, giving them numbers",
		Long: `finalize numbers draft invoices (gaplessly, per issuer) and makes them
immutable: the ones named, or every draft of a month (--period). Each
finalized invoice is announced once as a webhook event.`,
		Example: "  gpumeter --config gpumeter.yaml invoice finalize --period 2026-11",
	}
	period := cmd.Flags().String("period", "", "finalize every draft of this month, YYYY-MM")
	cmd.RunE = func(cmd *cobra.Command, refs []string) error {
		ctx := cmd.Context()
		if (len(refs) == 0) == (*period == "") {
			return cli.Usagef("give either invoice ids/numbers or --period")
		}
		runner, s, err := invoiceRunner(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		outs, err := runner.Finalize(ctx, refs, *period)
		if err != nil {
			return err
		}
		return reports.WriteFinalized(g.stdout, outs)
	}
	return cmd
}

func newInvoiceVoidCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "void ID|NUMBER --reason TEXT",
		Short:   "void an invoice",
		Long:    "void marks an invoice void, with the reason printed on it; its number stays used.",
		Example: `  gpumeter --config gpumeter.yaml invoice void GM-2026-000001 --reason "billed twice"`,
		Args:    cli.OneArg("invoice id or number"),
	}
	reason := cmd.Flags().String("reason", "", "why the invoice is void (required; printed on it)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if strings.TrimSpace(*reason) == "" {
			return cli.Usagef("--reason is required")
		}
		runner, s, err := invoiceRunner(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		inv, err := runner.Void(ctx, args[0], *reason)
		if err != nil {
			return err
		}
		return reports.WriteVoided(g.stdout, inv)
	}
	return cmd
}

func newInvoiceRenderCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "render (ID|NUMBER [--out FILE] | --period YYYY-MM --out-dir DIR) [--format json|csv|html|pdf]",
		Short: "render invoices as JSON, CSV, HTML or PDF",
		Long: `render writes one invoice (to standard output or --out), or every invoice of a
month that is not void into --out-dir, one file per invoice named by its
number (a draft by its id). A PDF is drawn in the config's reports.pdf_font and is not written
to a terminal.`,
		Example: "  gpumeter --config gpumeter.yaml invoice render GM-2026-000001 --format html --out inv.html\n" +
			"  gpumeter --config gpumeter.yaml invoice render --period 2026-11 --format pdf --out-dir invoices/",
	}
	fs := cmd.Flags()
	format := fs.String("format", "pdf", "json, csv, html or pdf")
	out := fs.String("out", "", "write here instead of standard output")
	period := fs.String("period", "", "render every invoice of this month (not void) into --out-dir")
	outDir := fs.String("out-dir", "", "with --period: the folder the files are written to, one per invoice")
	cmd.RunE = func(cmd *cobra.Command, refs []string) error {
		ctx := cmd.Context()
		switch {
		case *period != "" && (len(refs) > 0 || *out != "" || *outDir == ""):
			return cli.Usagef("--period renders into --out-dir, without an invoice id or --out")
		case *period == "" && len(refs) != 1:
			return cli.Usagef("want one invoice id or number (or --period and --out-dir), got %d", len(refs))
		case *period == "" && *outDir != "":
			return cli.Usagef("--out-dir goes with --period; use --out for one invoice")
		}
		if *period != "" {
			if _, err := billing.MonthlyPeriod(*period, time.UTC); err != nil {
				return cli.Usagef("--period: %v", err)
			}
		}
		render, err := reports.InvoiceRendererFor(*format, g.cfg.Reports.PDF)
		if err != nil {
			return fmt.Errorf("--format %w", err)
		}
		// A PDF on a terminal is binary noise that can upset the terminal.
		if *format == "pdf" && *period == "" && *out == "" && reports.IsTerminal(g.stdout) {
			return errPDFToTerminal
		}
		runner, s, err := invoiceRunner(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		if *period != "" {
			invs, err := runner.Invoices(ctx, *period, "")
			if err != nil {
				return err
			}
			return reports.WriteInvoiceFiles(g.stdout, *outDir, *format, *period, invs, render)
		}
		si, err := runner.Invoice(ctx, refs[0])
		if err != nil {
			return err
		}
		if *out == "" {
			return render(g.stdout, si)
		}
		return reports.WriteFileAtomic(*out, func(w io.Writer) error { return render(w, si) })
	}
	return cmd
}
