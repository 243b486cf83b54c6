package store_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/schemas"
)

// The paths of cluster mode that the two-shard end-to-end test
// (cmd/gpumeter TestTwoShardCluster) does not take: refusals, a node down
// during migration, retention (raw months, the admission log) on every
// shard. One cluster serves them all,
// each subtest in its own database.
func TestMigrateCluster(t *testing.T) {
	nodes := storetest.StartCluster(t, 2)
	ctx := context.Background()
	open := func(t *testing.T, node int, db string) *store.Store {
		t.Helper()
		cfg, err := store.ParseDSN(nodes[node].DSN())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Database = db
		if err := store.CreateDatabase(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		s, err := store.Open(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}

	t.Run("unknown cluster", func(t *testing.T) {
		s := open(t, 0, "c_unknown")
		_, err := s.MigrateCluster(ctx, schemas.FS, "no_such_cluster")
		if err == nil || !strings.Contains(err.Error(), "system.clusters") {
			t.Fatalf("err = %v, want one naming remote_servers/system.clusters", err)
		}
		if _, err := s.MigrateCluster(ctx, schemas.FS, "bad name"); err == nil {
			t.Fatal("a cluster name with a space was accepted")
		}
	})

	t.Run("single-node schema on one node", func(t *testing.T) {
		if _, err := open(t, 1, "c_single").Migrate(ctx, schemas.FS); err != nil {
			t.Fatal(err)
		}
		_, err := open(t, 0, "c_single").MigrateCluster(ctx, schemas.FS, storetest.ClusterName)
		if !errors.Is(err, store.ErrNotClusterSchema) {
			t.Fatalf("err = %v, want ErrNotClusterSchema", err)
		}
	})

	t.Run("a node down fails the run, which completes once it is back", func(t *testing.T) {
		s := open(t, 0, "c_down")
		nodes[1].Stop()
		_, err := s.MigrateCluster(ctx, schemas.FS, storetest.ClusterName)
		nodes[1].Start()
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d", nodes[1].TCPPort)) {
			t.Fatalf("err = %v, want one naming the node that is down", err)
		}
		res, err := s.MigrateCluster(ctx, schemas.FS, storetest.ClusterName)
		if err != nil {
			t.Fatal(err)
		}
		gated := newerServerMigrations(t, s)
		for _, r := range res {
			if r.Status != "applied" && !(gated[r.Version] && r.Status == "skipped (server too old)") {
				t.Errorf("migration %04d_%s: %s", r.Version, r.Name, r.Status)
			}
		}
		if _, err := s.Migrate(ctx, schemas.FS); !errors.Is(err, store.ErrClusterSchema) {
			t.Fatalf("plain Migrate on a cluster: err = %v, want ErrClusterSchema", err)
		}
		if err := open(t, 1, "c_down").Migrated(ctx, schemas.FS); err != nil {
			t.Fatalf("the other node's readiness: %v", err)
		}
	})

	t.Run("a migration cut short after some ADD COLUMNs runs again", func(t *testing.T) {
		s := open(t, 0, "c_rerun")
		if _, err := s.MigrateCluster(ctx, schemas.FS, storetest.ClusterName); err != nil {
			t.Fatal(err)
		}
		// As if a run had added the column on one node's table and
		// stopped before recording the migration.
		next := fstest.MapFS{"0900_extra.sql": {Data: []byte(
			"ALTER TABLE usage_hourly ADD COLUMN extra UInt8 DEFAULT 0;\nALTER TABLE usage_samples ADD COLUMN extra UInt8 DEFAULT 0;\n")}}
		node2 := open(t, 1, "c_rerun")
		if err := node2.ExecForTest(ctx, "ALTER TABLE usage_samples_local ADD COLUMN extra UInt8 DEFAULT 0"); err != nil {
			t.Fatal(err)
		}
		res, err := s.MigrateCluster(ctx, next, storetest.ClusterName)
		if err != nil || len(res) != 1 || res[0].Status != "applied" {
			t.Fatalf("res %v, err %v", res, err)
		}
	})

	t.Run("retention lists and drops raw months on every shard", func(t *testing.T) {
		s := open(t, 0, "c_retention")
		if _, err := s.MigrateCluster(ctx, schemas.FS, storetest.ClusterName); err != nil {
			t.Fatal(err)
		}
		oct := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
		nov := oct.AddDate(0, 1, 0)
		var samples []collectors.Sample
		for i := 0; i < 200; i++ {
			for _, month := range []time.Time{oct, nov} {
				smp := collectors.Sample{Host: "h", GPUUUID: fmt.Sprintf("GPU-%d", i), GPUModel: "H100-SXM5-80GB", SKU: "H100-SXM5-80GB",
					Tenant: "acme", Start: month, End: month.Add(10 * time.Second),
					Values: meter.Values{GPUMicroseconds: 10_000_000}}
				smp.ID = collectors.SampleID(smp.Host, smp.GPUUUID, smp.Tenant, smp.Workload, smp.Start)
				samples = append(samples, smp)
			}
		}
		if err := s.InsertSamples(ctx, samples); err != nil {
			t.Fatal(err)
		}
		for i := range nodes {
			if n := localRows(t, open(t, i, "c_retention")); n == 0 {
				t.Fatalf("node %d holds no samples: the test would not show a drop on every shard", i+1)
			}
		}
		months, err := s.RawMonths(ctx)
		if err != nil || !reflect.DeepEqual(months, []time.Time{oct, nov}) {
			t.Fatalf("RawMonths = %v, %v; want October and November", months, err)
		}
		if err := s.DropRawMonth(ctx, oct); err != nil {
			t.Fatal(err)
		}
		months, err = s.RawMonths(ctx)
		if err != nil || !reflect.DeepEqual(months, []time.Time{nov}) {
			t.Fatalf("after the drop RawMonths = %v, %v; want November", months, err)
		}
		rows, _, err := s.SampleCounts(ctx)
		if err != nil || rows != 200 {
			t.Fatalf("%d samples left (err %v), want November's 200", rows, err)
		}
	})

	t.Run("retention prunes the admission log on every shard", func(t *testing.T) {
		s := open(t, 0, "c_admlog")
		if _, err := s.MigrateCluster(ctx, schemas.FS, storetest.ClusterName); err != nil {
			t.Fatal(err)
		}
		now := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
		before := now.Add(-rollup.AdmissionLogRetention)
		var parts []quota.Admitted
		var holds []quota.CreditHold
		for i := 0; i < 20; i++ {
			for _, end := range []time.Time{now.Add(time.Hour), before.Add(-time.Hour)} {
				id := fmt.Sprintf("adm-%d-%d", i, end.Unix())
				parts = append(parts, quota.Admitted{ID: id, Tenant: fmt.Sprintf("t%d", i), GPUModel: "H100-SXM5-80GB", Expires: end})
				holds = append(holds, quota.CreditHold{Tenant: fmt.Sprintf("t%d", i), Hold: credits.Hold{ID: id, Until: end}})
			}
		}
		if err := s.SaveAdmissions(ctx, parts); err != nil {
			t.Fatal(err)
		}
		if err := s.SaveCreditHolds(ctx, holds); err != nil {
			t.Fatal(err)
		}
		ended := func(i int) (admissions, holds uint64) {
			t.Helper()
			node := open(t, i, "c_admlog")
			a, errA := node.CountForTest(ctx, fmt.Sprintf("SELECT count() FROM quota_admissions%s WHERE expires_at < toDateTime(%d)", store.LocalSuffix, before.Unix()))
			h, errH := node.CountForTest(ctx, fmt.Sprintf("SELECT count() FROM credit_holds%s WHERE held_until < toDateTime(%d)", store.LocalSuffix, before.Unix()))
			if errA != nil || errH != nil {
				t.Fatal(errA, errH)
			}
			return a, h
		}
		for i := range nodes {
			if a, h := ended(i); a == 0 || h == 0 {
				t.Fatalf("node %d holds %d ended parts and %d ended holds: the test would not show a prune on every shard", i+1, a, h)
			}
		}
		n, err := s.PruneAdmissionLog(ctx, before)
		if err != nil || n != 40 {
			t.Fatalf("pruned %d rows (%v), want 40: 20 parts and 20 holds", n, err)
		}
		for i := range nodes {
			if a, h := ended(i); a != 0 || h != 0 {
				t.Errorf("node %d still holds %d ended parts and %d ended holds", i+1, a, h)
			}
		}
		if held, err := s.HeldAdmissions(ctx, now); err != nil || len(held) != 20 {
			t.Errorf("after the prune %d parts held (%v), want 20", len(held), err)
		}
		if hs, err := s.CreditHolds(ctx, now.Add(-24*time.Hour)); err != nil || len(hs) != 20 {
			t.Errorf("after the prune %d credit holds (%v), want 20", len(hs), err)
		}
	})
}

func localRows(t *testing.T, s *store.Store) uint64 {
	t.Helper()
	n, err := s.CountForTest(context.Background(), "SELECT count() FROM usage_samples"+store.LocalSuffix)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
