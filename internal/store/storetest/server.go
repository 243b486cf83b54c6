package storetest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Server is a ClickHouse instance of a test's own, started with
// scripts/clickhouse.sh on its own port and data directory, so that a test
// can stop and restart it (fault injection) without disturbing the shared
// server other tests use.
type Server struct {
	t       testing.TB
	script  string
	env     []string
	TCPPort int
}

// StartServer starts a private server on free loopback ports; it is
// stopped when the test ends.
func StartServer(t testing.TB) *Server {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	s := &Server{t: t, script: filepath.Join(root, "scripts", "clickhouse.sh"), TCPPort: ports[0],
		env: append(os.Environ(),
			fmt.Sprintf("CH_TCP_PORT=%d", ports[0]),
			fmt.Sprintf("CH_HTTP_PORT=%d", ports[1]),
			fmt.Sprintf("CH_INTERSERVER_PORT=%d", ports[2]),
			"CH_DATA_ROOT="+t.TempDir())}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// freePorts asks the kernel for n distinct free loopback ports. They are
// released before the server binds them; clickhouse.sh refuses ports that
// something else answers on, so a lost race fails loudly, never silently.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for len(ports) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// DSN of the server's default database.
func (s *Server) DSN() string { return fmt.Sprintf("clickhouse://127.0.0.1:%d/default", s.TCPPort) }

// Start starts (or restarts) the server and waits until it answers.
func (s *Server) Start() {
	s.t.Helper()
	s.run("start")
}

// Kill ends the server with SIGKILL and waits until its process is gone.
func (s *Server) Kill() {
	s.t.Helper()
	s.run("kill")
}

// Stop stops the server and waits until its process is gone.
func (s *Server) Stop() {
	s.t.Helper()
	s.run("stop")
}

func (s *Server) run(verb string) {
	s.t.Helper()
	cmd := exec.Command(s.script, verb)
	cmd.Env = s.env
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("storetest: clickhouse.sh %s (port %d): %v\n%s", verb, s.TCPPort, err, out)
	}
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
