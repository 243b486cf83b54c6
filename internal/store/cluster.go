package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Cluster mode (DESIGN.md "Scale-out"): every table of the schema becomes a
// shard-local table NAME_local on each node plus a Distributed table NAME
// over them, on every node. Readers and writers keep using NAME, so the
// store's statements are the same in both modes. Inserts go through the
// Distributed table with insert_distributed_sync=1 (see options): an insert
// returns only after every shard wrote its rows, and fails when a shard is
// down, so the shipper's cursor still moves only after ClickHouse
// acknowledged. A failed insert may have landed on some shards; the retry
// writes the same sample ids to the same shards (sharding by sample_id) and
// ReplacingMergeTree collapses them, as for any replayed insert.

// LocalSuffix names a table's shard-local part in cluster mode.
const LocalSuffix = "_local"

// shardKeys is the Distributed sharding expression of every table the
// migrations create. Rows that ReplacingMergeTree must collapse share their
// sorting key, so each key below is a function of sorting-key columns: every
// copy of a row lands on the same shard and FINAL, which runs per shard,
// still deduplicates. A table missing here fails cluster migration (and
// TestEveryTableHasAShardKey), so a new table cannot be forgotten.
var shardKeys = map[string]string{
	"schema_migrations":  "version",
	"usage_samples":      "sample_id",
	"usage_hourly":       "cityHash64(tenant)",
	"rollup_state":       "cityHash64(job)",
	"closed_periods":     "toUInt64(period_start)",
	"raw_retention":      "cityHash64(table_name)",
	"raw_dropped_months": "cityHash64(table_name)",
	"billing_leases":     "cityHash64(name)",
	"invoices":           "cityHash64(issuer, invoice_id)",
	"invoice_lines":      "cityHash64(issuer, invoice_id)",
	"api_keys":           "cityHash64(key_id)",
	"api_audit":          "rand()",
	"webhook_events":     "cityHash64(event_id)",
	"webhook_attempts":   "cityHash64(event_id)",
	"insight_anomalies":  "cityHash64(anomaly_id)",
	"credit_grants":      "cityHash64(tenant)",
	"quota_admissions":   "cityHash64(admission_id)",
	"credit_holds":       "cityHash64(tenant)",
}

// ClusterLayout says how migrations are laid out on a cluster.
type ClusterLayout struct {
	Cluster  string // a remote_servers name
	Database string
	// Replicated makes the shard-local tables Replicated*MergeTree, with
	// paths by the {shard} and {replica} macros; it needs Keeper/ZooKeeper.
	Replicated bool
}

// Validate checks the names that go into DDL unquoted.
func (l ClusterLayout) Validate() error {
	var errs []error
	if !validIdentifier(l.Cluster) {
		errs = append(errs, fmt.Errorf("cluster name %q: want letters, digits and _", l.Cluster))
	}
	if !validIdentifier(l.Database) {
		errs = append(errs, fmt.Errorf("database %q: want letters, digits and _", l.Database))
	}
	return errors.Join(errs...)
}

// clusterStep is one statement of a migration laid out on a cluster.
type clusterStep struct {
	SQL string
	// PerNode steps run on every node; the others once, through the
	// Distributed tables, after every node ran the per-node steps.
	PerNode bool
	// PerShard steps (an ALTER of a replicated table) run on one replica
	// of each shard; replication brings the change to the others.
	PerShard bool
	// An ADD COLUMN is skipped where the column exists already, so that a
	// migration cut short on one node can be run again.
	Table, Column string
}

var (
	createTableRe = regexp.MustCompile(`(?s)^CREATE TABLE IF NOT EXISTS (\w+) (\(.*\))\s*ENGINE = (\w*MergeTree)\(([^)]*)\)(.*)$`)
	addColumnRe   = regexp.MustCompile(`(?s)^ALTER TABLE (\w+) ADD COLUMN (\w+) (.*)$`)
	insertRe      = regexp.MustCompile(`(?s)^INSERT INTO \w+ \(`)
	// MODIFY COLUMN always names the type (codec-only changes are not
	// written), so the Distributed table gets the same type.
	modifyColumnRe = regexp.MustCompile(`(?s)^ALTER TABLE (\w+) MODIFY COLUMN (\w+) (\S.*?)(\s+CODEC\(.*\))?$`)
	// A table's TTL and its storage settings concern stored data only.
	modifyLocalRe = regexp.MustCompile(`(?s)^ALTER TABLE (\w+) (MODIFY (?:TTL|SETTING) .*)$`)
)

