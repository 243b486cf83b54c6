package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/schemas"
)

func newMigrateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate [--cluster NAME]",
		Short: "apply ClickHouse schema migrations",
		Long: `migrate creates the DSN's database if needed and applies the schemas/*.sql
migrations not yet recorded in schema_migrations; a second run changes
nothing. A migration marked "-- min_server: X.Y" is skipped, with a log line,
on older servers. --cluster lays the schema out on a remote_servers cluster
(docs/operations.md).`,
		Example: "  gpumeter --clickhouse clickhouse://127.0.0.1:9000/gpumeter migrate\n" +
			"  gpumeter migrate --cluster gpumeter --create-database=false",
		Args: cli.NoArgs,
	}
	fs := cmd.Flags()
	createDB := fs.Bool("create-database", true, "create the DSN's database if it does not exist")
	cluster := fs.String("cluster", "", "lay the schema out on this remote_servers cluster: shard-local tables on every node\n"+
		"(Replicated where Keeper is configured) and Distributed tables over them (docs/operations.md)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if *cluster != "" {
			if err := (store.ClusterLayout{Cluster: *cluster, Database: "default"}).Validate(); err != nil {
				return cli.Usagef("--cluster: %v", err)
			}
		}
		if *createDB {
			cfg, err := store.ParseDSN(g.dsn)
			if err != nil {
				return cli.Usage(err)
			}
			if err := store.CreateDatabase(ctx, cfg); err != nil {
				return fmt.Errorf("%w (is ClickHouse running? scripts/clickhouse.sh start)", err)
			}
		}
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		var res []store.MigrationResult
		if *cluster != "" {
			res, err = s.MigrateCluster(ctx, schemas.FS, *cluster)
		} else {
			res, err = s.Migrate(ctx, schemas.FS)
		}
		for _, r := range res {
			fmt.Fprintf(g.stdout, "%04d_%s: %s\n", r.Version, r.Name, r.Status)
		}
		return err
	}
	return cmd
}
