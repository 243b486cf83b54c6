package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/schemas"
)

func runMigrate(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	createDB := fs.Bool("create-database", true, "create the DSN's database if it does not exist")
	cluster := fs.String("cluster", "", "lay the schema out on this remote_servers cluster: shard-local tables on every node\n"+
		"(Replicated where Keeper is configured) and Distributed tables over them (docs/operations.md)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments %v", fs.Args())
	}
	if *cluster != "" {
		if err := (store.ClusterLayout{Cluster: *cluster, Database: "default"}).Validate(); err != nil {
			return usageErrorf("--cluster: %v", err)
		}
	}
	if *createDB {
		cfg, err := store.ParseDSN(g.dsn)
		if err != nil {
			return usageError{err}
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