// clusterSteps lays one migration statement out on a cluster. Statements of
// any other shape are refused, so a migration that cluster mode does not
// understand fails in tests rather than half-applying on a cluster.
func clusterSteps(l ClusterLayout, stmt string) ([]clusterStep, error) {
	stmt = strings.TrimSpace(stmt)
	if m := createTableRe.FindStringSubmatch(stmt); m != nil {
		table, columns, engine, args, rest := m[1], m[2], m[3], strings.TrimSpace(m[4]), m[5]
		key, ok := shardKeys[table]
		if !ok {
			return nil, fmt.Errorf("table %s has no sharding key for cluster mode (store.shardKeys)", table)
		}
		local := table + LocalSuffix
		if l.Replicated {
			zkPath := fmt.Sprintf("'/clickhouse/tables/{shard}/%s/%s'", l.Database, local)
			args = strings.Join(nonEmpty(zkPath, "'{replica}'", args), ", ")
			engine = "Replicated" + engine
		}
		return []clusterStep{
			{SQL: fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s %s ENGINE = %s(%s)%s", local, columns, engine, args, rest), PerNode: true},
			{SQL: fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s AS %s ENGINE = Distributed(%s, %s, %s, %s)",
				table, local, l.Cluster, l.Database, local, key), PerNode: true},
		}, nil
	}
	if m := addColumnRe.FindStringSubmatch(stmt); m != nil {
		table, column, def := m[1], m[2], m[3]
		local := table + LocalSuffix
		return []clusterStep{
			{SQL: fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s", local, column, def),
				PerNode: !l.Replicated, PerShard: l.Replicated, Table: local, Column: column},
			{SQL: fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s", table, column, def), PerNode: true, Table: table, Column: column},
		}, nil
	}
	if m := modifyColumnRe.FindStringSubmatch(stmt); m != nil && !strings.HasPrefix(m[3], "CODEC(") {
		// The shard-local tables change type and codec (a replicated one
		// on one replica per shard: replication brings it to the others);
		// the Distributed table, which stores nothing, takes the type
		// without the codec.
		table, column, def := m[1], m[2], m[3]
		local := table + LocalSuffix
		return []clusterStep{
			{SQL: fmt.Sprintf("ALTER TABLE %s MODIFY COLUMN %s %s%s", local, column, def, m[4]), PerNode: !l.Replicated, PerShard: l.Replicated},
			{SQL: fmt.Sprintf("ALTER TABLE %s MODIFY COLUMN %s %s", table, column, def), PerNode: true},
		}, nil
	}
	if m := modifyLocalRe.FindStringSubmatch(stmt); m != nil {
		// TTL and settings: the shard-local tables only. A replicated
		// table's TTL is replicated metadata (one replica per shard); its
		// settings are each replica's own (every node).
		table, change := m[1], m[2]
		perShard := l.Replicated && strings.HasPrefix(change, "MODIFY TTL")
		return []clusterStep{
			{SQL: fmt.Sprintf("ALTER TABLE %s%s %s", table, LocalSuffix, change), PerNode: !perShard, PerShard: perShard},
		}, nil
	}
	if insertRe.MatchString(stmt) {
		return []clusterStep{{SQL: stmt}}, nil
	}
	first, _, _ := strings.Cut(stmt, "\n")
	return nil, fmt.Errorf("statement %q: cluster mode knows CREATE TABLE IF NOT EXISTS, ALTER TABLE ... ADD COLUMN, "+
		"MODIFY COLUMN, MODIFY TTL, MODIFY SETTING and INSERT INTO only", first)
}

func nonEmpty(parts ...string) []string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ClusterNode is one server of a cluster, as system.clusters lists it.
type ClusterNode struct {
	Shard, Replica uint32
	Host           string
	Port           uint16
}

// Addr is the node's host:port.
func (n ClusterNode) Addr() string { return fmt.Sprintf("%s:%d", n.Host, n.Port) }

// ClusterNodes lists the servers of a remote_servers cluster as the
// connected server knows it.
func (s *Store) ClusterNodes(ctx context.Context, cluster string) ([]ClusterNode, error) {
	out, err := queryAll(ctx, s, "read cluster "+cluster+" from system.clusters",
		"SELECT shard_num, replica_num, host_name, port FROM system.clusters WHERE cluster = ? ORDER BY shard_num, replica_num",
		[]any{cluster}, func(scan scanFunc) (ClusterNode, error) {
			var n ClusterNode
			err := scan(&n.Shard, &n.Replica, &n.Host, &n.Port)
			return n, err
		})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cluster %s: not in the server's remote_servers (system.clusters)", cluster)
	}
	return out, nil
}

