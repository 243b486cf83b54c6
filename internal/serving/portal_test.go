package serving_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/server"
)

var (
	chromiumOnce sync.Once
	chromiumPath string
	chromiumErr  error
)

// chromium finds Debian's chromium, installing it with apt-get when it is
// missing (as scripts/clickhouse.sh installs clickhouse-server); a machine
// where neither works fails the test.
func chromium(t *testing.T) string {
	t.Helper()
	chromiumOnce.Do(func() {
		for _, name := range []string{"chromium", "chromium-browser"} {
			if chromiumPath, chromiumErr = exec.LookPath(name); chromiumErr == nil {
				return
			}
		}
		env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		for _, args := range [][]string{{"apt-get", "update", "-qq"}, {"apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"}} {
			if os.Geteuid() != 0 {
				args = append([]string{"sudo", "-n"}, args...)
			}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				chromiumErr = err
				t.Logf("%v: %s", args, out)
				return
			}
		}
		chromiumPath, chromiumErr = exec.LookPath("chromium")
	})
	if chromiumErr != nil {
		t.Fatalf("chromium not found and could not be installed (apt-get install chromium): %v", chromiumErr)
	}
	return chromiumPath
}

// headless runs chromium on url with the flags it needs as root in a
// container, plus extra; it returns standard output.
func headless(t *testing.T, url string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=20000"}, extra...)
	cmd := exec.CommandContext(ctx, chromium(t), append(args, url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
	}
	return string(out)
}

// The portal in a real browser: signed in with a portal token, it draws
// the month's chart and shows the month-to-date cost the API gives.
func TestPortalInHeadlessChromium(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	_, body, _ := f.get(t, f.tokens["portal"], "/v1/cost?month=2026-10")
	var cost struct {
		SoFar string `json:"so_far"`
	}
	if err := json.Unmarshal(body, &cost); err != nil || cost.SoFar == "" {
		t.Fatalf("cost: %v %s", err, body)
	}
	url := f.srv.URL + "/portal/#token=" + f.tokens["portal"] + "&month=2026-10"
	dom := headless(t, url, "--dump-dom")
	if !strings.Contains(dom, `data-ready="1"`) {
		t.Fatalf("the portal never finished loading:\n%.3000s", dom)
	}
	m := regexp.MustCompile(`id="mtd-cost"[^>]*data-amount="([^"]+)"`).FindStringSubmatch(dom)
	if m == nil {
		m = regexp.MustCompile(`data-amount="([^"]+)"[^>]*id="mtd-cost"`).FindStringSubmatch(dom)
	}
	if m == nil || m[1] != cost.SoFar {
		t.Errorf("the portal shows month to date %v, the API %s", m, cost.SoFar)
	}
	// 2-4 October, two SKUs: six bars.
	if bars := strings.Count(dom, "data-sku="); bars != 6 {
		t.Errorf("%d bars in the chart, want 6 (3 days x 2 SKUs)", bars)
	}
	// The efficiency section shows the API's held-but-idle time (the
	// fixture's hourly samples have no SM activity: all of it), and the
	// held-vs-used chart a pair of bars per day.
	_, body, _ = f.get(t, f.tokens["portal"], "/v1/insights/efficiency?from=2026-10-01&to=2026-11-01")
	var eff struct {
		Tenants []struct {
			Tenant string `json:"tenant"`
			Idle   int64  `json:"idle_gpu_microseconds"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal(body, &eff); err != nil || len(eff.Tenants) != 1 || eff.Tenants[0].Tenant != "acme" || eff.Tenants[0].Idle == 0 {
		t.Fatalf("efficiency: %v %s", err, body)
	}
	if want := fmt.Sprintf(`data-idle-gpu-microseconds="%d"`, eff.Tenants[0].Idle); !strings.Contains(dom, want) {
		t.Errorf("the portal does not show the API's idle time (%s)", want)
	}
	if pairs := strings.Count(dom, "data-held-day="); pairs != 6 {
		t.Errorf("%d held/used bars, want 6 (3 days x 2)", pairs)
	}
	if !strings.Contains(dom, "none this month") || strings.Contains(dom, "Insights unavailable") {
		t.Errorf("the anomalies table should say none, with no error note")
	}
	if !strings.Contains(dom, f.invs["acme"].Number) || strings.Contains(dom, f.invs["globex"].Number) {
		t.Errorf("the invoice table should list acme's invoice only")
	}
	shot := filepath.Join(t.TempDir(), "portal.png")
	headless(t, url, "--screenshot="+shot, "--window-size=1280,1100", "--hide-scrollbars")
	if st, err := os.Stat(shot); err != nil || st.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	if dir := os.Getenv("GPUMETER_SCREENSHOT_DIR"); dir != "" {
		data, _ := os.ReadFile(shot)
		_ = os.WriteFile(filepath.Join(dir, "portal.png"), data, 0o644)
	}
	t.Logf("screenshot: %s", shot)

	// Without a token the portal says how to sign in, and never loads data.
	dom = headless(t, f.srv.URL+"/portal/", "--dump-dom")
	if !strings.Contains(dom, "No token") || !strings.Contains(dom, `data-ready="error"`) {
		t.Errorf("the portal without a token:\n%.2000s", dom)
	}
}
