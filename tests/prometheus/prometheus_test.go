package prometheus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/tests/harness"
)

// promBinary finds a Prometheus binary; make test installs Debian's
// prometheus package (scripts/prometheus.sh) when it is missing.
func promBinary(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: run scripts/prometheus.sh install (make test does): %v", name, err)
	}
	return p
}

// The example rules and scrape config are valid and their alerts behave
// as their unit tests say.
func TestPrometheusRulesAndConfig(t *testing.T) {
	promtool := promBinary(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", harness.RepoFile(t, "deploy/prometheus/gpumeter-rules.yml")},
		{"check", "config", "--syntax-only", harness.RepoFile(t, "deploy/prometheus/prometheus.yml")},
		{"test", "rules", harness.RepoFile(t, "deploy/prometheus/gpumeter-rules_test.yml")},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// collectStart is the simulated collector's start.
var collectStart = time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)

// Debian's Prometheus scrapes a simulated collector and the server on
// loopback: both targets are up, their key series arrive, the alert
// rules load, and promtool finds nothing to lint in either /metrics.
func TestPrometheusScrapesCollectorAndServer(t *testing.T) {
	prometheus, promtool := promBinary(t, "prometheus"), promBinary(t, "promtool")
	dsn := harness.TestDSN(t)
	collectAddr, serveAddr, metricsAddr, promAddr := harness.FreeAddr(t), harness.FreeAddr(t), harness.FreeAddr(t), harness.FreeAddr(t)
	collect := harness.Start(t, "collect", "--simulate", "--hosts", "1", "--gpus", "2", "--interval", "5s", "--speed", "1",
		"--start", collectStart.Format(time.RFC3339), "--sink", "discard", "--listen", collectAddr)
	serve := harness.Start(t, "--clickhouse", dsn, "serve", "--plain-http", "--metrics-listen", metricsAddr, "--audit-queue", t.TempDir(), "--listen", serveAddr)
	harness.Eventually(t, "the collector's first poll", 60*time.Second, func() bool { code, _ := harness.HTTPGet(collectAddr, "/readyz"); return code == 200 })
	harness.Eventually(t, "serve to listen", 60*time.Second, func() bool { code, _ := harness.HTTPGet(serveAddr, "/healthz"); return code == 200 })

	for name, addr := range map[string]string{"collector": collectAddr, "server": metricsAddr} {
		_, body := harness.HTTPGet(addr, "/metrics")
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics on the %s's /metrics: %v\n%s", name, err, out)
		}
	}

	dir := t.TempDir()
	rules, err := os.ReadFile(harness.RepoFile(t, "deploy/prometheus/gpumeter-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gpumeter-rules.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [gpumeter-rules.yml]
scrape_configs:
  - job_name: gpumeter-collector
    static_configs: [{targets: [%q]}]
  - job_name: gpumeter-server
    static_configs: [{targets: [%q]}]
`, collectAddr, metricsAddr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var promLog bytes.Buffer
	cmd := exec.Command(prometheus, "--config.file", filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path", filepath.Join(dir, "data"),
		"--web.listen-address", promAddr)
	cmd.Stdout, cmd.Stderr = &promLog, &promLog
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", promLog.String())
		}
	}()
	harness.Eventually(t, "prometheus to be ready", 60*time.Second, func() bool { code, _ := harness.HTTPGet(promAddr, "/-/ready"); return code == 200 })

	type target struct {
		Labels    map[string]string `json:"labels"`
		Health    string            `json:"health"`
		LastError string            `json:"lastError"`
	}
	var targets struct {
		Data struct {
			ActiveTargets []target `json:"activeTargets"`
		} `json:"data"`
	}
	harness.Eventually(t, "both targets up", 60*time.Second, func() bool {
		if !promGet(promAddr, "/api/v1/targets", &targets) {
			return false
		}
		up := 0
		for _, tg := range targets.Data.ActiveTargets {
			if tg.Health == "up" {
				up++
			}
		}
		return up == 2
	})
	for _, q := range []string{
		`up{job="gpumeter-collector"} == 1`,
		`up{job="gpumeter-server"} == 1`,
		`gpumeter_collector_polls_total{job="gpumeter-collector",result="ok"} > 0`,
		`gpumeter_collector_samples_total{job="gpumeter-collector"}`,
		`gpumeter_http_requests_total{job="gpumeter-server",route="/metrics"}`,
		`gpumeter_http_request_duration_seconds_bucket{job="gpumeter-server"}`,
	} {
		var res struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		harness.Eventually(t, "series "+q, 30*time.Second, func() bool {
			return promGet(promAddr, "/api/v1/query?query="+url.QueryEscape(q), &res) && len(res.Data.Result) > 0
		})
	}
	var rulesRes struct {
		Data struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name   string `json:"name"`
					Health string `json:"health"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	harness.Eventually(t, "the alert rules evaluated", 30*time.Second, func() bool {
		if !promGet(promAddr, "/api/v1/rules", &rulesRes) || len(rulesRes.Data.Groups) != 3 {
			return false
		}
		for _, g := range rulesRes.Data.Groups {
			for _, r := range g.Rules {
				if r.Health != "ok" {
					return false
				}
			}
		}
		return true
	})
	// SIGTERM ends a command as Ctrl-C does (main cancels its context).
	for name, p := range map[string]*harness.Process{"collect": collect, "serve": serve} {
		if code := p.Stop(t, 30*time.Second); code != 0 {
			t.Errorf("%s exit %d:\n%s%s", name, code, collect.Stderr.String(), serve.Stderr.String())
		}
	}
}

// promGet reads a Prometheus API answer into v; false when it is not
// there yet.
func promGet(addr, path string, v any) bool {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	return json.NewDecoder(resp.Body).Decode(v) == nil
}
