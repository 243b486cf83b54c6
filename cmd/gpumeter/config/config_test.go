package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/shopspring/decimal"
)

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gpumeter.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	cfg, err := Load(write(t, "clickhouse:\n  dsn: clickhouse://ch:9000/metering\nrollup:\n  grace: 30m\nretention:\n  raw_days: 45\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := Load(write(t, "collector:\n  spool:\n    dir: /srv/spool\n    overflow: reject\n  shipper:\n    flush_interval: 5s\n")); err != nil ||
		c.Collector.Spool.Dir != "/srv/spool" || c.Collector.Spool.Overflow != "reject" || c.Collector.Shipper.FlushInterval != 5*time.Second ||
		c.Collector.Shipper.BatchRows != 100_000 {
		t.Fatalf("collector section: %+v, %v", c.Collector, err)
	}
	if cfg.Rollup.Grace != 30*time.Minute || cfg.Rollup.Schedule != "@every 5m" || cfg.Retention.RawDays != 45 {
		t.Fatalf("rollup/retention = %+v %+v", cfg.Rollup, cfg.Retention)
	}
	if cfg.ClickHouse.DSN != "clickhouse://ch:9000/metering" || cfg.Log.Level != "info" {
		t.Fatalf("cfg = %+v", cfg)
	}
	if cfg, err := Load(write(t, "")); err != nil || !reflect.DeepEqual(cfg, Default()) {
		t.Fatalf("empty file: %+v, %v", cfg, err)
	}
	if cfg, err := Load(""); err != nil || !reflect.DeepEqual(cfg, Default()) {
		t.Fatalf("no file: %+v, %v", cfg, err)
	}
}

func TestLoadRejects(t *testing.T) {
	cases := map[string]string{
		"unknown key": "clickhose:\n  dsn: x\n",
		"bad level":   "log:\n  level: loud\n",
		"empty dsn":   "clickhouse:\n  dsn: \"\"\n",
		"not yaml":    "clickhouse: [\n",
		"wrong type":  "clickhouse: 5\n",
		// Before the fix the second document was ignored silently.
		"two documents":     "log:\n  level: info\n---\nlog:\n  level: debug\n",
		"zero idle timeout": "server:\n  idle_timeout: 0s\n",
		"customer in a half-hour zone": "billing:\n  issuer: {id: gc, name: GC}\n  customers:\n" +
			"    - {tenant: acme, name: Acme, currency: INR, time_zone: Asia/Kolkata, book: b.yaml}\n",
		"unknown customer key": "billing:\n  issuer: {id: gc, name: GC}\n  customers:\n    - {tenant: acme, nmae: Acme}\n",
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Load(write(t, body)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file error = %v", err)
	}
}

// The README's example config must load: it is what operators copy.
func TestREADMEExampleLoads(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("testdata/readme-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), string(example)) {
		t.Fatal("testdata/readme-example.yaml no longer matches the README's config example; copy it over")
	}
	cfg, err := Load("testdata/readme-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Collector.Spool.MaxBytes != 1<<30 || cfg.Retention.RawDays != 90 {
		t.Fatalf("example loaded as %+v", cfg)
	}
}

// Book and contract paths in the billing section are relative to the
// config file, so the config works from any working directory.
func TestLoadResolvesBillingPathsAgainstTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpumeter.yaml")
	doc := `billing:
  issuer: {id: gc, name: GPU Cloud}
  customers:
    - {tenant: acme, name: Acme, currency: USD, book: books/std.yaml, contract: /etc/gpumeter/acme.yaml}
`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Billing.Customers[0]
	if c.Book != filepath.Join(dir, "books/std.yaml") || c.Contract != "/etc/gpumeter/acme.yaml" {
		t.Fatalf("book %q contract %q", c.Book, c.Contract)
	}
	if cfg.Billing.Schedule != billing.DefaultInvoiceSchedule {
		t.Fatalf("schedule %q, want the default", cfg.Billing.Schedule)
	}
}

// The quotas, webhooks and kubernetes sections load from YAML as the
// docs write them.
func TestLoadQuotasWebhooksKubernetes(t *testing.T) {
	path := write(t, `quotas:
  refresh: 30s
  stale_after: 2m
  on_stale: allow
  rules:
    - tenant: acme
      concurrent_gpus: {limit: 16, soft: 75%}
      gpu_hours: {limit: 5000, soft: 80%, hard: 100%}
    - department: research
      gpu_model: H100-SXM5-80GB
      gpu_hours: {limit: 20000}
    - tenant: globex
      spend: {limit: "25000", soft: "20000"}
webhooks:
  endpoints:
    - {name: erp, url: "https://erp.example.com/hook", secret: "a long random shared secret", events: [invoice.finalized]}
kubernetes:
  namespaces: {team-acme: acme}
  default_model: H100-SXM5-80GB
`)
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	q := cfg.Quotas
	if q.Refresh != 30*time.Second || q.OnStale != "allow" || len(q.Rules) != 3 || q.Rules[0].ConcurrentGPUs.Soft != "75%" ||
		!q.Rules[2].Spend.Limit.Equal(decimal.NewFromInt(25000)) || q.ReservationTTL != 10*time.Minute {
		t.Fatalf("quotas %+v", q)
	}
	lv, err := q.Rules[0].ConcurrentGPUs.Levels()
	if err != nil || !lv.Soft.Equal(decimal.NewFromInt(12)) || !lv.Hard.Equal(decimal.NewFromInt(16)) {
		t.Fatalf("levels %+v %v", lv, err)
	}
	if len(cfg.Webhooks.Endpoints) != 1 || cfg.Webhooks.MaxAttempts != 8 || cfg.Kubernetes.Namespaces["team-acme"] != "acme" ||
		cfg.Kubernetes.DefaultDuration != time.Hour {
		t.Fatalf("webhooks %+v kubernetes %+v", cfg.Webhooks, cfg.Kubernetes)
	}
	bad := write(t, "quotas:\n  rules:\n    - {tenant: acme, gpu_hours: {limit: 10, soft: eighty}}\nwebhooks:\n  endpoints:\n    - {name: x, url: ftp://x, secret: s}\n")
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "quotas.rules[0].gpu_hours") || !strings.Contains(err.Error(), "webhooks.endpoints[0].url") {
		t.Fatalf("bad sections: %v", err)
	}
}

