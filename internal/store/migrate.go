package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Migration is one numbered schema file.
type Migration struct {
	Version    uint32
	Name       string
	MinServer  *Version // nil: any server
	Statements []string
}

// LoadMigrations reads NNNN_name.sql files from fsys in order.
func LoadMigrations(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	seen := map[uint32]string{}
	var out []Migration
	for _, name := range names {
		num, rest, ok := strings.Cut(strings.TrimSuffix(path.Base(name), ".sql"), "_")
		v, err := strconv.ParseUint(num, 10, 32)
		if !ok || err != nil || v == 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", name)
		}
		if prev, dup := seen[uint32(v)]; dup {
			return nil, fmt.Errorf("migration %s: version %d already used by %s", name, v, prev)
		}
		seen[uint32(v)] = name
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		m := Migration{Version: uint32(v), Name: rest}
		m.MinServer, err = minServer(string(body))
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		m.Statements = splitStatements(string(body))
		if len(m.Statements) == 0 {
			return nil, fmt.Errorf("migration %s: no statements", name)
		}
		out = append(out, m)
	}
	return out, nil
}

func minServer(body string) (*Version, error) {
	first, _, _ := strings.Cut(strings.TrimSpace(body), "\n")
	val, ok := strings.CutPrefix(strings.TrimSpace(first), "-- min_server:")
	if !ok {
		return nil, nil
	}
	v, err := ParseVersion(strings.TrimSpace(val))
	if err != nil {
		return nil, fmt.Errorf("min_server: %w", err)
	}
	return &v, nil
}

// splitStatements splits on semicolons that end a line and drops comment
// lines, so statements reach the server one at a time (the native protocol
// takes one per query).
func splitStatements(body string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(body, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--") || trimmed == "" {
			continue
		}
		cur.WriteString(line)
		cur.WriteString("\n")
		if strings.HasSuffix(trimmed, ";") {
			stmt := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")
			out = append(out, stmt)
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// MigrationResult says what Migrate did with one migration.
type MigrationResult struct {
	Version uint32
	Name    string
	Status  string // applied, already applied, skipped (server too old)
}

const migrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version UInt32,
    name String,
    applied_at DateTime
) ENGINE = ReplacingMergeTree()
ORDER BY version`

// Migrate applies every migration not yet recorded in schema_migrations.
// Running it twice changes nothing. A migration that needs a newer server is
// skipped with a log line and stays pending, so it applies after an upgrade.
func (s *Store) Migrate(ctx context.Context, fsys fs.FS) ([]MigrationResult, error) {
	migs, err := LoadMigrations(fsys)
	if err != nil {
		return nil, err
	}
	cluster, err := s.ClusterName(ctx)
	if err != nil {
		return nil, err
	}
	if cluster != "" {
		return nil, fmt.Errorf("%w %s: run gpumeter migrate --cluster %s", ErrClusterSchema, cluster, cluster)
	}
	if err := s.conn.Exec(ctx, migrationsTable); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	applied, err := s.appliedMigrations(ctx)
	if err != nil {
		return nil, err
	}
	server, err := s.ServerVersion(ctx)
	if err != nil {
		return nil, err
	}
	return s.applyMigrations(ctx, migs, applied, server, func(stmt string) error { return s.conn.Exec(ctx, stmt) })
}

// applyMigrations applies, in order, every migration not in applied that
// server (the oldest node, on a cluster) can run, each statement through
// exec, and records each one once all its statements ran. logAttrs go on
// the "applied" log line.
func (s *Store) applyMigrations(ctx context.Context, migs []Migration, applied map[uint32]bool, server Version,
	exec func(stmt string) error, logAttrs ...any) ([]MigrationResult, error) {
	var out []MigrationResult
	for _, m := range migs {
		res := MigrationResult{Version: m.Version, Name: m.Name}
		switch {
		case applied[m.Version]:
			res.Status = "already applied"
		case m.MinServer != nil && server.Less(*m.MinServer):
			res.Status = "skipped (server too old)"
			s.logger.Info("migration skipped: server too old",
				"version", m.Version, "name", m.Name, "needs", m.MinServer.String(), "server", server.String())
		default:
			for i, stmt := range m.Statements {
				if err := exec(stmt); err != nil {
					return out, fmt.Errorf("migration %04d_%s statement %d: %w", m.Version, m.Name, i+1, err)
				}
			}
			if err := s.recordMigration(ctx, m); err != nil {
				return out, err
			}
			res.Status = "applied"
			s.logger.Info("migration applied", append([]any{"version", m.Version, "name", m.Name}, logAttrs...)...)
		}
		out = append(out, res)
	}
	return out, nil
}

// recordMigration goes through a batch: 18.16 waits for a data block after an
// INSERT ... VALUES sent as a plain query, so inline VALUES would hang.
func (s *Store) recordMigration(ctx context.Context, m Migration) error {
	return s.insert(ctx, fmt.Sprintf("record migration %04d_%s", m.Version, m.Name), "INSERT INTO schema_migrations (version, name, applied_at)",
		[][]any{{m.Version, m.Name, time.Now().UTC().Truncate(time.Second)}}, nil)
}

// ErrMigrationsPending is Migrated's answer while migrations that this
// server can apply are not applied.
var ErrMigrationsPending = errors.New("migrations pending")

// Migrated reports whether every migration this server can run has been
// applied (readiness: a server on an old schema would fail its queries).
func (s *Store) Migrated(ctx context.Context, fsys fs.FS) error {
	migs, err := LoadMigrations(fsys)
	if err != nil {
		return err
	}
	applied, err := s.appliedMigrations(ctx)
	if err != nil {
		return err
	}
	server, err := s.ServerVersion(ctx)
	if err != nil {
		return err
	}
	var pending []string
	for _, m := range migs {
		if !applied[m.Version] && (m.MinServer == nil || !server.Less(*m.MinServer)) {
			pending = append(pending, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("%w: %s (run gpumeter migrate)", ErrMigrationsPending, strings.Join(pending, ", "))
	}
	return nil
}

// appliedMigrations reads the versions recorded in schema_migrations.
func (s *Store) appliedMigrations(ctx context.Context) (map[uint32]bool, error) {
	return querySet[uint32](ctx, s, "read schema_migrations", "SELECT DISTINCT version FROM schema_migrations")
}
