// Package storetest gives tests a fresh, migrated ClickHouse database on the
// local server that `make test` starts (scripts/clickhouse.sh).
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/schemas"
)

// DSN is the server tests use: GPUMETER_TEST_CLICKHOUSE, or the local default.
func DSN() string {
	if v := os.Getenv("GPUMETER_TEST_CLICKHOUSE"); v != "" {
		return v
	}
	return "clickhouse://127.0.0.1:9000/default"
}

// Config is DSN() parsed, pointed at a new database named after the test.
func Config(t testing.TB) store.Config {
	t.Helper()
	cfg, err := store.ParseDSN(DSN())
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	cfg.Database = databaseName(t.Name())
	return cfg
}

// New creates a database for this test, migrates it and returns a store on
// it. The database is dropped when the test passes and kept for inspection
// when it fails. An unreachable server fails the test: it never skips.
func New(t testing.TB) *store.Store {
	t.Helper()
	return NewWithConfig(t, Config(t))
}

// NewWithConfig is New for a given config (its Database is created).
func NewWithConfig(t testing.TB, cfg store.Config) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := store.CreateDatabase(ctx, cfg); err != nil {
		t.Fatalf("storetest: ClickHouse at %s is required (run `make test` or scripts/clickhouse.sh start): %v", DSN(), err)
	}
	s, err := store.Open(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	if _, err := s.Migrate(ctx, schemas.FS); err != nil {
		t.Fatalf("storetest: migrate: %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		if t.Failed() {
			t.Logf("storetest: keeping database %s for inspection", cfg.Database)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := store.DropDatabase(ctx, cfg, cfg.Database); err != nil {
			t.Logf("storetest: %v", err)
		}
	})
	return s
}

func databaseName(testName string) string {
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 40 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	b.WriteString("_" + hex.EncodeToString(rnd[:]))
	return b.String()
}
