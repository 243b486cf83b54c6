package store

import (
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/schemas"
)

func TestClusterSteps(t *testing.T) {
	plain := ClusterLayout{Cluster: "fleet", Database: "gm"}
	replicated := ClusterLayout{Cluster: "fleet", Database: "gm", Replicated: true}
	tests := []struct {
		name   string
		layout ClusterLayout
		stmt   string
		want   []clusterStep
		err    string
	}{
		{
			name:   "replacing table with an empty engine argument list",
			layout: plain,
			stmt:   "CREATE TABLE IF NOT EXISTS usage_samples (\n    sample_id UInt64\n) ENGINE = ReplacingMergeTree()\nPARTITION BY toYYYYMM(start)\nORDER BY (tenant, start, sample_id)",
			want: []clusterStep{
				{SQL: "CREATE TABLE IF NOT EXISTS usage_samples_local (\n    sample_id UInt64\n) ENGINE = ReplacingMergeTree()\nPARTITION BY toYYYYMM(start)\nORDER BY (tenant, start, sample_id)", PerNode: true},
				{SQL: "CREATE TABLE IF NOT EXISTS usage_samples AS usage_samples_local ENGINE = Distributed(fleet, gm, usage_samples_local, sample_id)", PerNode: true},
			},
		},
		{
			name:   "replicated, version column kept after the path and replica",
			layout: replicated,
			stmt:   "CREATE TABLE IF NOT EXISTS usage_hourly (\n    hour DateTime('UTC'),\n    version UInt64\n) ENGINE = ReplacingMergeTree(version)\nORDER BY (tenant, hour)",
			want: []clusterStep{
				{SQL: "CREATE TABLE IF NOT EXISTS usage_hourly_local (\n    hour DateTime('UTC'),\n    version UInt64\n) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/gm/usage_hourly_local', '{replica}', version)\nORDER BY (tenant, hour)", PerNode: true},
				{SQL: "CREATE TABLE IF NOT EXISTS usage_hourly AS usage_hourly_local ENGINE = Distributed(fleet, gm, usage_hourly_local, cityHash64(tenant))", PerNode: true},
			},
		},
		{
			name:   "replicated plain MergeTree",
			layout: replicated,
			stmt:   "CREATE TABLE IF NOT EXISTS api_audit (at DateTime) ENGINE = MergeTree() ORDER BY at",
			want: []clusterStep{
				{SQL: "CREATE TABLE IF NOT EXISTS api_audit_local (at DateTime) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/gm/api_audit_local', '{replica}') ORDER BY at", PerNode: true},
				{SQL: "CREATE TABLE IF NOT EXISTS api_audit AS api_audit_local ENGINE = Distributed(fleet, gm, api_audit_local, rand())", PerNode: true},
			},
		},
		{
			name:   "add column on both the local and the distributed table",
			layout: plain,
			stmt:   "ALTER TABLE usage_samples ADD COLUMN unmeasured UInt8 DEFAULT 0",
			want: []clusterStep{
				{SQL: "ALTER TABLE usage_samples_local ADD COLUMN unmeasured UInt8 DEFAULT 0", PerNode: true, Table: "usage_samples_local", Column: "unmeasured"},
				{SQL: "ALTER TABLE usage_samples ADD COLUMN unmeasured UInt8 DEFAULT 0", PerNode: true, Table: "usage_samples", Column: "unmeasured"},
			},
		},
		{
			name:   "a replicated table's column is added on one replica per shard",
			layout: replicated,
			stmt:   "ALTER TABLE usage_samples ADD COLUMN unmeasured UInt8 DEFAULT 0",
			want: []clusterStep{
				{SQL: "ALTER TABLE usage_samples_local ADD COLUMN unmeasured UInt8 DEFAULT 0", PerShard: true, Table: "usage_samples_local", Column: "unmeasured"},
				{SQL: "ALTER TABLE usage_samples ADD COLUMN unmeasured UInt8 DEFAULT 0", PerNode: true, Table: "usage_samples", Column: "unmeasured"},
			},
		},
		{
			name:   "modify a column's type: the local tables on every node, then the distributed table",
			layout: plain,
			stmt:   "ALTER TABLE usage_samples MODIFY COLUMN tenant LowCardinality(String)",
			want: []clusterStep{
				{SQL: "ALTER TABLE usage_samples_local MODIFY COLUMN tenant LowCardinality(String)", PerNode: true},
				{SQL: "ALTER TABLE usage_samples MODIFY COLUMN tenant LowCardinality(String)", PerNode: true},
			},
		},
		{
			name:   "a codec goes to the local tables only, a default to both",
			layout: plain,
			stmt:   "ALTER TABLE usage_samples MODIFY COLUMN inserted_at DateTime('UTC') DEFAULT now() CODEC(DoubleDelta, ZSTD(1))",
			want: []clusterStep{
				{SQL: "ALTER TABLE usage_samples_local MODIFY COLUMN inserted_at DateTime('UTC') DEFAULT now() CODEC(DoubleDelta, ZSTD(1))", PerNode: true},
				{SQL: "ALTER TABLE usage_samples MODIFY COLUMN inserted_at DateTime('UTC') DEFAULT now()", PerNode: true},
			},
		},
		{
			name:   "a replicated table's column is modified on one replica per shard",
			layout: replicated,
			stmt:   "ALTER TABLE usage_hourly MODIFY COLUMN hour DateTime('UTC') CODEC(DoubleDelta, ZSTD(1))",
			want: []clusterStep{
				{SQL: "ALTER TABLE usage_hourly_local MODIFY COLUMN hour DateTime('UTC') CODEC(DoubleDelta, ZSTD(1))", PerShard: true},
				{SQL: "ALTER TABLE usage_hourly MODIFY COLUMN hour DateTime('UTC')", PerNode: true},
			},
		},
		{
			name:   "a TTL applies to the local tables only",
			layout: plain,
			stmt:   "ALTER TABLE api_audit MODIFY TTL at + INTERVAL 400 DAY",
			want:   []clusterStep{{SQL: "ALTER TABLE api_audit_local MODIFY TTL at + INTERVAL 400 DAY", PerNode: true}},
		},
		{
			name:   "a replicated table's TTL is replicated metadata: one replica per shard",
			layout: replicated,
			stmt:   "ALTER TABLE webhook_attempts MODIFY TTL at + INTERVAL 90 DAY",
			want:   []clusterStep{{SQL: "ALTER TABLE webhook_attempts_local MODIFY TTL at + INTERVAL 90 DAY", PerShard: true}},
		},
		{
			name:   "storage settings are each replica's own: every node",
			layout: replicated,
			stmt:   "ALTER TABLE api_audit MODIFY SETTING ttl_only_drop_parts = 1",
			want:   []clusterStep{{SQL: "ALTER TABLE api_audit_local MODIFY SETTING ttl_only_drop_parts = 1", PerNode: true}},
		},
		{name: "a codec-only change without the type", layout: plain,
			stmt: "ALTER TABLE usage_samples MODIFY COLUMN start CODEC(ZSTD(1))", err: "cluster mode knows"},
		{
			name:   "data statements run once through the distributed tables",
			layout: plain,
			stmt:   "INSERT INTO raw_dropped_months (table_name, month) SELECT 'x', today()",
			want:   []clusterStep{{SQL: "INSERT INTO raw_dropped_months (table_name, month) SELECT 'x', today()"}},
		},
		{name: "a table without a sharding key", layout: plain,
			stmt: "CREATE TABLE IF NOT EXISTS mystery (x UInt8) ENGINE = MergeTree() ORDER BY x", err: "no sharding key"},
		{name: "a table that is not a MergeTree", layout: plain,
			stmt: "CREATE TABLE IF NOT EXISTS usage_samples (x UInt8) ENGINE = TinyLog", err: "cluster mode knows"},
		{name: "other DDL", layout: plain, stmt: "DROP TABLE usage_samples", err: "cluster mode knows"},
		{name: "an insert without columns", layout: plain, stmt: "INSERT INTO usage_samples VALUES (1)", err: "cluster mode knows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := clusterSteps(tt.layout, tt.stmt)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d steps, want %d: %#v", len(got), len(tt.want), got)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("step %d:\n got %#v\nwant %#v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// Every statement of every migration has a cluster layout, so a migration
// that cluster mode cannot apply fails here, not on an operator's cluster.
func TestEveryMigrationHasAClusterLayout(t *testing.T) {
	migs, err := LoadMigrations(schemas.FS)
	if err != nil {
		t.Fatal(err)
	}
	created := map[string]bool{}
	for _, stmt := range append([]string{migrationsTable}, statementsOf(migs)...) {
		steps, err := clusterSteps(ClusterLayout{Cluster: "c", Database: "d", Replicated: true}, stmt)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if m := createTableRe.FindStringSubmatch(stmt); m != nil {
			created[m[1]] = true
		}
		for _, st := range steps {
			if strings.Contains(st.SQL, "ENGINE = Replicated") && !strings.Contains(st.SQL, "{replica}") {
				t.Errorf("replicated table without the replica macro: %s", st.SQL)
			}
		}
	}
	for table := range shardKeys {
		if !created[table] {
			t.Errorf("shardKeys names %s, which no migration creates", table)
		}
	}
}

func statementsOf(migs []Migration) []string {
	var out []string
	for _, m := range migs {
		out = append(out, m.Statements...)
	}
	return out
}

func TestClusterLayoutValidate(t *testing.T) {
	for _, l := range []ClusterLayout{
		{Cluster: "", Database: "d"},
		{Cluster: "a b", Database: "d"},
		{Cluster: "c'); DROP", Database: "d"},
		{Cluster: "c", Database: "d-e"},
	} {
		if err := l.Validate(); err == nil {
			t.Errorf("%+v: no error", l)
		}
	}
	if err := (ClusterLayout{Cluster: "gpu_fleet2", Database: "gpumeter"}).Validate(); err != nil {
		t.Error(err)
	}
}
