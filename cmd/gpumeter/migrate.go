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
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments %v", fs.Args())
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
	res, err := s.Migrate(ctx, schemas.FS)
	for _, r := range res {
		fmt.Fprintf(g.stdout, "%04d_%s: %s\n", r.Version, r.Name, r.Status)
	}
	return err
}