// collector.libvirt_dir: off by default, an absolute path when set, its
// problems named by field path beside the rest of the section's.
func TestCollectorConfigLibvirtDir(t *testing.T) {
	if d := Default().Collector.LibvirtDir; d != "" {
		t.Fatalf("default %q, want empty (off)", d)
	}
	cases := []struct {
		name, body string
		want       string   // the loaded value
		errs       []string // empty: loads
	}{
		{"an absolute path", "collector:\n  libvirt_dir: /etc/libvirt/qemu\n", "/etc/libvirt/qemu", nil},
		{"empty is off", "collector:\n  libvirt_dir: \"\"\n", "", nil},
		{"a relative path", "collector:\n  libvirt_dir: etc/libvirt/qemu\n", "", []string{`collector.libvirt_dir: "etc/libvirt/qemu" is not an absolute path`}},
		{"not a string", "collector:\n  libvirt_dir: [a, b]\n", "", []string{"line 2: cannot unmarshal"}},
		{"a misspelt key", "collector:\n  libvirtdir: /etc/libvirt/qemu\n", "", []string{"libvirtdir"}},
		{"every problem of the section at once", "collector:\n  libvirt_dir: qemu\n  spool:\n    overflow: block\n", "",
			[]string{"collector.libvirt_dir", `collector.spool: overflow: "block"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(write(t, tc.body))
			if len(tc.errs) == 0 {
				if err != nil || cfg.Collector.LibvirtDir != tc.want {
					t.Fatalf("libvirt_dir %q, %v; want %q", cfg.Collector.LibvirtDir, err, tc.want)
				}
				return
			}
			for _, w := range tc.errs {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err %v lacks %q", err, w)
				}
			}
		})
	}
}
