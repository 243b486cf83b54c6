package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// TestTwoShardCluster runs gpumeter on two ClickHouse servers that are the
// shards of one remote_servers cluster: `migrate --cluster` lays the
// schema out, the simulated fleet's collector ships through the
// Distributed table while the second shard is stopped and started again,
// and then rollup, usage and the invoice run read through the Distributed
// tables. Samples must land on both shards, each sample id on one shard
// only, and every total must equal the simulator's ledger exactly.
func TestTwoShardCluster(t *testing.T) {
	shards := storetest.StartCluster(t, 2)
	dsn := fmt.Sprintf("clickhouse://127.0.0.1:%d/gpumeter", shards[0].TCPPort)
	migrateCluster(t, dsn)
	// Again, from the other shard: nothing left to do.
	dsn2 := fmt.Sprintf("clickhouse://127.0.0.1:%d/gpumeter", shards[1].TCPPort)
	code, out, stderr := harness.Run(t, "--clickhouse", dsn2, "migrate", "--cluster", storetest.ClusterName)
	if code != 0 || strings.Contains(out, ": applied") {
		t.Fatalf("second migrate --cluster: exit %d\n%s\n%s", code, out, stderr)
	}
	// A plain migrate would create tables on one node only.
	code, _, stderr = harness.Run(t, "--clickhouse", dsn, "migrate")
	if code != 1 || !strings.Contains(stderr, "migrate --cluster "+storetest.ClusterName) {
		t.Fatalf("plain migrate on a cluster: exit %d\n%s", code, stderr)
	}

	const seed, hosts = 11, 2
	start := time.Date(2026, 11, 9, 0, 0, 0, 0, time.UTC)
	d := 2 * time.Hour
	collector := startCollector(t, dsn, seed, hosts, start, d)
	stderrText := collector.Stderr.String
	harness.Eventually(t, "first samples on the cluster", time.Minute, func() bool { return harness.StoredSamples(dsn) > 0 })
	// The shard that is not the one the collector connects to: inserts
	// through the Distributed table must fail, not queue, while it is down.
	shards[1].Stop()
	const failed = "shipper insert failed, retrying"
	harness.Eventually(t, "three failed inserts", time.Minute, func() bool { return strings.Count(stderrText(), failed) >= 3 })
	shards[1].Start()
	if code = collector.Wait(t, 10*time.Minute); code != 0 {
		t.Fatalf("collect exit %d\n%s", code, stderrText())
	}
	harness.AssertStoredMatchesSimulator(t, dsn, seed, hosts, start, d)

	// Where the rows are: on both shards, each sample id on one of them.
	var perShard []uint64
	var sumDistinct uint64
	for _, sh := range shards {
		rows, distinct := localSampleCounts(t, sh.TCPPort)
		perShard = append(perShard, rows)
		sumDistinct += distinct
	}
	_, clusterDistinct := distributedSampleCounts(t, shards[0].TCPPort)
	t.Logf("rows per shard %v, distinct sample ids %d", perShard, clusterDistinct)
	for i, n := range perShard {
		if n == 0 {
			t.Errorf("shard %d holds no samples", i+1)
		}
	}
	if sumDistinct != clusterDistinct {
		t.Errorf("distinct sample ids: %d summed over shards, %d across the cluster: an id on two shards", sumDistinct, clusterDistinct)
	}

	// The rollup reads and writes through the Distributed tables; hourly
	// totals equal the ledger too.
	if code, _, stderr := harness.Run(t, "--clickhouse", dsn, "rollup", "--scheduled"); code != 0 {
		t.Fatalf("rollup: exit %d\n%s", code, stderr)
	}
	ledger := harness.SimulatedLedger(t, seed, hosts, start, d)
	hourly := usageByTenant(t, dsn2, start, start.Add(d), usage.SourceHourly)
	for _, tenant := range ledger.Tenants() {
		if got, want := hourly[tenant], ledger.GPUMicroseconds[tenant]; got != want {
			t.Errorf("hourly rollup, tenant %q: %d gpu-µs, simulator ran %d", tenant, got, want)
		}
	}
	if len(hourly) != len(ledger.Tenants()) {
		t.Errorf("hourly rollup holds %d tenants, the simulator ran %d", len(hourly), len(ledger.Tenants()))
	}

	// The invoice run: its lease, invoice rows and lines go through the
	// Distributed tables; a second run from the other shard changes nothing.
	cfg := filepath.Join("..", "..", "internal", "demo", "billing", "gpumeter.yaml")
	code, out, stderr = harness.Run(t, "--clickhouse", dsn, "--config", cfg, "invoice", "run", "--period", "2026-11", "--quiet")
	if code != 0 || !strings.Contains(out, "finalized") {
		t.Fatalf("invoice run: exit %d\n%s\n%s", code, out, stderr)
	}
	first := listInvoices(t, dsn, cfg)
	code, out, stderr = harness.Run(t, "--clickhouse", dsn2, "--config", cfg, "invoice", "run", "--period", "2026-11", "--quiet")
	if code != 0 {
		t.Fatalf("second invoice run: exit %d\n%s\n%s", code, out, stderr)
	}
	second := listInvoices(t, dsn2, cfg)
	if len(first) == 0 || fmt.Sprint(first) != fmt.Sprint(second) {
		t.Fatalf("invoices changed by a second run:\n%v\n%v", first, second)
	}
	for _, inv := range first {
		if inv.Status != "finalized" || inv.Number == "" {
			t.Errorf("invoice %+v: want finalized with a number", inv)
		}
	}
	t.Logf("%d invoices finalized", len(first))

	// The API, served from the other shard with a key made through the
	// first: usage per tenant equals the ledger to the GPU-microsecond.
	code, token, stderr := harness.Run(t, "--clickhouse", dsn, "keys", "create", "--scope", "admin", "--expires", "1h")
	if code != 0 {
		t.Fatalf("keys create: exit %d\n%s", code, stderr)
	}
	addr, _ := harness.StartServe(t, "--clickhouse", dsn2)
	code, body := harness.GetAuthed(t, addr, token, "/v1/usage?step=month&group_by=tenant&meters=gpu_hours"+
		"&from="+start.Format(time.RFC3339)+"&to="+start.Add(d).Format(time.RFC3339))
	var usage struct {
		Points []struct {
			Tenant   string
			GPUHours string `json:"gpu_hours"`
		}
	}
	if err := json.Unmarshal(body, &usage); err != nil || code != http.StatusOK {
		t.Fatalf("GET /v1/usage: %d %v", code, err)
	}
	api := map[string]string{}
	for _, p := range usage.Points {
		api[p.Tenant] = p.GPUHours
	}
	for _, tenant := range ledger.Tenants() {
		if want := (meter.Totals{Values: meter.Values{GPUMicroseconds: ledger.GPUMicroseconds[tenant]}}).GPUHours().String(); api[tenant] != want {
			t.Errorf("GET /v1/usage, tenant %q: %s gpu_hours, simulator ran %s", tenant, api[tenant], want)
		}
	}
}

