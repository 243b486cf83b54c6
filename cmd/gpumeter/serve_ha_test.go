package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
	r, args := replicaArgs(t, dsn, zkPort, extraConfig)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, io.Discard, io.Discard) }()
	var once sync.Once
	r.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(r.stop)
	eventually(t, "serve to be ready", 30*time.Second, func() bool { code, _ := harness.HTTPGet(r.addr, "/readyz"); return code == 200 })
	return r
}

// startReplicaProcess is startReplica in a child process (this test
// binary run as gpumeter), so that it can be SIGKILLed: stop kills it.
func startReplicaProcess(t *testing.T, dsn string, zkPort int, extraConfig string) *replica {
	t.Helper()
	r, args := replicaArgs(t, dsn, zkPort, extraConfig)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GPUMETER_TEST_AS_MAIN=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	r.stop = func() { once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	t.Cleanup(r.stop)
	eventually(t, "serve to be ready", 30*time.Second, func() bool { code, _ := harness.HTTPGet(r.addr, "/readyz"); return code == 200 })
	return r
}

// replicaArgs is the command line of a replica; with zkPort 0 it has no
// election: a single replica, as before issue 35.
func replicaArgs(t testing.TB, dsn string, zkPort int, extraConfig string) (*replica, []string) {
	t.Helper()
	r := &replica{addr: harness.FreeAddr(t), metrics: harness.FreeAddr(t)}
	cfgPath := filepath.Join(t.TempDir(), "gpumeter.yaml")
	cfg := "rollup:\n  schedule: \"@every 1s\"\n" + extraConfig
	if zkPort != 0 {
		cfg = fmt.Sprintf("election:\n  backend: zookeeper\n  identity: %s\n  zookeeper:\n    servers: [127.0.0.1:%d]\n    session_timeout: 2s\n",
			r.addr, zkPort) + cfg
	}
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return r, []string{"--config", cfgPath, "--clickhouse", dsn, "serve", "--plain-http", "--listen", r.addr,
		"--metrics-listen", r.metrics, "--audit-queue", t.TempDir()}
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

// admit posts one admission of count H100s for uni-astro to the replica
// and returns the status, whether it was allowed and who decided it.
// admitSplit sends n admissions of one GPU at once, alternately to the
// leader and the follower, and counts those allowed and the follower's
// that the leader decided; any status but 200 fails the test.
func admitSplit(t *testing.T, leader, follower, token string, n int) (allowed, byLeader int) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range n {
		to := leader
		if i%2 == 1 {
			to = follower
		}
		wg.Go(func() {
			status, ok, decidedBy := admit(t, to, token, 1)
			mu.Lock()
			defer mu.Unlock()
			if status != http.StatusOK {
				t.Errorf("admission to %s: %d", to, status)
			}
			if ok {
				allowed++
			}
			if to == follower && decidedBy == leader {
				byLeader++
			}
		})
	}
	wg.Wait()
	return allowed, byLeader
}

func admit(t *testing.T, addr, token string, count int) (status int, allowed bool, decidedBy string) {
	t.Helper()
	body := fmt.Sprintf(`{"tenant":"uni-astro","gpu_model":"H100-SXM5-80GB","count":%d,"expected_duration":"1h"}`, count)
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/admission", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST /v1/admission to %s: %v", addr, err)
		return 0, false, ""
	}
	defer resp.Body.Close()
	var d struct {
		Allowed bool `json:"allowed"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &d); err != nil {
			t.Errorf("admission answer %s: %v", b, err)
		}
	}
	return resp.StatusCode, d.Allowed, resp.Header.Get("Gpumeter-Decided-By")
}

// quotasOf reads GET /v1/quotas on addr: the status, the admitted GPUs of
// uni-astro's rule and Gpumeter-Answered-By.
func quotasOf(t *testing.T, addr, token string) (status int, admitted, answeredBy string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/quotas", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("GET /v1/quotas on %s: %v", addr, err)
		return 0, "", ""
	}
	defer resp.Body.Close()
	var q struct {
		Quotas []struct {
			Tenant, Admitted string
		} `json:"quotas"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &q); err != nil {
			t.Errorf("quotas answer %s: %v", b, err)
		}
	}
	for _, r := range q.Quotas {
		if r.Tenant == "uni-astro" {
			admitted = r.Admitted
		}
	}
	return resp.StatusCode, admitted, resp.Header.Get("Gpumeter-Answered-By")
}

