// Package browsertest runs pages in a real browser for tests, as
// net/http/httptest runs servers: only tests import it.
//
// It needs Debian's chromium. When it is not on the PATH, Chromium installs
// it with apt-get (through sudo -n when not root), as scripts/clickhouse.sh
// installs clickhouse-server; a machine where neither works fails the test,
// never skips it.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	chromiumOnce sync.Once
	chromiumPath string
	chromiumErr  error
)

// Chromium returns the path of Debian's chromium, installing it with
// apt-get the first time a test of the process needs it and it is missing.
func Chromium(tb testing.TB) string {
	tb.Helper()
	chromiumOnce.Do(func() {
		for _, name := range []string{"chromium", "chromium-browser"} {
			if chromiumPath, chromiumErr = exec.LookPath(name); chromiumErr == nil {
				return
			}
		}
		env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		// Another test process may be installing at the same time: wait
		// for dpkg's lock rather than fail on it.
		for _, args := range [][]string{{"apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-qq"},
			{"apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-qq", "--no-install-recommends", "chromium"}} {
			if os.Geteuid() != 0 {
				args = append([]string{"sudo", "-n"}, args...)
			}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				chromiumErr = err
				tb.Logf("%v: %s", args, out)
				return
			}
		}
		chromiumPath, chromiumErr = exec.LookPath("chromium")
	})
	if chromiumErr != nil {
		tb.Fatalf("chromium not found and could not be installed (apt-get install chromium): %v", chromiumErr)
	}
	return chromiumPath
}

// Headless runs chromium on url with the flags it needs as root in a
// container, plus extra (e.g. --dump-dom, --screenshot=FILE), and returns
// its standard output. A virtual-time budget lets the page's scripts and
// fetches finish before chromium dumps or shoots it.
func Headless(tb testing.TB, url string, extra ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + tb.TempDir(), "--virtual-time-budget=20000"}, extra...)
	cmd := exec.CommandContext(ctx, Chromium(tb), append(args, url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
	}
	return string(out)
}
