package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"
)

// ErrNotClusterSchema is MigrateCluster's answer on a database that holds a
// single-node schema: its tables are not Distributed, and cluster mode
// does not convert them (docs/operations.md, "Cluster mode").
var ErrNotClusterSchema = errors.New("database holds a single-node schema")

// ErrClusterSchema is Migrate's answer on a database laid out on a cluster:
// a new table made on one node only would miss the others.
var ErrClusterSchema = errors.New("database is laid out on a cluster")

// MigrateCluster applies every pending migration in cluster mode: it
// connects to each node of the remote_servers cluster (as the connected
// server lists it, with this store's credentials and database), creates
// the database there, and lays every statement out as shard-local tables
// plus Distributed tables (clusterSteps). Shard-local tables are
// Replicated*MergeTree where the nodes have Keeper/ZooKeeper, and plain
// otherwise; shards with more than one replica need Keeper. Every node must
// answer: a node that is down fails the run, which can be repeated once it
// is back (CREATE ... IF NOT EXISTS, ADD COLUMN only where missing).
func (s *Store) MigrateCluster(ctx context.Context, fsys fs.FS, cluster string) ([]MigrationResult, error) {
	layout := ClusterLayout{Cluster: cluster, Database: s.cfg.Database}
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	migs, err := LoadMigrations(fsys)
	if err != nil {
		return nil, err
	}
	nodes, err := s.ClusterNodes(ctx, cluster)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		cfg := s.cfg
		cfg.Addrs = []string{n.Addr()}
		if err := CreateDatabase(ctx, cfg); err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Addr(), err)
		}
	}
	stores, err := s.clusterNodeStores(ctx, nodes)
	if err != nil {
		return nil, err
	}
	defer closeAll(stores)

	layout.Replicated, err = clusterReplication(ctx, nodes, stores)
	if err != nil {
		return nil, err
	}
	var oldest *Version
	for i, ns := range stores {
		engine, other, err := ns.tableEngine(ctx, "schema_migrations")
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", nodes[i].Addr(), err)
		}
		switch {
		case engine != "" && engine != "Distributed":
			return nil, fmt.Errorf("node %s: %w (%s.schema_migrations is %s); cluster mode needs a fresh database",
				nodes[i].Addr(), ErrNotClusterSchema, s.cfg.Database, engine)
		case other != "" && other != cluster:
			return nil, fmt.Errorf("node %s: %w: %s, not %s", nodes[i].Addr(), ErrClusterSchema, other, cluster)
		}
		v, err := ns.ServerVersion(ctx)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", nodes[i].Addr(), err)
		}
		if oldest == nil || v.Less(*oldest) {
			oldest = &v
		}
	}

	run := func(stmt string) error {
		steps, err := clusterSteps(layout, stmt)
		if err != nil {
			return err
		}
		for _, st := range steps {
			switch {
			case st.PerNode:
				for i, ns := range stores {
					if err := execUnlessColumn(ctx, ns, st); err != nil {
						return fmt.Errorf("node %s: %w", nodes[i].Addr(), err)
					}
				}
			case st.PerShard:
				if err := execPerShard(ctx, nodes, stores, st); err != nil {
					return err
				}
			}
		}
		for _, st := range steps {
			if !st.PerNode && !st.PerShard {
				if err := s.conn.Exec(ctx, st.SQL); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := run(migrationsTable); err != nil {
		return nil, fmt.Errorf("create schema_migrations on cluster %s: %w", cluster, err)
	}
	applied, err := s.appliedMigrations(ctx)
	if err != nil {
		return nil, err
	}
	res, err := s.applyMigrations(ctx, migs, applied, *oldest, run,
		"cluster", cluster, "nodes", len(nodes), "replicated", layout.Replicated)
	if err != nil {
		return res, fmt.Errorf("cluster %s: %w", cluster, err)
	}
	return res, nil
}

// clusterReplication decides between Replicated and plain shard-local
// tables: Replicated when every node has Keeper (and the {shard} and
// {replica} macros its paths need), plain when none has and every shard
// has one replica. Anything in between is a configuration error.
func clusterReplication(ctx context.Context, nodes []ClusterNode, stores []*Store) (bool, error) {
	withKeeper, replicas := 0, map[uint32]int{}
	for i, ns := range stores {
		has, err := ns.hasKeeper(ctx)
		if err != nil {
			return false, fmt.Errorf("node %s: %w", nodes[i].Addr(), err)
		}
		if has {
			withKeeper++
			if err := ns.hasMacros(ctx, "shard", "replica"); err != nil {
				return false, fmt.Errorf("node %s: replicated tables: %w", nodes[i].Addr(), err)
			}
		}
		replicas[nodes[i].Shard]++
	}
	switch {
	case withKeeper == len(stores):
		return true, nil
	case withKeeper > 0:
		return false, fmt.Errorf("%d of %d nodes have Keeper/ZooKeeper configured: configure it on all or none", withKeeper, len(stores))
	}
	for shard, n := range replicas {
		if n > 1 {
			return false, fmt.Errorf("shard %d has %d replicas but no node has Keeper/ZooKeeper: replicas cannot stay in step without it", shard, n)
		}
	}
	return false, nil
}

// execUnlessColumn runs a step, an ADD COLUMN only where the column is
// missing.
func execUnlessColumn(ctx context.Context, ns *Store, st clusterStep) error {
	if st.Column != "" {
		has, err := ns.hasColumn(ctx, st.Table, st.Column)
		if err != nil || has {
			return err
		}
	}
	return ns.conn.Exec(ctx, st.SQL)
}

// replicatedAlterWait bounds how long MigrateCluster waits for a replicated
// ALTER to reach every replica of a shard.
const replicatedAlterWait = 2 * time.Minute

// execPerShard runs a replicated ALTER on the first replica of each shard.
// After an ADD COLUMN it waits until every replica of the shard has the
// column, so the Distributed table's ALTER that follows finds it
// everywhere; a MODIFY (column type and codec, TTL) changes nothing the
// Distributed table depends on, and the other replicas apply it from the
// replication log.
func execPerShard(ctx context.Context, nodes []ClusterNode, stores []*Store, st clusterStep) error {
	done := map[uint32]bool{}
	for i, ns := range stores {
		if done[nodes[i].Shard] {
			continue
		}
		done[nodes[i].Shard] = true
		if err := execUnlessColumn(ctx, ns, st); err != nil {
			return fmt.Errorf("node %s: %w", nodes[i].Addr(), err)
		}
	}
	if st.Column == "" {
		return nil
	}
	deadline := time.Now().Add(replicatedAlterWait)
	for i, ns := range stores {
		for {
			has, err := ns.hasColumn(ctx, st.Table, st.Column)
			if err != nil {
				return fmt.Errorf("node %s: %w", nodes[i].Addr(), err)
			}
			if has {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("node %s: column %s.%s has not replicated within %s", nodes[i].Addr(), st.Table, st.Column, replicatedAlterWait)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}