// A follower forwards admissions to the leader, so a concurrency quota
// holds exactly across replicas, and its GET /v1/quotas reports the
// admitted work the leader holds; with nobody leading it answers
// admissions 503.
func TestServeForwardsAdmissionsToTheLeader(t *testing.T) {
	dsn, zk, token, quotas := haSetup(t, 6)
	a := startReplica(t, dsn, zk, quotas)
	eventually(t, "the first replica to lead", 10*time.Second, func() bool { return a.rollups(t) >= 1 })
	b := startReplica(t, dsn, zk, quotas)

	// 12 clients at once, half on each replica, one GPU each: exactly 6 fit.
	if allowed, byLeader := admitSplit(t, a.addr, b.addr, token, 12); allowed != 6 || byLeader != 6 {
		t.Fatalf("12 concurrent admissions of 1 GPU under a limit of 6, half sent to the follower: %d allowed (want 6), %d of the follower's decided by the leader (want 6)", allowed, byLeader)
	}
	// The follower decided nothing itself: its own snapshot admits none.
	// It answers with the leader's figures, and says whose they are.
	if status, admitted, by := quotasOf(t, b.addr, token); status != 200 || admitted != "6" || by != a.addr {
		t.Errorf("GET /v1/quotas on the follower: %d, uni-astro admitted %q, answered by %q; want 200, the leader's 6, answered by %s", status, admitted, by, a.addr)
	}
	if status, admitted, by := quotasOf(t, a.addr, token); status != 200 || admitted != "6" || by != "" {
		t.Errorf("GET /v1/quotas on the leader: %d, uni-astro admitted %q, answered by %q; want 200, 6, no header", status, admitted, by)
	}

	// The leader resigns: the follower decides itself within moments,
	// from the admitted work it rebuilt: the 6 GPUs the old leader holds
	// leave no room.
	a.stop()
	var allowedAfter bool
	eventually(t, "the follower to decide itself", 5*time.Second, func() bool {
		status, ok, by := admit(t, b.addr, token, 1)
		allowedAfter = ok
		return status == 200 && by == ""
	})
	if allowedAfter {
		t.Errorf("the new leader admitted a 7th GPU under a limit of 6: it did not rebuild the old leader's admissions")
	}
}

// A leader that dies without resigning (SIGKILL: its ZooKeeper session is
// never closed) hands admissions and jobs over once its session expires:
// the session timeout S = 2 s plus ZooKeeper's 0.5 s tick (then the job's
// next 1 s turn); meanwhile the follower answers admissions 503, and then
// it refuses what the dead leader's admissions already hold.
func TestServeHandsOverWhenTheLeaderIsKilled(t *testing.T) {
	dsn, zk, token, quotas := haSetup(t, 3)
	a := startReplicaProcess(t, dsn, zk, quotas)
	eventually(t, "the first replica to lead and run the rollup", 10*time.Second, func() bool { return a.rollups(t) >= 1 })
	b := startReplica(t, dsn, zk, quotas)
	time.Sleep(1500 * time.Millisecond)
	if n := b.rollups(t); n != 0 {
		t.Fatalf("the follower ran %d rollups while the leader lived", n)
	}
	if status, ok, by := admit(t, b.addr, token, 1); status != 200 || !ok || by != a.addr {
		t.Fatalf("an admission on the follower: %d (allowed %v) decided by %q, want 200 allowed by the leader %s", status, ok, by, a.addr)
	}
	if status, ok, _ := admit(t, a.addr, token, 2); status != 200 || !ok {
		t.Fatalf("2 more GPUs on the leader: %d, allowed %v", status, ok)
	}
	time.Sleep(300 * time.Millisecond) // the admission log is written every 100 ms
	killed := time.Now()
	a.stop()
	// Nobody leads for S: a quota read on the follower still answers, from
	// its own snapshot, and says so.
	if status, _, by := quotasOf(t, b.addr, token); status != 200 || by != "local" {
		t.Errorf("GET /v1/quotas on the follower with the leader killed: %d, answered by %q; want 200 answered locally", status, by)
	}
	// Until the follower leads, its admissions answer 503 (never a
	// decision of its own, never a hang); then it decides them.
	var refused int
	var allowedAfter bool
	eventually(t, "the follower to decide admissions", 10*time.Second, func() bool {
		status, ok, by := admit(t, b.addr, token, 1)
		if status == 200 && by == "" {
			allowedAfter = ok
			return true
		}
		if status != http.StatusServiceUnavailable {
			t.Errorf("an admission on the follower while nobody leads: %d (decided by %q), want 503", status, by)
		}
		refused++
		return false
	})
	decides := time.Since(killed)
	if allowedAfter {
		t.Errorf("the new leader admitted a 4th GPU under a limit of 3: it did not rebuild the killed leader's admissions")
	}
	eventually(t, "the follower to take the rollup over", 10*time.Second, func() bool { return b.rollups(t) >= 1 })
	took := time.Since(killed)
	t.Logf("after the leader was killed: the follower decided admissions after %v (%d answered 503 before), ran its first rollup after %v",
		decides.Round(time.Millisecond), refused, took.Round(time.Millisecond))
	// S + tick (+ one turn for the job), and 2 s for a loaded machine.
	if limit := 2*time.Second + 500*time.Millisecond + 2*time.Second; decides > limit {
		t.Errorf("admissions resumed %v after the kill, over %v", decides, limit)
	}
	if limit := 2*time.Second + 500*time.Millisecond + time.Second + 2*time.Second; took > limit {
		t.Errorf("jobs resumed %v after the kill, over %v", took, limit)
	}
}

// haSetup is what the admission failover tests share: ClickHouse, a
// ZooKeeper, an admin key, and a concurrency quota of limit GPUs on
// uni-astro refreshed every second.
func haSetup(t *testing.T, limit int) (dsn string, zkPort int, token, quotas string) {
	t.Helper()
	dsn = testDSN(t)
	zkPort = storetest.StartZooKeeper(t)
	code, out, stderr := gpumeter(t, "--clickhouse", dsn, "keys", "create", "--scope", "admin", "--expires", "1h")
	if code != 0 {
		t.Fatalf("keys create: exit %d\n%s", code, stderr)
	}
	quotas = fmt.Sprintf("quotas:\n  refresh: 1s\n  rules:\n    - tenant: uni-astro\n      concurrent_gpus: {limit: %d}\n", limit)
	return dsn, zkPort, strings.TrimSpace(out), quotas
}
