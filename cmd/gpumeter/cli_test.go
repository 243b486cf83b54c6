package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/store/storetest"
)

// gpumeter runs the command line args and returns exit code, stdout and stderr.
func gpumeter(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// runCommand runs cmd, a command built on its own, outside the tree, with
// args: no global flags and no setup, so g, which it was built with,
// stands for what the root's setup makes.
func runCommand(ctx context.Context, cmd *cobra.Command, args []string) error {
	cmd.SetArgs(append([]string{}, args...)) // never nil: cobra reads os.Args then
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	return cmd.ExecuteContext(ctx)
}

// testDSN gives a fresh, migrated database for this test.
func testDSN(t *testing.T) string {
	t.Helper()
	cfg := storetest.Config(t)
	storetest.NewWithConfig(t, cfg)
	return fmt.Sprintf("clickhouse://%s/%s", cfg.Addrs[0], cfg.Database)
}

func TestCLIRejectsBadInvocations(t *testing.T) {
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"no command", nil, "want a command: chargeback, collect"},
		{"bad log level", []string{"--log-level", "loud", "migrate"}, "log-level"},
		{"bad dsn", []string{"--clickhouse", "http://x:8123", "migrate"}, "clickhouse://"},
		{"missing config file", []string{"--config", "/nonexistent.yaml", "migrate"}, "nonexistent.yaml"},
		{"import without file", []string{"import"}, "no file"},
		{"import unknown format", []string{"import", "usage.txt"}, "format"},
		{"import bad batch", []string{"import", "--batch", "0", "x.csv"}, "--batch"},
		{"usage without from", []string{"usage"}, "--from"},
		{"usage bad dimension", []string{"usage", "--from", "2026-11-01", "--by", "colour"}, "colour"},
		{"usage bad bucket", []string{"usage", "--from", "2026-11-01", "--bucket", "week"}, "week"},
		{"usage to before from", []string{"usage", "--from", "2026-11-02", "--to", "2026-11-01"}, "after"},
		{"rollup needs a range or --scheduled", []string{"rollup"}, "either"},
		{"rollup bad date", []string{"rollup", "--from", "yesterday", "--to", "2026-11-01"}, "--from"},
		{"retention zero days", []string{"retention", "--raw-days", "0"}, "raw_days"},
		{"serve bad listen", []string{"serve", "--listen", "nowhere"}, "listen"},
		// Before the fix an empty --clickhouse silently meant the local default.
		{"empty clickhouse dsn", []string{"--clickhouse", "", "usage", "--from", "2026-11-01"}, "--clickhouse: empty value"},
		{"empty config path", []string{"--config=", "migrate"}, "--config: empty value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := gpumeter(t, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.msg) {
				t.Fatalf("exit %d, stderr %q; want 2 mentioning %q", code, stderr, tc.msg)
			}
		})
	}
}

func TestCLIMigrateImportUsageRollup(t *testing.T) {
	dsn := testDSN(t)
	code, out, stderr := gpumeter(t, "--clickhouse", dsn, "migrate")
	if code != 0 || !strings.Contains(out, "0001_usage_samples: already applied") {
		t.Fatalf("migrate: %d %q %q", code, out, stderr)
	}

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("host,gpu_uuid,gpu_model,tenant,workload,start,end,gpu_seconds\n"+
		"h,G,H100-SXM5-80GB,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10\n"+
		"h,G,H100-SXM5-80GB,,j,2026-11-01T10:00:10Z,2026-11-01T10:00:20Z,10\n"), 0o600)
	code, _, stderr = gpumeter(t, "--clickhouse", dsn, "import", "--quiet", bad)
	if code != 2 || !strings.Contains(stderr, "bad.csv:3: tenant") {
		t.Fatalf("bad import: exit %d, stderr %q", code, stderr)
	}

	// Several files: a bad one means none is stored.
	good := filepath.Join(dir, "good.csv")
	os.WriteFile(good, []byte("host,gpu_uuid,gpu_model,tenant,workload,start,end,gpu_seconds,energy_joules\n"+
		"h,G,H100-SXM5-80GB,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10,7000\n"), 0o600)
	code, _, stderr = gpumeter(t, "--clickhouse", dsn, "import", "--quiet", good, bad)
	if code != 2 || !strings.Contains(stderr, "nothing was imported") {
		t.Fatalf("two files, second bad: exit %d, stderr %q", code, stderr)
	}
	if code, out, _ := gpumeter(t, "--clickhouse", dsn, "usage", "--from", "2026-11-01", "--to", "2026-11-02", "--json"); code != 0 || strings.Contains(out, "acme") {
		t.Fatalf("the good file was stored although the other was bad: %s", out)
	}

	os.WriteFile(good, []byte("host,gpu_uuid,gpu_model,tenant,workload,start,end,gpu_seconds,energy_joules\n"+
		"h,G,H100-SXM5-80GB,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10,7000\n"+
		"h,G,H100-SXM5-80GB,acme,j,2026-11-01T10:00:10Z,2026-11-01T10:00:20Z,10,7000\n"), 0o600)
	for i := 0; i < 2; i++ {
		if code, out, stderr = gpumeter(t, "--clickhouse", dsn, "import", good); code != 0 || !strings.Contains(out, "imported 2 rows") {
			t.Fatalf("import %d: %d %q %q", i, code, out, stderr)
		}
	}
	code, out, stderr = gpumeter(t, "--clickhouse", dsn, "usage", "--from", "2026-11-01", "--to", "2026-11-02", "--json")
	if code != 0 || !strings.Contains(out, `"gpu_hours": "0.005555555555555556"`) || !strings.Contains(out, `"samples": 2`) {
		t.Fatalf("usage after importing twice: %d %s %s", code, out, stderr)
	}
	code, out, stderr = gpumeter(t, "--clickhouse", dsn, "rollup", "--from", "2026-11-01", "--to", "2026-11-02")
	if code != 0 {
		t.Fatalf("rollup: %d %s %s", code, out, stderr)
	}
	code, out, _ = gpumeter(t, "--clickhouse", dsn, "usage", "--from", "2026-11-01", "--to", "2026-11-02", "--source", "hourly", "--json")
	if code != 0 || !strings.Contains(out, `"energy_kwh": "0.003888888888888889"`) {
		t.Fatalf("hourly usage: %d %s", code, out)
	}
}
