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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/debiantest"
)

// Chromium returns the path of Debian's chromium, installing it the first
// time a test of the process needs it and it is missing.
func Chromium(tb testing.TB) string {
	tb.Helper()
	return debiantest.Tool(tb, "chromium", "chromium", "chromium-browser")
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

// Overflow opens the HTML file at path in a window width pixels wide and
// returns by how many pixels the page is wider than the window: 0 when
// nothing scrolls sideways. It measures a copy of the file with a script
// added (document.documentElement.scrollWidth - innerWidth), so the page
// itself needs no script.
func Overflow(tb testing.TB, path string, width int) int {
	tb.Helper()
	page, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	const measure = `<script>addEventListener("load", () => { document.title = "overflow:" + (document.documentElement.scrollWidth - innerWidth); });</script>`
	i := strings.LastIndex(string(page), "</body>")
	if i < 0 {
		tb.Fatalf("%s: no </body>", path)
	}
	copyPath := filepath.Join(tb.TempDir(), filepath.Base(path))
	if err := os.WriteFile(copyPath, []byte(string(page[:i])+measure+string(page[i:])), 0o600); err != nil {
		tb.Fatal(err)
	}
	dom := Headless(tb, "file://"+copyPath, "--dump-dom", "--hide-scrollbars", fmt.Sprintf("--window-size=%d,1000", width))
	m := regexp.MustCompile(`<title>overflow:(-?\d+)</title>`).FindStringSubmatch(dom)
	if m == nil {
		tb.Fatalf("%s at %d px: no measurement in the page", path, width)
	}
	n, _ := strconv.Atoi(m[1])
	return max(n, 0)
}
