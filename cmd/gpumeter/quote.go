package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/gpumeter/gpumeter/reports"
)

type quoteArgs struct {
	book, contract, usage string
	quantities            []string
	from, to, tenant      string
	out                   *cli.OutputFlag
}

func newQuoteCmd(g *globals) *cobra.Command {
	var a quoteArgs
	cmd := &cobra.Command{
		Use:   "quote --book FILE [--contract FILE] (--usage FILE | --quantity SKU:METER=VALUE ...) [--from TIME] [--to TIME] [-o FORMAT]",
		Short: "price quantities against a price book (no database)",
		Long: `quote prices usage against a price book with the same engine as invoices,
without a database. Usage comes either from a file of hourly rows (--usage:
CSV with the header hour,sku,meter,quantity, a .json array of {"hour","sku",
"meter","quantity"} objects, or the output of usage -o json --bucket hour
--by sku; "-" reads standard input) or as period totals (--quantity,
repeatable), which are spread evenly over the hours of the period. TIME is
RFC 3339 or YYYY-MM-DD (00:00 UTC). The period defaults to the whole UTC
calendar months holding the usage rows, or to the current UTC month for
--quantity (named on stderr); --from alone prices one month from it. A
problem repeated on many rows is reported once, with the lines it is on
(docs/pricing.md).`,
		Example: "  gpumeter quote --book pricing/books/gpu-cloud.yaml --quantity H100-SXM5-80GB:gpu_hours=720 --from 2026-11-01\n" +
			"  gpumeter usage --from 2026-11-01 --to 2026-12-01 --bucket hour --by sku -o json | gpumeter quote --book book.yaml --usage -",
		Args: cli.NoArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&a.book, "book", "", "price book, YAML (required)")
	fs.StringVar(&a.contract, "contract", "", "tenant contract, YAML")
	fs.StringVar(&a.usage, "usage", "", "hourly usage rows: CSV (hour,sku,meter,quantity) or a .json array")
	fs.StringArrayVar(&a.quantities, "quantity", nil, "SKU:METER=VALUE, a total for the period; repeatable")
	fs.StringVar(&a.from, "from", "", "period start, RFC 3339 or YYYY-MM-DD")
	fs.StringVar(&a.to, "to", "", "period end (exclusive), RFC 3339 or YYYY-MM-DD")
	fs.StringVar(&a.tenant, "tenant", "", "tenant name (defaults to the contract's)")
	a.out = cli.AddOutputFlag(cmd)
	cmd.RunE = func(*cobra.Command, []string) error { return runQuote(g, a) }
	return cmd
}

// runQuote prices quantities against a price book (no database).
func runQuote(g *globals, a quoteArgs) error {
	in, err := a.input(time.Now())
	if err != nil {
		return err
	}
	res, err := pricing.Price(in.Input)
	if err != nil {
		// The engine names rows; the user wrote lines and flags.
		if xerr, rows := pricing.ExplainRows(err, in.origins); rows && a.usage != "" {
			err = fmt.Errorf("%s: %w", a.usage, xerr)
		} else {
			err = xerr
		}
		return cli.Usage(err)
	}
	if a.from == "" && len(a.quantities) > 0 {
		fmt.Fprintf(g.stderr, "gpumeter quote: priced %s (the current UTC month; pass --from to choose)\n", in.Start.Format("2006-01"))
	}
	if err := reports.WriteQuoteAs(g.stdout, a.out.Format, res); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

// quoteInput is a pricing input with where each of its usage rows came
// from, so that what the engine finds wrong names lines and flags.
type quoteInput struct {
	pricing.Input
	origins []pricing.RowOrigin // one per usage row
}

// input reads the files and flags into a pricing input; now is only used
// for the default period of --quantity.
func (a *quoteArgs) input(now time.Time) (quoteInput, error) {
	var in quoteInput
	if a.book == "" {
		return in, cli.Usagef("--book is required")
	}
	if (a.usage == "") == (len(a.quantities) == 0) {
		return in, cli.Usagef("give either --usage FILE or --quantity SKU:METER=VALUE")
	}
	var err error
	if in.Book, err = pricing.ReadBookFile(a.book); err != nil {
		return in, cli.Usage(err)
	}
	if a.contract != "" {
		if in.Contract, err = pricing.ReadContractFile(a.contract); err != nil {
			return in, cli.Usage(err)
		}
	}
	in.Tenant = a.tenant

	if a.usage != "" {
		if in.Usage, in.origins, err = pricing.ReadUsageFile(a.usage, os.Stdin); err != nil {
			return in, cli.Usage(err)
		}
	}
	if in.Start, in.End, err = a.period(in.Usage, now); err != nil {
		return in, err
	}
	for _, q := range a.quantities {
		rows, err := in.Book.SpreadQuantity(q, in.Start, in.End)
		if err != nil {
			return in, cli.Usagef("--quantity %s: %w", q, err)
		}
		in.Usage = append(in.Usage, rows...)
		o := pricing.RowOrigin{Where: "--quantity " + q, N: -1}
		for range rows {
			in.origins = append(in.origins, o)
		}
	}
	return in, nil
}

// period picks [from, to): the flags, else whole UTC calendar months around
// the usage rows, else the current UTC month.
func (a *quoteArgs) period(rows []pricing.Usage, now time.Time) (time.Time, time.Time, error) {
	var from, to time.Time
	var err error
	if a.from != "" {
		if from, err = pricing.ParseTime(a.from); err != nil {
			return from, to, cli.Usagef("--from: %w", err)
		}
	}
	if a.to != "" {
		if a.from == "" {
			return from, to, cli.Usagef("--to needs --from")
		}
		if to, err = pricing.ParseTime(a.to); err != nil {
			return from, to, cli.Usagef("--to: %w", err)
		}
	}
	switch mFrom, mTo, ok := pricing.CalendarMonths(rows); {
	case a.from != "" && a.to == "":
		to = from.AddDate(0, 1, 0)
	case a.from == "" && ok:
		from, to = mFrom, mTo
	case a.from == "":
		if a.usage != "" {
			return from, to, cli.Usagef("%s has no rows: give --from and --to", a.usage)
		}
		from = pricing.MonthStart(now)
		to = from.AddDate(0, 1, 0)
	}
	if !from.Before(to) {
		return from, to, cli.Usagef("--to %s is not after --from %s", to.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	return from, to, nil
}
