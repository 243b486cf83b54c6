package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// replica is one `gpumeter serve` of a replicated deployment, in process.
type replica struct {
	addr, metrics string
	stop          func()
}

// startReplica runs serve with an election on the ZooKeeper at zkPort,
// its identity its own listen address, and the rollup every second.
func startReplica(t *testing.T, dsn string, zkPort int, extraConfig string) *replica {
	t.Helper()
	r := &replica{addr: harness.FreeAddr(t), metrics: harness.FreeAddr(t)}
	cfgPath := filepath.Join(t.TempDir(), "gpumeter.yaml")
	cfg := fmt.Sprintf("election:\n  backend: zookeeper\n  identity: %s\n  zookeeper:\n    servers: [127.0.0.1:%d]\n    session_timeout: 2s\n"+
		"rollup:\n  schedule: \"@every 1s\"\n%s", r.addr, zkPort, extraConfig)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--config", cfgPath, "--clickhouse", dsn, "serve", "--plain-http", "--listen", r.addr,
			"--metrics-listen", r.metrics, "--audit-queue", t.TempDir()}, io.Discard, io.Discard)
	}()
	var once sync.Once
	r.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(r.stop)
	eventually(t, "serve to be ready", 30*time.Second, func() bool { code, _ := harness.HTTPGet(r.addr, "/readyz"); return code == 200 })
	return r
}

var rollupRuns = regexp.MustCompile(`(?m)^gpumeter_job_runs_total\{task="rollup"\} (\d+)$`)

// rollups is how many rollup runs the replica has counted.
func (r *replica) rollups(t *testing.T) int {
	t.Helper()
	code, body := harness.HTTPGet(r.metrics, "/metrics")
	m := rollupRuns.FindStringSubmatch(body)
	if code != 200 || m == nil {
		t.Fatalf("/metrics of %s: %d, no rollup run count", r.addr, code)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// With an election configured only the leader runs the scheduled jobs;
// when it stops, the other replica takes them over.
func TestServeRunsJobsOnlyOnTheLeader(t *testing.T) {
	dsn := testDSN(t)
	zk := storetest.StartZooKeeper(t)
	a := startReplica(t, dsn, zk, "")
	eventually(t, "the first replica to lead and run the rollup", 10*time.Second, func() bool { return a.rollups(t) >= 1 })
	b := startReplica(t, dsn, zk, "")

	a0, b0 := a.rollups(t), b.rollups(t)
	time.Sleep(3 * time.Second) // three runs of the schedule
	a1, b1 := a.rollups(t), b.rollups(t)
	if a1-a0 < 2 || b1 != b0 || b1 != 0 {
		t.Fatalf("over 3 s at @every 1s: leader ran %d rollups, follower %d (in all %d); want at least 2 and none", a1-a0, b1-b0, b1)
	}

	stopped := time.Now()
	a.stop() // resigns: the follower leads within milliseconds, its first run at the next second
	eventually(t, "the follower to take the rollup over", 5*time.Second, func() bool { return b.rollups(t) > b1 })
	t.Logf("the follower's first rollup %v after the leader stopped", time.Since(stopped).Round(time.Millisecond))
	b2 := b.rollups(t)
	time.Sleep(2 * time.Second)
	if b.rollups(t)-b2 < 1 {
		t.Errorf("the new leader stopped running the rollup")
	}
}