// ClusterName is the cluster this database is laid out on ("" for a
// single-node schema or none yet), read from the Distributed engine of
// schema_migrations, the first table either mode creates.
func (s *Store) ClusterName(ctx context.Context) (string, error) {
	engine, cluster, err := s.tableEngine(ctx, "schema_migrations")
	if err != nil || engine != "Distributed" {
		return "", err
	}
	return cluster, nil
}

var distributedRe = regexp.MustCompile(`^Distributed\(\s*'?(\w+)'?\s*,`)

// tableEngine reads a table's engine ("" when there is no such table) and,
// for a Distributed table, its cluster.
func (s *Store) tableEngine(ctx context.Context, table string) (engine, cluster string, err error) {
	var full string
	err = s.eachRow(ctx, fmt.Sprintf("read engine of %s.%s", s.cfg.Database, table),
		"SELECT engine, engine_full FROM system.tables WHERE database = ? AND name = ?", []any{s.cfg.Database, table},
		func(scan scanFunc) error { return scan(&engine, &full) })
	if err != nil {
		return "", "", err
	}
	if engine != "Distributed" {
		return engine, "", nil
	}
	m := distributedRe.FindStringSubmatch(full)
	if m == nil {
		return "", "", fmt.Errorf("table %s.%s: cannot read the cluster from %q", s.cfg.Database, table, full)
	}
	return engine, m[1], nil
}

// hasKeeper reports whether the server has Keeper/ZooKeeper configured
// (system.zookeeper exists only then).
func (s *Store) hasKeeper(ctx context.Context) (bool, error) {
	var n uint64
	if err := s.conn.QueryRow(ctx,
		"SELECT count() FROM system.tables WHERE database = 'system' AND name = 'zookeeper'").Scan(&n); err != nil {
		return false, fmt.Errorf("check for keeper: %w", err)
	}
	return n > 0, nil
}

func (s *Store) hasMacros(ctx context.Context, names ...string) error {
	for _, name := range names {
		var n uint64
		if err := s.conn.QueryRow(ctx, "SELECT count() FROM system.macros WHERE macro = ?", name).Scan(&n); err != nil {
			return fmt.Errorf("read macros: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("macro {%s} is not defined (<macros> in the server config)", name)
		}
	}
	return nil
}

func (s *Store) hasColumn(ctx context.Context, table, column string) (bool, error) {
	var n uint64
	if err := s.conn.QueryRow(ctx,
		"SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = ?",
		s.cfg.Database, table, column).Scan(&n); err != nil {
		return false, fmt.Errorf("check column %s.%s: %w", table, column, err)
	}
	return n > 0, nil
}

// clusterNodeStores connects to every node of a cluster with this store's
// credentials and database. The caller closes them.
func (s *Store) clusterNodeStores(ctx context.Context, nodes []ClusterNode) ([]*Store, error) {
	var out []*Store
	for _, n := range nodes {
		cfg := s.cfg
		cfg.Addrs = []string{n.Addr()}
		cfg.MaxOpenConns, cfg.MaxIdleConns = 2, 1
		ns, err := Open(ctx, cfg, s.logger)
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("node %s (shard %d, replica %d): %w", n.Addr(), n.Shard, n.Replica, err)
		}
		out = append(out, ns)
	}
	return out, nil
}

func closeAll(stores []*Store) {
	for _, s := range stores {
		s.Close()
	}
}

// onEveryNode runs fn with a connection to each node of the cluster this
// database is laid out on and the table's shard-local name, or with this
// store and the table itself for a single-node schema.
func (s *Store) onEveryNode(ctx context.Context, table string, fn func(node *Store, table string) error) error {
	cluster, err := s.ClusterName(ctx)
	if err != nil {
		return err
	}
	if cluster == "" {
		return fn(s, table)
	}
	nodes, err := s.ClusterNodes(ctx, cluster)
	if err != nil {
		return err
	}
	stores, err := s.clusterNodeStores(ctx, nodes)
	if err != nil {
		return err
	}
	defer closeAll(stores)
	for i, ns := range stores {
		if err := fn(ns, table+LocalSuffix); err != nil {
			return fmt.Errorf("node %s: %w", nodes[i].Addr(), err)
		}
	}
	return nil
}
