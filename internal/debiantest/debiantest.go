// Package debiantest finds Debian's command-line tools for tests
// (chromium, pdftotext, pdftoppm), installing the package with apt-get
// (through sudo -n when not root) the first time a test of the process
// needs it, as scripts/clickhouse.sh installs clickhouse-server. A machine
// where neither works fails the test, never skips it.
package debiantest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

var (
	mu sync.Mutex
	// tried is the outcome of apt-get install, by package: tried once per
	// test binary.
	tried = map[string]error{}
)

// Tool returns the path of the first of names on the PATH, installing
// Debian's package pkg when none is there.
func Tool(tb testing.TB, pkg string, names ...string) string {
	tb.Helper()
	return ensure(tb, pkg, strings.Join(names, " or "), func() (string, error) { return lookPath(names) })
}

// File returns path, a file of Debian's package pkg (a font, say),
// installing the package when the file is not there.
func File(tb testing.TB, pkg, path string) string {
	tb.Helper()
	return ensure(tb, pkg, path, func() (string, error) { _, err := os.Stat(path); return path, err })
}

func ensure(tb testing.TB, pkg, what string, find func() (string, error)) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	path, err := find()
	if err != nil {
		installErr, done := tried[pkg]
		if !done {
			installErr = install(pkg)
			tried[pkg] = installErr
		}
		if err = installErr; err == nil {
			path, err = find()
		}
	}
	if err != nil {
		tb.Fatalf("%s is missing and could not be installed (apt-get install %s): %v", what, pkg, err)
	}
	return path
}

func lookPath(names []string) (string, error) {
	var err error
	for _, name := range names {
		var path string
		if path, err = exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", err
}

// install runs apt-get update and install pkg.
func install(pkg string) error {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("no apt-get to install %s: %w", pkg, err)
	}
	var sudo []string
	if os.Geteuid() != 0 {
		sudo = []string{"sudo", "-n"}
	}
	for _, args := range [][]string{
		// Another test process may be installing at the same time: wait
		// for dpkg's lock rather than fail on it.
		{"apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-qq"},
		{"apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-qq", "--no-install-recommends", pkg},
	} {
		args = append(append([]string(nil), sudo...), args...)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}