// TestReplicatedCluster runs the collector on one shard of two replicas
// (Replicated tables kept in step through a real ZooKeeper) and stops the
// second replica mid-run: inserts keep landing on the first, the second
// catches up by replication when it is back, and both then hold every
// sample once, equal to the simulator's ledger.
func TestReplicatedCluster(t *testing.T) {
	zk := storetest.StartZooKeeper(t)
	replicas := storetest.StartReplicatedCluster(t, zk, 2)
	dsn := fmt.Sprintf("clickhouse://127.0.0.1:%d/gpumeter", replicas[0].TCPPort)
	dsn2 := fmt.Sprintf("clickhouse://127.0.0.1:%d/gpumeter", replicas[1].TCPPort)
	migrateCluster(t, dsn)
	if engine := queryString(t, replicas[1].TCPPort, "SELECT engine FROM system.tables WHERE database = 'gpumeter' AND name = 'usage_samples_local'"); engine != "ReplicatedReplacingMergeTree" {
		t.Fatalf("usage_samples_local on the second replica is %q, want ReplicatedReplacingMergeTree", engine)
	}

	const seed, hosts = 7, 2
	start := time.Date(2026, 11, 12, 0, 0, 0, 0, time.UTC)
	d := 2 * time.Hour
	collector := startCollector(t, dsn, seed, hosts, start, d)
	harness.Eventually(t, "first samples on the cluster", time.Minute, func() bool { return harness.StoredSamples(dsn) > 0 })
	replicas[1].Stop()
	down := harness.StoredSamples(dsn)
	harness.Eventually(t, "inserts while the second replica is down", time.Minute, func() bool { return harness.StoredSamples(dsn) > down+1000 })
	replicas[1].Start()
	if code := collector.Wait(t, 10*time.Minute); code != 0 {
		t.Fatalf("collect exit %d\n%s", code, collector.Stderr.String())
	}
	for i, r := range replicas {
		execOn(t, r.TCPPort, "SYSTEM SYNC REPLICA gpumeter.usage_samples_local")
		rows, distinct := localSampleCounts(t, r.TCPPort)
		t.Logf("replica %d: %d rows, %d distinct sample ids", i+1, rows, distinct)
	}
	r1, d1 := localSampleCounts(t, replicas[0].TCPPort)
	r2, d2 := localSampleCounts(t, replicas[1].TCPPort)
	if d1 == 0 || d1 != d2 || r1 != r2 {
		t.Errorf("replicas differ after sync: %d/%d rows, %d/%d distinct sample ids", r1, r2, d1, d2)
	}
	// Read through each replica in turn (the other one stopped, so the
	// Distributed table must answer from the one that is up).
	replicas[0].Stop()
	harness.AssertStoredMatchesSimulator(t, dsn2, seed, hosts, start, d)
	replicas[0].Start()
	replicas[1].Stop()
	harness.AssertStoredMatchesSimulator(t, dsn, seed, hosts, start, d)
	replicas[1].Start()
}

