package main

import (
	"context"
	"fmt"

	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/store"
)

// openStore connects to the ClickHouse named by --clickhouse.
func openStore(ctx context.Context, g *globals) (*store.Store, error) {
	cfg, err := store.ParseDSN(g.dsn)
	if err != nil {
		return nil, cli.Usage(err)
	}
	s, err := store.Open(ctx, cfg, g.logger)
	if err != nil {
		return nil, fmt.Errorf("%w (is ClickHouse running? scripts/clickhouse.sh start)", err)
	}
	return s, nil
}
