package storetest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	ports, err := freePorts(3)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	s := newServer(t, ports, "")
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// ClusterName is the remote_servers cluster StartCluster defines.
const ClusterName = "gpumeter_test"

// StartCluster starts one private server per shard, each on its own free
// loopback ports and data directory, all with the same remote_servers
// definition (ClusterName: one replica per shard), as a two-shard
// production cluster would have. They are stopped when the test ends.
func StartCluster(t testing.TB, shards int) []*Server {
	t.Helper()
	return startCluster(t, shards, 1, 0)
}

// StartReplicatedCluster starts the replicas of one shard, each a private
// server as in StartCluster, with ZooKeeper at zkPort (StartZooKeeper) and
// the {shard} and {replica} macros Replicated tables need. The cluster
// sets internal_replication, so a Distributed insert writes one replica
// and replication copies it to the others.
func StartReplicatedCluster(t testing.TB, zkPort, replicas int) []*Server {
	t.Helper()
	return startCluster(t, 1, replicas, zkPort)
}

func startCluster(t testing.TB, shards, replicas, zkPort int) []*Server {
	t.Helper()
	if shards < 1 || replicas < 1 || (replicas > 1 && zkPort == 0) {
		t.Fatalf("storetest: a cluster of %d shards × %d replicas (ZooKeeper port %d)", shards, replicas, zkPort)
	}
	ports, err := freePorts(3 * shards * replicas)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	var common strings.Builder
	fmt.Fprintf(&common, "<remote_servers><%s>", ClusterName)
	for sh := 0; sh < shards; sh++ {
		common.WriteString("<shard>")
		if zkPort != 0 {
			common.WriteString("<internal_replication>true</internal_replication>")
		}
		for r := 0; r < replicas; r++ {
			fmt.Fprintf(&common, "<replica><host>127.0.0.1</host><port>%d</port></replica>", ports[3*(sh*replicas+r)])
		}
		common.WriteString("</shard>")
	}
	fmt.Fprintf(&common, "</%s></remote_servers>", ClusterName)
	if zkPort != 0 {
		fmt.Fprintf(&common, "<zookeeper><node><host>127.0.0.1</host><port>%d</port></node>"+
			"<session_timeout_ms>10000</session_timeout_ms></zookeeper>", zkPort)
	}
	var servers []*Server
	for sh := 0; sh < shards; sh++ {
		for r := 0; r < replicas; r++ {
			i := sh*replicas + r
			extra := common.String()
			if zkPort != 0 {
				extra += fmt.Sprintf("<macros><shard>%d</shard><replica>r%d</replica></macros>", sh+1, r+1)
			}
			srv := newServer(t, ports[3*i:3*i+3], extra)
			srv.Start()
			t.Cleanup(srv.Stop)
			servers = append(servers, srv)
		}
	}
	return servers
}

// StartZooKeeper starts a private standalone ZooKeeper on a free loopback
// port (scripts/zookeeper.sh, installing Debian's package when missing)
// and returns the port; it is stopped when the test ends. A ZooKeeper that
// cannot start fails the test.
func StartZooKeeper(t testing.TB) int {
	t.Helper()
	root := RepoRoot(t)
	ports, err := freePorts(1)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	script := filepath.Join(root, "scripts", "zookeeper.sh")
	env := append(os.Environ(), fmt.Sprintf("ZK_PORT=%d", ports[0]), "ZK_DATA_ROOT="+t.TempDir())
	zk := func(verb string) {
		t.Helper()
		cmd := exec.Command(script, verb)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("storetest: zookeeper.sh %s (port %d): %v\n%s", verb, ports[0], err, out)
		}
	}
	zk("start")
	t.Cleanup(func() { zk("stop") })
	return ports[0]
}

func newServer(t testing.TB, ports []int, extraConfig string) *Server {
	t.Helper()
	root := RepoRoot(t)
	env := append(os.Environ(),
		fmt.Sprintf("CH_TCP_PORT=%d", ports[0]),
		fmt.Sprintf("CH_HTTP_PORT=%d", ports[1]),
		fmt.Sprintf("CH_INTERSERVER_PORT=%d", ports[2]),
		"CH_DATA_ROOT="+t.TempDir(),
		"CH_EXTRA_CONFIG="+extraConfig)
	return &Server{t: t, script: filepath.Join(root, "scripts", "clickhouse.sh"), TCPPort: ports[0], env: env}
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

// RepoRoot is the module's root: the nearest directory above the working
// directory holding go.mod (where scripts/ is).
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatalf("storetest: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("storetest: no go.mod above the working directory")
		}
		dir = parent
	}
}
