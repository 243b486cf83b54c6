// Package harness runs the gpumeter binary for the slow tests under
// tests/ (tests/README.md): it builds the binary once per test binary,
// runs commands and long-lived processes (stopped by signals, as an
// operator would), starts serve, and checks what ClickHouse holds against
// the simulated fleet's own ledger. cmd/gpumeter's tests share the
// ClickHouse checks.
package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// RepoRoot is the module's root: the nearest directory above the working
// directory holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	return storetest.RepoRoot(t)
}

// RepoFile is the absolute path of rel in the repository.
func RepoFile(t testing.TB, rel string) string {
	t.Helper()
	return filepath.Join(RepoRoot(t), rel)
}

// Main runs a test package's tests (its TestMain calls it) and removes
// the binary Binary built for them.
func Main(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// Binary builds ./cmd/gpumeter from this working tree, once per test
// binary, and returns its path; the tests of a package share it, and Main
// removes it.
func Binary(t testing.TB) string {
	t.Helper()
	root := RepoRoot(t)
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpumeter-tests-")
		if err != nil {
			buildErr = err
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		binPath = filepath.Join(dir, "gpumeter")
		cmd := exec.Command(goTool, "build", "-o", binPath, "./cmd/gpumeter")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/gpumeter: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Run runs gpumeter with args to its end and returns its exit status,
// stdout and stderr.
func Run(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(Binary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	return exitCode(t, cmd.Run()), out.String(), errb.String()
}

func exitCode(t testing.TB, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode()
	case errors.As(err, &ee):
		return -1 // killed by a signal
	}
	t.Fatalf("run gpumeter: %v", err)
	return -1
}

// Buffer is an io.Writer safe to read while a process writes to it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }

// String is what was written so far.
func (b *Buffer) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

// Process is a gpumeter process started by Start.
type Process struct {
	cmd    *exec.Cmd
	Stdout Buffer
	Stderr Buffer
	done   chan struct{}
	err    error
}

// Start starts gpumeter with args. The test's cleanup kills it when it
// is still running.
func Start(t testing.TB, args ...string) *Process {
	t.Helper()
	p := &Process{cmd: exec.Command(Binary(t), args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.Stdout, &p.Stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start gpumeter %v: %v", args, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits up to timeout for the process to exit and returns its exit
// status (-1 when a signal killed it); the deadline fails the test.
func (p *Process) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return exitCode(t, p.err)
	default:
	}
	select {
	case <-p.done:
		return exitCode(t, p.err)
	case <-time.After(timeout):
		t.Fatalf("gpumeter %v did not exit within %s\n%s", p.cmd.Args[1:], timeout, p.Stderr.String())
		return -1
	}
}

// Stop sends SIGTERM, which ends a command as its context's cancellation
// does (main's signal.NotifyContext), and returns the exit status.
func (p *Process) Stop(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	default:
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Fatal(err)
		}
	}
	return p.Wait(t, timeout)
}

// Kill sends SIGKILL and waits for the process to die; exited reports
// whether it had already ended on its own.
func (p *Process) Kill(t testing.TB) (exited bool) {
	t.Helper()
	select {
	case <-p.done:
		return p.err == nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	<-p.done
	return p.err == nil
}

// Eventually polls cond until it holds; the deadline is a test failure.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// TestDSN gives a fresh, migrated database for this test on the test
// ClickHouse (storetest: it fails, never skips, when there is none).
func TestDSN(t testing.TB) string {
	t.Helper()
	cfg := storetest.Config(t)
	storetest.NewWithConfig(t, cfg)
	return fmt.Sprintf("clickhouse://%s/%s", cfg.Addrs[0], cfg.Database)
}

// PrivateDB starts a ClickHouse of the test's own (so it can be stopped)
// and returns it with the DSN of a migrated database on it.
func PrivateDB(t testing.TB) (*storetest.Server, string) {
	t.Helper()
	srv := storetest.StartServer(t)
	cfg, err := store.ParseDSN(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = "gpumeter"
	storetest.NewWithConfig(t, cfg)
	return srv, fmt.Sprintf("clickhouse://%s/%s", cfg.Addrs[0], cfg.Database)
}

// OpenStore opens a store on dsn for a test's checks; it is closed when
// the test ends.
func OpenStore(t testing.TB, dsn string) *store.Store {
	t.Helper()
	cfg, err := store.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// StoredSamples counts deduplicated samples (0 while the server is down).
func StoredSamples(dsn string) uint64 {
	cfg, err := store.ParseDSN(dsn)
	if err != nil {
		return 0
	}
	cfg.DialTimeout = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := store.Open(ctx, cfg, nil)
	if err != nil {
		return 0
	}
	defer s.Close()
	rows, err := s.Usage(ctx, usage.Query{From: time.Unix(0, 0), To: time.Now().AddDate(10, 0, 0)})
	if err != nil || len(rows) == 0 {
		return 0
	}
	return rows[0].Samples
}

// FreeAddr is a loopback address with a port free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// HTTPGet returns the status and body of GET path, or 0 and the error.
func HTTPGet(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// GetAuthed returns the status and body of GET path with token as the
// bearer.
func GetAuthed(t testing.TB, addr, token, path string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(token))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// StartServe runs `gpumeter <global...> serve` on a free loopback port,
// with /metrics off and an audit queue of its own, and returns its address
// once /readyz answers. stop ends it (SIGTERM) and waits, so the audit
// writer flushes; the test's cleanup calls it too.
func StartServe(t testing.TB, global ...string) (addr string, stop func()) {
	t.Helper()
	addr = FreeAddr(t)
	p := Start(t, append(global, "serve", "--plain-http", "--listen", addr, "--metrics-listen", "", "--audit-queue", t.TempDir())...)
	var once sync.Once
	stop = func() { once.Do(func() { p.Stop(t, time.Minute) }) }
	t.Cleanup(stop)
	Eventually(t, "serve to be ready", 30*time.Second, func() bool {
		select {
		case <-p.Done():
			t.Fatalf("serve exited:\n%s", p.Stderr.String())
		default:
		}
		code, _ := HTTPGet(addr, "/readyz")
		return code == 200
	})
	return addr, stop
}

var (
	artifactMu   sync.Mutex
	artifactDirs = map[string]bool{}
)

// ArtifactDir is an empty folder for what a person may want to look at
// after a test (screenshots, rendered pages), kept when the test ends:
// $GPUMETER_TEST_ARTIFACTS/<test name>, else .data/test-artifacts/<test
// name> in the repository.
func ArtifactDir(t testing.TB) string {
	t.Helper()
	root := os.Getenv("GPUMETER_TEST_ARTIFACTS")
	if root == "" {
		root = filepath.Join(RepoRoot(t), ".data", "test-artifacts")
	}
	dir := filepath.Join(root, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	artifactMu.Lock()
	defer artifactMu.Unlock()
	// Emptied once per process: a test may ask for its folder twice.
	if !artifactDirs[dir] {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		artifactDirs[dir] = true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("artefacts in %s", dir)
	return dir
}
