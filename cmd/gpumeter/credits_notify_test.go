package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// credits notify runs the credit job once: a grant expiring within the
// week puts credits.expiring in the outbox, and a second run finds it due
// again and writes nothing.
func TestCreditsNotifyCLI(t *testing.T) {
	dsn, cfg := invoiceFixture(t)
	g := []string{"--clickhouse", dsn, "--config", cfg}
	expires := time.Now().UTC().AddDate(0, 0, 3).Format(time.RFC3339)
	if code, _, stderr := gpumeter(t, append(g, "credits", "grant", "--tenant", "gamma", "--kind", "promotional", "--amount", "5",
		"--expires", expires)...); code != 0 {
		t.Fatalf("credits grant: %s", stderr)
	}
	for run, want := range []string{"1 notice(s) due, 1 new in the outbox", "1 notice(s) due, 0 new in the outbox"} {
		code, out, stderr := gpumeter(t, append(g, "credits", "notify")...)
		if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "3 customer(s) checked") {
			t.Fatalf("run %d: exit %d %q %s; want %q", run+1, code, out, stderr, want)
		}
	}
	code, out, stderr := gpumeter(t, append(g, "webhooks", "list", "-o", "json")...)
	var evs []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &evs) != nil {
		t.Fatalf("webhooks list: exit %d %q %s", code, out, stderr)
	}
	if len(evs) != 1 || !strings.Contains(out, "credits.expiring") {
		t.Errorf("the outbox: %s", out)
	}
}

// A bad credits section is refused at start with exit status 2, naming
// each problem's config path.
func TestCreditsConfigRefusedWithExit2(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "gpumeter.yaml")
	body := "credits:\n  at_zero: kill\n  thresholds: [50, 0, 120]\n  expiring_days: -1\n  schedule: \"\"\n  horizon: 10s\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := gpumeter(t, "--config", cfg, "credits", "notify")
	if code != 2 || stdout != "" {
		t.Fatalf("exit %d, stdout %q; want 2", code, stdout)
	}
	for _, want := range []string{cfg, `credits.at_zero "kill"`, "credits.thresholds[1] 0", "credits.thresholds[2] 120",
		"credits.expiring_days -1", "credits.schedule: required", "credits.horizon 10s"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// serve runs the credit job on credits.schedule: a grant expiring within
// the week reaches the outbox without any command; a schedule that is no
// cron spec is refused at start with exit status 2 naming it.
func TestServeRunsTheCreditJob(t *testing.T) {
	dsn, cfg := invoiceFixture(t)
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("credits:\n  schedule: \"@every 1s\"\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	g := []string{"--clickhouse", dsn, "--config", cfg}
	expires := time.Now().UTC().AddDate(0, 0, 2).Format(time.RFC3339)
	if code, _, stderr := gpumeter(t, append(g, "credits", "grant", "--tenant", "beta", "--kind", "prepaid", "--amount", "7",
		"--expires", expires)...); code != 0 {
		t.Fatalf("credits grant: %s", stderr)
	}
	startServe(t, g...)
	eventually(t, "the credit job to write credits.expiring", 30*time.Second, func() bool {
		code, out, _ := gpumeter(t, append(g, "webhooks", "list", "-o", "json")...)
		return code == 0 && strings.Contains(out, "credits.expiring")
	})

	bad := filepath.Join(filepath.Dir(cfg), "bad.yaml") // beside the book
	body, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(strings.Replace(string(body), "@every 1s", "every tuesday", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := gpumeter(t, "--clickhouse", dsn, "--config", bad, "serve", "--plain-http", "--listen", "127.0.0.1:0", "--metrics-listen", "")
	if code != 2 || !strings.Contains(stderr, "credits.schedule") {
		t.Errorf("a bad credits.schedule: exit %d, %s; want 2 naming it", code, stderr)
	}
}
