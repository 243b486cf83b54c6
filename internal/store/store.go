// Package store is gpumeter's only door to ClickHouse: connections,
// migrations, sample inserts and the deduplicated reads that feed money.
// It speaks the native protocol through clickhouse-go/v2, except for
// sample inserts, which it sends itself (native_insert.go), and stays
// inside the SQL subset of DESIGN.md (ClickHouse 18.16 to 24.x+).
package store

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Store holds a pooled native connection to one ClickHouse database.
type Store struct {
	conn   driver.Conn
	cfg    Config
	logger *slog.Logger
	// native carries the sample inserts (native_insert.go).
	native *nativePool

	maxTimeMu sync.Mutex
	maxTime   time.Time // see MaxTime; zero until probed
}

// Open connects and checks the server answers.
func Open(ctx context.Context, cfg Config, logger *slog.Logger) (*Store, error) {
	s, err := Connect(cfg, logger)
	if err != nil {
		return nil, err
	}
	if err := s.Ping(ctx); err != nil {
		s.conn.Close()
		return nil, err
	}
	return s, nil
}

// scanFunc reads the current row into dest.
type scanFunc func(dest ...any) error

// eachRow runs a query and calls row once per result row, which reads it
// with scan. The query's, scan's and the stream's errors come back wrapped
// with what, the read's name; row's own errors come back as they are.
func (s *Store) eachRow(ctx context.Context, what, sql string, args []any, row func(scan scanFunc) error) error {
	rows, err := s.conn.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	scan := func(dest ...any) error {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("%s: scan: %w", what, err)
		}
		return nil
	}
	for rows.Next() {
		if err := row(scan); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// queryAll runs a query and returns what row makes of each result row, in
// order (nil for none). Errors are as eachRow's.
func queryAll[T any](ctx context.Context, s *Store, what, sql string, args []any, row func(scan scanFunc) (T, error)) ([]T, error) {
	var out []T
	err := s.eachRow(ctx, what, sql, args, func(scan scanFunc) error {
		v, err := row(scan)
		if err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// querySet reads a query's one column as a set.
func querySet[K comparable](ctx context.Context, s *Store, what, sql string, args ...any) (map[K]bool, error) {
	set := map[K]bool{}
	err := s.eachRow(ctx, what, sql, args, func(scan scanFunc) error {
		var k K
		err := scan(&k)
		set[k] = true
		return err
	})
	if err != nil {
		return nil, err
	}
	return set, nil
}

// queryMap reads a query's two columns as a map from the first to the
// second (the last row wins).
func queryMap[K comparable, V any](ctx context.Context, s *Store, what, sql string, args ...any) (map[K]V, error) {
	m := map[K]V{}
	err := s.eachRow(ctx, what, sql, args, func(scan scanFunc) error {
		var k K
		var v V
		err := scan(&k, &v)
		m[k] = v
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// utcTimes reads a query's one date or time column, in UTC.
func (s *Store) utcTimes(ctx context.Context, what, sql string, args ...any) ([]time.Time, error) {
	return queryAll(ctx, s, what, sql, args, func(scan scanFunc) (time.Time, error) {
		var t time.Time
		err := scan(&t)
		return t.UTC(), err
	})
}

// insert sends rows in one batch insert of sql (every INSERT names its
// columns). Errors come back wrapped with what; a row that does not fit
// the columns is named by rowName(i) when rowName is not nil.
func (s *Store) insert(ctx context.Context, what, sql string, rows [][]any, rowName func(i int) string) error {
	batch, err := s.conn.PrepareBatch(ctx, sql)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for i, row := range rows {
		if err := batch.Append(row...); err != nil {
			batch.Abort()
			if rowName != nil {
				return fmt.Errorf("%s: %w", rowName(i), err)
			}
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Connect sets up the connection pool without talking to the server, for
// callers (the collector's shipper) that must start while ClickHouse is
// down; connections are made on first use.
func Connect(cfg Config, logger *slog.Logger) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("clickhouse config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := clickhouse.Open(options(cfg))
	if err != nil {
		return nil, fmt.Errorf("open clickhouse %s: %w", strings.Join(cfg.Addrs, ","), err)
	}
	return &Store{conn: conn, cfg: cfg, logger: logger.With("component", "store"), native: newNativePool(cfg)}, nil
}

// insertCompressionBuffer is the driver's MaxCompressionBuffer: 64 KiB,
// below any column of a 10,000-row block but above its header.
const insertCompressionBuffer = 64 << 10

func options(cfg Config) *clickhouse.Options {
	o := &clickhouse.Options{
		Protocol: clickhouse.Native,
		Addr:     cfg.Addrs,
		Auth: clickhouse.Auth{
			Database: cfg.Database,
			Username: cfg.Username,
			Password: string(cfg.Password),
		},
		DialTimeout:  cfg.DialTimeout,
		ReadTimeout:  cfg.QueryTimeout,
		MaxOpenConns: cfg.MaxOpenConns,
		MaxIdleConns: cfg.MaxIdleConns,
		// An insert's block is compressed and written out column by column
		// once this much is buffered, instead of whole (the driver's
		// default is 10 MiB): each column is compressed while it is still
		// in the CPU cache, and the server starts reading sooner. It cut
		// the delivery path's CPU by about 6% while samples went through
		// the driver (docs/performance.md); sample inserts now frame their
		// own blocks the same way (nativeFrameBytes), the other batch
		// inserts keep this.
		MaxCompressionBuffer: insertCompressionBuffer,
		Settings: clickhouse.Settings{
			"max_execution_time": int(cfg.QueryTimeout.Seconds()),
			// Cluster mode (cluster.go); no effect on a single node's tables.
			// An insert into a Distributed table returns once every shard
			// wrote its rows, and fails if one cannot: delivery's "the cursor
			// moves only after ClickHouse acknowledged" holds on a cluster.
			"insert_distributed_sync": 1,
		},
	}
	if cfg.Compress {
		o.Compression = &clickhouse.Compression{Method: clickhouse.CompressionLZ4}
	}
	if cfg.TLS {
		o.TLS = &tls.Config{InsecureSkipVerify: cfg.TLSInsecureSkipVerify} //nolint:gosec // operator's explicit choice
	}
	return o
}

// CreateDatabase creates cfg.Database if it does not exist, connecting
// through the server's default database to do so.
func CreateDatabase(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("clickhouse config: %w", err)
	}
	// Identifiers cannot be bound; Validate restricted the name to [A-Za-z0-9_].
	if err := adminExec(ctx, cfg, "CREATE DATABASE IF NOT EXISTS "+cfg.Database); err != nil {
		return fmt.Errorf("create database %s: %w", cfg.Database, err)
	}
	return nil
}

// DropDatabase removes a database and everything in it (tests use it).
func DropDatabase(ctx context.Context, cfg Config, name string) error {
	if !validIdentifier(name) || name == "default" || name == "system" {
		return fmt.Errorf("drop database %q: refused", name)
	}
	if err := adminExec(ctx, cfg, "DROP DATABASE IF EXISTS "+name); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// adminExec runs one statement through the server's default database, for
// DDL on databases that may not exist yet.
func adminExec(ctx context.Context, cfg Config, stmt string) error {
	admin := cfg
	admin.Database = "default"
	conn, err := clickhouse.Open(options(admin))
	if err != nil {
		return fmt.Errorf("open clickhouse: %w", err)
	}
	defer conn.Close()
	return conn.Exec(ctx, stmt)
}

// Close releases the connections.
func (s *Store) Close() error {
	s.native.close()
	return s.conn.Close()
}

// Database names the database this store reads and writes.
func (s *Store) Database() string { return s.cfg.Database }

// Ping checks the server answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("ping clickhouse %s/%s: %w", strings.Join(s.cfg.Addrs, ","), s.cfg.Database, err)
	}
	return nil
}

// ServerVersion is the connected server's version, e.g. 18.16.1.
func (s *Store) ServerVersion(ctx context.Context) (Version, error) {
	var v string
	if err := s.conn.QueryRow(ctx, "SELECT version()").Scan(&v); err != nil {
		return Version{}, fmt.Errorf("query server version: %w", err)
	}
	return ParseVersion(v)
}

// Version is a ClickHouse server version, compared numerically.
type Version struct{ Major, Minor, Patch int }

// ParseVersion reads "18.16.1" or "24.3.2.23".
func ParseVersion(s string) (Version, error) {
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) < 2 {
		return Version{}, fmt.Errorf("parse version %q: want major.minor[.patch]", s)
	}
	var nums [3]int
	for i := 0; i < 3 && i < len(parts); i++ {
		n, err := strconv.Atoi(parts[i])
		if err != nil || n < 0 {
			return Version{}, fmt.Errorf("parse version %q: part %d is not a number", s, i+1)
		}
		nums[i] = n
	}
	return Version{nums[0], nums[1], nums[2]}, nil
}

// Less orders versions.
func (v Version) Less(o Version) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Patch < o.Patch
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// TableExists reports whether the store's database has the table.
func (s *Store) TableExists(ctx context.Context, table string) (bool, error) {
	var n uint64
	if err := s.conn.QueryRow(ctx,
		"SELECT count() FROM system.tables WHERE database = ? AND name = ?", s.cfg.Database, table).Scan(&n); err != nil {
		return false, fmt.Errorf("check table %s: %w", table, err)
	}
	return n > 0, nil
}