// migrateCluster lays the schema out on the cluster through dsn's node.
func migrateCluster(t *testing.T, dsn string) {
	t.Helper()
	code, out, stderr := harness.Run(t, "--clickhouse", dsn, "migrate", "--cluster", storetest.ClusterName)
	if code != 0 || strings.Count(out, ": applied") < 11 {
		t.Fatalf("migrate --cluster: exit %d\n%s\n%s", code, out, stderr)
	}
}

// startCollector starts the simulated fleet's collector against dsn, fast
// (900x) and shipping often, with retries that back off at most 500 ms,
// so that a node stopped mid-run shows in a few failed inserts.
func startCollector(t *testing.T, dsn string, seed int64, hosts int, start time.Time, d time.Duration) *harness.Process {
	t.Helper()
	return harness.Start(t, "--clickhouse", dsn, "collect", "--simulate", "--hosts", strconv.Itoa(hosts),
		"--seed", strconv.FormatInt(seed, 10), "--start", start.Format(time.RFC3339), "--duration", d.String(), "--speed", "900",
		"--spool", t.TempDir(), "--batch-rows", "1", "--ship-batch-rows", "10000", "--ship-flush", "200ms",
		"--ship-backoff-max", "500ms", "--listen", "")
}

func queryString(t *testing.T, port int, query string) string {
	t.Helper()
	conn := nodeConn(t, port)
	defer conn.Close()
	var s string
	if err := conn.QueryRow(context.Background(), query).Scan(&s); err != nil {
		t.Fatalf("%s on port %d: %v", query, port, err)
	}
	return s
}

func execOn(t *testing.T, port int, stmt string) {
	t.Helper()
	conn := nodeConn(t, port)
	defer conn.Close()
	if err := conn.Exec(context.Background(), stmt); err != nil {
		t.Fatalf("%s on port %d: %v", stmt, port, err)
	}
}

func nodeConn(t *testing.T, port int) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{fmt.Sprintf("127.0.0.1:%d", port)},
		Auth: clickhouse.Auth{Database: "gpumeter", Username: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func usageByTenant(t *testing.T, dsn string, from, to time.Time, source usage.Source) map[string]uint64 {
	t.Helper()
	ctx := context.Background()
	s := harness.OpenStore(t, dsn)
	rows, err := s.Usage(ctx, usage.Query{From: from, To: to, GroupBy: []usage.Dimension{usage.DimTenant}, Source: source})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, r := range rows {
		out[r.Tenant] = r.GPUMicroseconds
	}
	return out
}

// localSampleCounts and distributedSampleCounts ask a node directly (the
// store has no business reading one shard's part).
func localSampleCounts(t *testing.T, port int) (rows, distinct uint64) {
	t.Helper()
	return sampleCounts(t, port, "usage_samples"+store.LocalSuffix)
}

func distributedSampleCounts(t *testing.T, port int) (rows, distinct uint64) {
	t.Helper()
	return sampleCounts(t, port, "usage_samples")
}

func sampleCounts(t *testing.T, port int, table string) (rows, distinct uint64) {
	t.Helper()
	conn := nodeConn(t, port)
	defer conn.Close()
	if err := conn.QueryRow(context.Background(), "SELECT count(), uniqExact(sample_id) FROM "+table).Scan(&rows, &distinct); err != nil {
		t.Fatalf("count %s on port %d: %v", table, port, err)
	}
	return rows, distinct
}

type listedInvoice struct {
	ID, Number, Tenant, Status string
	TotalMinor                 int64 `json:"total_minor"`
}

func listInvoices(t *testing.T, dsn, cfg string) []listedInvoice {
	t.Helper()
	code, out, stderr := harness.Run(t, "--clickhouse", dsn, "--config", cfg, "invoice", "list", "--json")
	if code != 0 {
		t.Fatalf("invoice list: %d %s", code, stderr)
	}
	var got []listedInvoice
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("invoice list --json: %v\n%s", err, out)
	}
	return got
}
