package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/demo"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/reports"
	"github.com/gpumeter/gpumeter/schemas"
)

func newDemoCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "load the bundled demo data set and print a summary",
		Long: `demo creates the DSN's database if needed, migrates it, imports the bundled
data set (two DGX hosts, three days) and prints usage by tenant, department
and SKU. It is idempotent: running it again changes no total. make demo runs
it, then a simulated collector, an invoice run and the server.`,
		Example: "  gpumeter --clickhouse clickhouse://127.0.0.1:9000/gpumeter_demo demo",
		Args:    cli.NoArgs,
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		cfg, err := store.ParseDSN(g.dsn)
		if err != nil {
			return cli.Usage(err)
		}
		if err := store.CreateDatabase(ctx, cfg); err != nil {
			return fmt.Errorf("%w (is ClickHouse running? scripts/clickhouse.sh start)", err)
		}
		s, err := store.Open(ctx, cfg, g.logger)
		if err != nil {
			return err
		}
		defer s.Close()
		if _, err := s.Migrate(ctx, schemas.FS); err != nil {
			return err
		}

		res, err := demo.Import(ctx, s)
		if err != nil {
			return err
		}
		from, to := demo.Start, demo.Start.Add(demo.Days*24*time.Hour)
		fmt.Fprintf(g.stdout, "Imported %d samples: 2 DGX hosts, %s to %s (database %s).\n\n",
			res.Rows, from.Format(time.DateOnly), to.Add(-time.Second).Format(time.DateOnly), s.Database())

		for _, v := range demo.Views() {
			rows, err := s.Usage(ctx, v.Query)
			if err != nil {
				return err
			}
			fmt.Fprintln(g.stdout, v.Title)
			if err := reports.WriteUsageTable(g.stdout, reports.UsageTableOf(rows, v.Query)); err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			fmt.Fprintln(g.stdout)
		}
		return nil
	}
	return cmd
}
