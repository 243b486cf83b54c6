package cluster

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// TestBackupRestore dumps a database that holds collected samples, rollups,
// finalized invoices, keys and their audit log with scripts/backup.sh, and
// restores it twice into a fresh single-node database and once into a
// two-shard cluster: usage, rollups and invoices read back the same, and
// the second restore counts nothing twice.
func TestBackupRestore(t *testing.T) {
	src := harness.TestDSN(t)
	cfg := filepath.Join("..", "..", "internal", "demo", "billing", "gpumeter.yaml")
	start := time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC)
	d := time.Hour
	var token string
	for _, args := range [][]string{
		{"collect", "--simulate", "--hosts", "1", "--seed", "4", "--start", start.Format(time.RFC3339), "--duration", d.String(),
			"--spool", t.TempDir(), "--listen", ""},
		{"rollup", "--scheduled"},
		{"--config", cfg, "invoice", "run", "--period", "2026-11", "--quiet"},
		{"keys", "create", "--scope", "admin", "--expires", "1h"},
	} {
		code, out, stderr := harness.Run(t, append([]string{"--clickhouse", src}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, stderr)
		}
		token = strings.TrimSpace(out)
	}
	// One use of the key, so the audit log has a row to back up.
	addr, stop := harness.StartServe(t, "--clickhouse", src)
	if code, body := harness.GetAuthed(t, addr, token, "/v1/tenants"); code != http.StatusOK {
		t.Fatalf("GET /v1/tenants: %d %s", code, body)
	}
	stop() // serve flushes the audit log as it stops
	wantRaw := usageByTenant(t, src, start, start.Add(d), usage.SourceRaw)
	wantHourly := usageByTenant(t, src, start, start.Add(d), usage.SourceHourly)
	wantInvoices := fmt.Sprint(listInvoices(t, src, cfg))
	if len(wantRaw) < 3 || wantInvoices == "[]" {
		t.Fatalf("source holds too little to show a restore: %v, invoices %s", wantRaw, wantInvoices)
	}
	dir := t.TempDir()
	backup(t, src, "dump", dir)
	for _, f := range []string{"usage_samples", "usage_hourly", "invoices", "invoice_lines", "api_keys", "api_audit", "schema_migrations"} {
		if st, err := os.Stat(filepath.Join(dir, f+".native")); err != nil || st.Size() == 0 {
			t.Fatalf("dump of %s is missing or empty: %v", f, err)
		}
	}

	check := func(t *testing.T, dsn string) {
		t.Helper()
		if got := usageByTenant(t, dsn, start, start.Add(d), usage.SourceRaw); fmt.Sprint(got) != fmt.Sprint(wantRaw) {
			t.Errorf("raw usage after restore:\n got %v\nwant %v", got, wantRaw)
		}
		if got := usageByTenant(t, dsn, start, start.Add(d), usage.SourceHourly); fmt.Sprint(got) != fmt.Sprint(wantHourly) {
			t.Errorf("hourly usage after restore:\n got %v\nwant %v", got, wantHourly)
		}
		if got := fmt.Sprint(listInvoices(t, dsn, cfg)); got != wantInvoices {
			t.Errorf("invoices after restore:\n got %s\nwant %s", got, wantInvoices)
		}
	}

	t.Run("single node, restored twice", func(t *testing.T) {
		dst := harness.TestDSN(t)
		backup(t, dst, "restore", dir)
		out := backup(t, dst, "restore", dir)
		check(t, dst)
		if !strings.Contains(out, "skipping api_audit") {
			t.Errorf("a second restore did not skip the audit log, which cannot deduplicate:\n%s", out)
		}
		if code, out, _ := harness.Run(t, "--clickhouse", dst, "keys", "list"); code != 0 || !strings.Contains(out, "admin") {
			t.Errorf("keys list after restore: %d %s", code, out)
		}
	})

	t.Run("into a two-shard cluster", func(t *testing.T) {
		shards := storetest.StartCluster(t, 2)
		dst := fmt.Sprintf("clickhouse://127.0.0.1:%d/gpumeter", shards[0].TCPPort)
		if code, _, stderr := harness.Run(t, "--clickhouse", dst, "migrate", "--cluster", storetest.ClusterName); code != 0 {
			t.Fatalf("migrate --cluster: %s", stderr)
		}
		backup(t, dst, "restore", dir)
		check(t, dst)
		for i, sh := range shards {
			if rows, _ := localSampleCounts(t, sh.TCPPort); rows == 0 {
				t.Errorf("shard %d holds none of the restored samples", i+1)
			}
		}
	})
}

// backup runs scripts/backup.sh against a DSN's server and database.
func backup(t *testing.T, dsn, verb, dir string) string {
	t.Helper()
	cfg, err := store.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(cfg.Addrs[0], ":")
	cmd := exec.Command(filepath.Join("..", "..", "scripts", "backup.sh"), verb, dir)
	cmd.Env = append(os.Environ(), "CH_HOST="+host, "CH_PORT="+port, "CH_DATABASE="+cfg.Database)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("backup.sh %s: %v\n%s", verb, err, out)
	}
	return string(out)
}
