package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// The failover test's figures (docs/ha.md, "The failover test"): the
// ZooKeeper session S = 2 s of replicaArgs, the tick k = 0.5 s of
// storetest.StartZooKeeper, and the quota the clients press on.
const (
	failoverSession = 2 * time.Second
	failoverTick    = 500 * time.Millisecond
	failoverSlack   = 2 * time.Second // a loaded 2-core machine
	failoverLimit   = 16              // concurrent GPUs of uni-astro
	// globex's spend limit: 30 EUR of admitted work, 12 admissions of one
	// H100 for an hour at the book's 2.50 EUR.
	failoverSpendLimit = 12
	// quotas.reservation_ttl: admitted GPUs free up after it, so the
	// clients find room again and again; longer than the failover, so
	// that the new leader must rebuild the old one's to stay in bounds.
	failoverTTL        = 4 * time.Second
	failoverClients    = 32
	failoverClientWait = 100 * time.Millisecond // each client's pause between admissions
)

// procReplica is one `gpumeter serve` child process (this test binary
// run as gpumeter) that can be SIGKILLed and started again on the same
// address, as a restarted systemd unit is. Every incarnation's log is
// kept: the record of which scheduled jobs it ran.
type procReplica struct {
	addr    string
	args    []string
	mu      sync.Mutex
	cmd     *exec.Cmd
	logs    []*harness.Buffer
	killed  []time.Time // when each killed incarnation was killed
	running bool
}

func newProcReplica(t testing.TB, dsn string, zkPort int, extraConfig string) *procReplica {
	t.Helper()
	r, args := replicaArgs(t, dsn, zkPort, extraConfig)
	p := &procReplica{addr: r.addr, args: args}
	t.Cleanup(func() { p.kill() })
	return p
}

// start runs a new incarnation and waits for it to be ready.
func (p *procReplica) start(t testing.TB) {
	t.Helper()
	p.launch(t)
	p.waitReady(t)
}

// launch runs a new incarnation.
func (p *procReplica) launch(t testing.TB) {
	t.Helper()
	cmd := exec.Command(os.Args[0], p.args...)
	cmd.Env = append(os.Environ(), "GPUMETER_TEST_AS_MAIN=1")
	log := &harness.Buffer{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.cmd, p.running = cmd, true
	p.logs = append(p.logs, log)
	p.mu.Unlock()
}

// waitReady waits for the incarnation's /readyz.
func (p *procReplica) waitReady(t testing.TB) {
	t.Helper()
	harness.Eventually(t, "serve "+p.addr+" to be ready", 30*time.Second, func() bool { code, _ := harness.HTTPGet(p.addr, "/readyz"); return code == 200 })
}

// killing is when a replica was SIGKILLed: from the signal to the
// moment it was reaped.
type killing struct{ from, to time.Time }

// inFlight says whether a request sent at sent and answered at done was
// under way while the replica died.
func (k killing) inFlight(sent, done time.Time) bool {
	return !sent.After(k.to) && !done.Before(k.from)
}

// kill SIGKILLs the running incarnation (nothing is closed: its
// ZooKeeper session stays until it expires) and says when.
func (p *procReplica) kill() killing {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := killing{from: time.Now()}
	if !p.running {
		return killing{k.from, k.from}
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	k.to = time.Now()
	p.running = false
	p.killed = append(p.killed, k.from)
	return k
}

// roundRobin is the load balancer in front of the replicas: requests go
// to each in turn, and a replica that refuses the connection is skipped
// for a second and the request sent to the next one, as a Kubernetes
// Service's endpoints drop a pod whose readiness fails, or as an
// ingress proxy retries a failed connect (nginx's proxy_next_upstream
// error, Envoy's connect-failure retry). A request whose connection was
// made is never sent again (an admission is not idempotent): if the
// replica dies with it, the caller gets 502.
type roundRobin struct {
	backends []string
	client   *http.Client
	next     atomic.Uint64
	mu       sync.Mutex
	downTill map[string]time.Time
}

// backendHeader names the replica the proxy sent a request to.
const backendHeader = "Test-Backend"

func newRoundRobin(backends []string) *roundRobin {
	transport := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}
	return &roundRobin{backends: backends, downTill: map[string]time.Time{},
		client: &http.Client{Transport: transport, Timeout: 10 * time.Second}}
}

func (rr *roundRobin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	first := int(rr.next.Add(1))
	for i := range len(rr.backends) {
		to := rr.backends[(first+i)%len(rr.backends)]
		rr.mu.Lock()
		down := time.Now().Before(rr.downTill[to])
		rr.mu.Unlock()
		if down {
			continue
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+to+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := rr.client.Do(req)
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			rr.mu.Lock()
			rr.downTill[to] = time.Now().Add(time.Second)
			rr.mu.Unlock()
			continue
		}
		if err != nil {
			w.Header().Set(backendHeader, to)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			w.Header().Set(backendHeader, to)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.Header().Set(backendHeader, to)
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(b)
		return
	}
	http.Error(w, "no replica accepts connections", http.StatusBadGateway)
}

// attempt is one client's admission through the proxy.
type attempt struct {
	tenant     string
	sent, done time.Time
	status     int
	allowed    bool
	stale      bool
	id         string
	backend    string
	decidedBy  string
	err        string
}

// decided is whether the attempt got a decision (allowed or refused by
// a quota), rather than an unavailable leader, stale data or an error.
func (a attempt) decided() bool { return a.status == http.StatusOK && !a.stale }

func postAdmission(client *http.Client, url, token, tenant string) attempt {
	a := attempt{tenant: tenant, sent: time.Now()}
	body := `{"tenant":"` + tenant + `","gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h"}`
	req, err := http.NewRequest(http.MethodPost, url+"/v1/admission", strings.NewReader(body))
	if err != nil {
		a.err = err.Error()
		return a
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		a.done, a.err = time.Now(), err.Error()
		return a
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	a.done, a.status = time.Now(), resp.StatusCode
	a.backend, a.decidedBy = resp.Header.Get(backendHeader), resp.Header.Get("Gpumeter-Decided-By")
	if err != nil {
		a.err = err.Error()
		return a
	}
	if a.status != http.StatusOK {
		a.err = strings.TrimSpace(string(b))
		return a
	}
	var d struct {
		ID      string `json:"admission_id"`
		Allowed bool   `json:"allowed"`
		Stale   bool   `json:"stale"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		a.err = fmt.Sprintf("answer %s: %v", b, err)
		a.status = 0
		return a
	}
	a.id, a.allowed, a.stale = d.ID, d.Allowed, d.Stale
	return a
}

// admissionOrder is when the leader decided an admission and its place
// among that leader's decisions, read from its id (adm-<unix ms>-<seq>,
// internal/quota): the leader's own clock, not the client's.
func admissionOrder(t *testing.T, id string) (time.Time, uint64) {
	t.Helper()
	f := strings.Split(id, "-")
	if len(f) != 3 || f[0] != "adm" {
		t.Fatalf("admission id %q: not adm-<ms>-<seq>", id)
	}
	ms, err1 := strconv.ParseInt(f[1], 10, 64)
	seq, err2 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("admission id %q: %v %v", id, err1, err2)
	}
	return time.UnixMilli(ms), seq
}

// leaderOf asks a replica who decides (a dry run holds nothing): its
// own address when it decides itself.
func leaderOf(addr, token string) string {
	body := `{"tenant":"uni-astro","gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h","dry_run":true}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/admission", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	if by := resp.Header.Get("Gpumeter-Decided-By"); by != "" {
		return by
	}
	return addr
}

// jobRun is one run of a scheduled job as a replica's log records it.
type jobRun struct {
	job        string
	replica    string
	token      int64
	start, end time.Time
	finished   bool // false: the replica was killed during the run
}

var (
	jobStarted = regexp.MustCompile(`msg="leader job started" job=(\S+) token=(\d+) started=(\S+)`)
	jobDone    = regexp.MustCompile(`msg="leader job done" job=(\S+) token=\d+ started=(\S+) took=(\S+)`)
)

// jobRuns reads every incarnation's log (internal/leader's Gate.Job): a
// run started and not done was cut short by the kill of its replica,
// and ends then.
func jobRuns(t *testing.T, replicas []*procReplica) []jobRun {
	t.Helper()
	var runs []jobRun
	for _, p := range replicas {
		p.mu.Lock()
		logs, killed := append([]*harness.Buffer(nil), p.logs...), append([]time.Time(nil), p.killed...)
		p.mu.Unlock()
		for i, log := range logs {
			text := log.String()
			open := map[string]int{} // job|started → index in runs
			for _, m := range jobStarted.FindAllStringSubmatch(text, -1) {
				started, err := time.Parse(time.RFC3339Nano, m[3])
				if err != nil {
					t.Fatalf("job log line %q: %v", m[0], err)
				}
				token, _ := strconv.ParseInt(m[2], 10, 64)
				r := jobRun{job: m[1], replica: p.addr, token: token, start: started, end: time.Now()}
				if i < len(killed) {
					r.end = killed[i]
				}
				open[m[1]+"|"+m[3]] = len(runs)
				runs = append(runs, r)
			}
			for _, m := range jobDone.FindAllStringSubmatch(text, -1) {
				j, ok := open[m[1]+"|"+m[2]]
				took, err := time.ParseDuration(m[3])
				if !ok || err != nil {
					t.Fatalf("%s logged a job done that never started, or a bad duration (%v): %q", p.addr, err, m[0])
				}
				runs[j].finished, runs[j].end = true, runs[j].start.Add(took)
			}
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].start.Before(runs[j].start) })
	return runs
}

// getRead is one read on a replica: its status, or the error.
func getRead(addr, token, path string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}

// The failover test: three `serve` processes behind a round-robin
// proxy, real ClickHouse and ZooKeeper, 32 clients admitting one GPU at a
// time against a concurrency quota they keep full; the leader SIGKILLed
// mid-run and restarted, then a follower. It checks the bounds docs/ha.md
// states: no more admitted at once than the limit (plus the admissions
// the killed leader had not yet written to the admission log), decisions
// unavailable for at most S + k (+ slack) after the leader's kill and not
// at all after a follower's, the rollup run once per turn by one replica
// at a time, and reads never failing on the replicas still up.
func TestServeFailoverUnderLoad(t *testing.T) {
	dsn := testDSN(t)
	zk := storetest.StartZooKeeper(t)
	code, out, stderr := gpumeter(t, "--clickhouse", dsn, "keys", "create", "--scope", "admin", "--expires", "1h")
	if code != 0 {
		t.Fatalf("keys create: exit %d\n%s", code, stderr)
	}
	token := strings.TrimSpace(out)
	// An hour of usage at the start of last month, for the reads (and
	// nothing live: the quota starts empty).
	now := time.Now().UTC()
	monthStart := time.Date(now.Year(), now.Month()-1, 1, 0, 0, 0, 0, time.UTC)
	usageFile := filepath.Join(t.TempDir(), "usage.csv")
	if err := os.WriteFile(usageFile, []byte("host,gpu_uuid,gpu_model,tenant,workload,start,end,gpu_seconds\n"+
		"h,G,H100-SXM5-80GB,uni-astro,j,"+monthStart.Format(time.RFC3339)+","+monthStart.Add(time.Hour).Format(time.RFC3339)+",3600\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := gpumeter(t, "--clickhouse", dsn, "import", "--quiet", usageFile); code != 0 {
		t.Fatalf("import: exit %d\n%s", code, stderr)
	}
	// uni-astro under a concurrency quota; globex, a customer priced by a
	// book, under a spend quota. The credit job runs every second too.
	book := filepath.Join(t.TempDir(), "book.yaml")
	if err := os.WriteFile(book, []byte(invoiceCLIBook), 0o600); err != nil {
		t.Fatal(err)
	}
	extra := fmt.Sprintf("server:\n  rate_limit: {per_second: 100000, burst: 100000}\nretention:\n  schedule: \"@every 1s\"\n"+
		"credits:\n  schedule: \"@every 1s\"\n"+
		"billing:\n  schedule: %q\n  issuer: {id: gc, name: GPU Cloud GmbH, number_prefix: \"GC-\"}\n"+
		"  customers:\n    - {tenant: globex, name: Globex, currency: EUR, time_zone: UTC, book: %s}\n"+
		"quotas:\n  refresh: 1s\n  reservation_ttl: %s\n  rules:\n    - tenant: uni-astro\n      concurrent_gpus: {limit: %d}\n"+
		"    - tenant: globex\n      spend: {limit: \"%d\"}\n",
		billing.DefaultInvoiceSchedule, book, failoverTTL, failoverLimit, 5*failoverSpendLimit/2)
	replicas := make([]*procReplica, 3)
	for i := range replicas {
		replicas[i] = newProcReplica(t, dsn, zk, extra)
	}
	for _, p := range replicas { // started together, as a rollout's pods are
		p.launch(t)
	}
	for _, p := range replicas {
		p.waitReady(t)
	}
	byAddr := map[string]*procReplica{}
	addrs := make([]string, len(replicas))
	for i, p := range replicas {
		byAddr[p.addr], addrs[i] = p, p.addr
	}
	var leaderAddr string
	eventually(t, "a leader", 10*time.Second, func() bool { leaderAddr = leaderOf(addrs[0], token); return byAddr[leaderAddr] != nil })

	proxyAddr := harness.FreeAddr(t)
	ln, err := net.Listen("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &http.Server{Handler: newRoundRobin(addrs)}
	go func() { _ = proxy.Serve(ln) }()
	t.Cleanup(func() { proxy.Close() })

	// The clients: each admits one GPU, pauses, again, until stopped.
	stop := make(chan struct{})
	var mu sync.Mutex
	var attempts []attempt
	var clients sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: failoverClients}, Timeout: 15 * time.Second}
	for i := range failoverClients {
		tenant := "uni-astro"
		if i%2 == 1 {
			tenant = "globex"
		}
		clients.Go(func() {
			for {
				a := postAdmission(client, "http://"+proxyAddr, token, tenant)
				mu.Lock()
				attempts = append(attempts, a)
				mu.Unlock()
				select {
				case <-stop:
					return
				case <-time.After(failoverClientWait):
				}
			}
		})
	}
	// The readers: every replica that is up answers reads, always.
	var readFailures []string
	paused := map[string]*atomic.Bool{}
	for _, a := range addrs {
		paused[a] = &atomic.Bool{}
	}
	reads := []string{"/healthz", "/v1/usage?from=" + monthStart.Format(time.RFC3339) + "&to=" + monthStart.Add(time.Hour).Format(time.RFC3339),
		"/v1/tenants", "/v1/quotas"}
	for _, addr := range addrs {
		clients.Go(func() {
			for i := 0; ; i++ {
				if !paused[addr].Load() {
					path := reads[i%len(reads)]
					code, body := getRead(addr, token, path)
					if code != http.StatusOK && !paused[addr].Load() {
						mu.Lock()
						readFailures = append(readFailures, fmt.Sprintf("%s GET %s: %d %s", addr, path, code, body))
						mu.Unlock()
					}
				}
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}

	// Phase 1: the leader SIGKILLed, restarted once another leads. The
	// kill comes just after the leader admitted half the limit or more
	// (the clients take the room in bursts as admissions expire), so the
	// new leader must rebuild those to stay within the limit.
	// (On a machine too loaded for a burst the kill comes anyway: the
	// checks hold either way, they are only less likely to catch a
	// missing rebuild.)
	time.Sleep(2 * time.Second)
	burst := func() bool {
		mu.Lock()
		defer mu.Unlock()
		recent := 0
		for _, a := range attempts {
			if a.decided() && a.allowed && time.Since(a.done) < 300*time.Millisecond {
				recent++
			}
		}
		return recent >= failoverLimit/2
	}
	for wait := time.Now().Add(2 * failoverTTL); !burst(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Logf("no burst of %d admissions within 0.3 s in %v: killing the leader anyway", failoverLimit/2, 2*failoverTTL)
			break
		}
	}
	time.Sleep(400 * time.Millisecond) // the burst written to the admission log (every 100 ms)
	oldLeader := byAddr[leaderAddr]
	paused[oldLeader.addr].Store(true)
	leaderKilled := oldLeader.kill()
	var survivor string
	for _, a := range addrs {
		if a != oldLeader.addr {
			survivor = a
		}
	}
	eventually(t, "a new leader", 15*time.Second, func() bool {
		l := leaderOf(survivor, token)
		if byAddr[l] != nil && l != oldLeader.addr {
			leaderAddr = l
			return true
		}
		return false
	})
	time.Sleep(time.Second)
	oldLeader.start(t)
	paused[oldLeader.addr].Store(false)
	phase2 := time.Now()

	// Phase 2: a follower SIGKILLed, restarted 2 s later.
	time.Sleep(3 * time.Second)
	var follower *procReplica
	for _, p := range replicas {
		if p.addr != leaderAddr {
			follower = p
		}
	}
	paused[follower.addr].Store(true)
	followerKilled := follower.kill()
	time.Sleep(2 * time.Second)
	follower.start(t)
	paused[follower.addr].Store(false)
	time.Sleep(2 * time.Second)
	close(stop)
	clients.Wait()
	ended := time.Now()
	if l := leaderOf(addrs[0], token); l != leaderAddr {
		t.Errorf("the leader changed in phase 2 (killing a follower): %s, then %s", leaderAddr, l)
	}

	checkFailoverAdmissions(t, dsn, attempts, leaderKilled, phase2, followerKilled)
	runs := jobRuns(t, replicas)
	for _, job := range []string{"rollup", "retention", "credits"} {
		checkFailoverJob(t, job, runs, leaderKilled.from, ended)
	}
	for _, f := range readFailures {
		t.Errorf("a read on a replica that was up failed: %s", f)
	}
}

// checkFailoverAdmissions checks the admissions' bounds: over-admission,
// the longest stretch without a decision, and what the failures were.
func checkFailoverAdmissions(t *testing.T, dsn string, attempts []attempt, leaderKilled killing, phase2 time.Time, followerKilled killing) {
	t.Helper()
	// Exact over-admission: at each admission, the GPUs the leaders had
	// admitted within the TTL before it (in the deciding leader's order)
	// are at most the limit, plus those the killed leader had decided but
	// not yet written to the admission log, which its successor could
	// not rebuild (docs/ha.md).
	s := harness.OpenStore(t, dsn)
	held, err := s.HeldAdmissions(context.Background(), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	logged := map[string]bool{}
	for _, h := range held {
		logged[h.ID] = true
	}
	type admitted struct {
		at        time.Time
		seq       uint64
		forgotten bool
	}
	allowedOf := map[string][]admitted{}
	var forgotten []time.Time
	counts := map[string]int{}
	for _, a := range attempts {
		switch {
		case a.decided() && a.allowed:
			counts["allowed"]++
			at, seq := admissionOrder(t, a.id)
			f := !logged[a.id]
			allowedOf[a.tenant] = append(allowedOf[a.tenant], admitted{at, seq, f})
			if f {
				forgotten = append(forgotten, at)
			}
		case a.decided():
			counts["refused by the quota"]++
		case a.status == http.StatusServiceUnavailable:
			counts["503 no leader"]++
		case a.status == http.StatusBadGateway:
			counts["502 replica died with the request"]++
		default:
			counts["other"]++
			t.Errorf("an admission answered %d (stale %v): %s", a.status, a.stale, a.err)
		}
	}
	// Each tenant's quota binds alone: uni-astro's GPUs at once,
	// globex's spend (one admission, one H100-hour, 2.50 EUR).
	limits := map[string]int{"uni-astro": failoverLimit, "globex": failoverSpendLimit}
	worst, worstForgotten := map[string]int{}, 0
	for tenant, allowed := range allowedOf {
		sort.Slice(allowed, func(i, j int) bool {
			if !allowed[i].at.Equal(allowed[j].at) {
				return allowed[i].at.Before(allowed[j].at)
			}
			return allowed[i].seq < allowed[j].seq
		})
		over, overWorst := 0, 0
		var overAt time.Time
		for i, a := range allowed {
			n, nf := 0, 0
			for _, b := range allowed[:i+1] {
				if a.at.Before(b.at.Add(failoverTTL)) {
					n++
					if b.forgotten {
						nf++
					}
				}
			}
			if n-nf > limits[tenant] {
				over++
				if n-nf > overWorst {
					overWorst, overAt = n-nf, a.at
				}
			}
			worst[tenant], worstForgotten = max(worst[tenant], n), max(worstForgotten, nf)
		}
		if over > 0 {
			t.Errorf("%s: %d admissions went over its limit of %d: at worst %d admitted within one TTL at %s, not counting those the killed leader's log forgot",
				tenant, over, limits[tenant], overWorst, overAt.Format("15:04:05.000"))
		}
	}
	for tenant, limit := range limits {
		if worst[tenant] < limit {
			t.Errorf("%s: at most %d admitted within one TTL, never its limit of %d: the clients did not press on it", tenant, worst[tenant], limit)
		}
	}
	var oldestForgotten time.Duration
	for _, f := range forgotten {
		oldestForgotten = max(oldestForgotten, leaderKilled.from.Sub(f))
		if f.After(leaderKilled.to) || leaderKilled.from.Sub(f) > failoverSlack/2 {
			t.Errorf("an admission decided at %s is not in the admission log: only the last flush before the leader's kill at %s may be lost",
				f.Format("15:04:05.000"), leaderKilled.from.Format("15:04:05.000"))
		}
	}
	if counts["allowed"] < 20 || counts["refused by the quota"] < 20 {
		t.Errorf("the clients did not press on the limit: %v", counts)
	}

	// The longest stretch in which clients asked and got no decision, in
	// each phase: between one decision and the next.
	sort.Slice(attempts, func(i, j int) bool { return attempts[i].done.Before(attempts[j].done) })
	gap := func(from, to time.Time) (time.Duration, time.Time) {
		var longest time.Duration
		var at time.Time
		last := time.Time{}
		for _, a := range attempts {
			if !a.decided() || a.done.Before(from) || !a.done.Before(to) {
				continue
			}
			if !last.IsZero() && a.done.Sub(last) > longest {
				longest, at = a.done.Sub(last), last
			}
			last = a.done
		}
		return longest, at
	}
	leaderGap, leaderGapAt := gap(time.Time{}, phase2)
	followerGap, _ := gap(phase2, time.Now().Add(time.Hour))
	t.Logf("admissions: %v; at most %v admitted within one TTL (%d of them forgotten: %d admissions were not in the log, decided up to %v before the kill)",
		counts, worst, worstForgotten, len(forgotten), oldestForgotten.Round(time.Millisecond))
	t.Logf("leader killed: no decision for %v (from %s, %v after the kill); follower killed: longest stretch without one %v",
		leaderGap.Round(time.Millisecond), leaderGapAt.Format("15:04:05.000"), leaderGapAt.Sub(leaderKilled.from).Round(time.Millisecond),
		followerGap.Round(time.Millisecond))
	if limit := failoverSession + failoverTick + failoverSlack; leaderGap > limit {
		t.Errorf("no admission decided for %v around the leader's kill, over S + k + slack = %v", leaderGap, limit)
	}
	if followerGap > time.Second {
		t.Errorf("no admission decided for %v around a follower's kill, want under a second", followerGap)
	}
	for _, a := range attempts {
		if a.status == http.StatusServiceUnavailable && (a.done.Before(leaderKilled.from) || a.sent.After(phase2)) {
			t.Errorf("a 503 outside the leader's failover (sent %s, answered %s): %s", a.sent.Format("15:04:05.000"), a.done.Format("15:04:05.000"), a.err)
		}
		if a.status == http.StatusBadGateway && !leaderKilled.inFlight(a.sent, a.done) && !followerKilled.inFlight(a.sent, a.done) {
			t.Errorf("a 502 not in flight at a kill (sent %s, answered %s): %s", a.sent.Format("15:04:05.000"), a.done.Format("15:04:05.000"), a.err)
		}
	}
}

// checkFailoverJob checks one job, scheduled every second (at whole
// seconds on every replica: robfig/cron's @every rounds to the second):
// no two runs at once, no turn run twice, and every turn run except
// those of the leader's failover, which ends within S + k + a turn.
func checkFailoverJob(t *testing.T, job string, runs []jobRun, leaderKilled, ended time.Time) {
	t.Helper()
	var ran []jobRun
	for _, r := range runs {
		if r.job == job && r.start.Before(ended.Add(-time.Second)) {
			ran = append(ran, r)
		}
	}
	if len(ran) < 3 {
		t.Fatalf("%d %s runs logged, want one a second (or one a run, for a run longer than that)", len(ran), job)
	}
	turns := map[int64]jobRun{}
	var resumed time.Duration
	for i, r := range ran {
		turn := r.start.Unix()
		if prev, twice := turns[turn]; twice {
			t.Errorf("the %s's turn %s ran twice: on %s and %s", job, time.Unix(turn, 0).UTC().Format("15:04:05"), prev.replica, r.replica)
		}
		turns[turn] = r
		if i == 0 {
			continue
		}
		prev := ran[i-1]
		if r.start.Before(prev.end) {
			t.Errorf("two %s runs at once: %s from %s to %s, %s from %s", job, prev.replica, prev.start.Format("15:04:05.000"),
				prev.end.Format("15:04:05.000"), r.replica, r.start.Format("15:04:05.000"))
		}
		if r.token < prev.token {
			t.Errorf("a %s run under token %d after one under %d", job, r.token, prev.token)
		}
		// Turns in between were skipped: only while the previous run was
		// still going (cron skips a turn then), or across the failover.
		for missed := prev.start.Unix() + 1; missed < turn; missed++ {
			at := time.Unix(missed, 0)
			if prev.finished && prev.end.After(at) {
				continue
			}
			if prev.start.Before(leaderKilled) && !r.start.Before(leaderKilled) {
				resumed = r.start.Sub(leaderKilled)
				continue
			}
			t.Errorf("the %s's turn %s ran nowhere (%s ran the one before, %s the one after)", job, at.UTC().Format("15:04:05"), prev.replica, r.replica)
		}
	}
	// Nor did it stop after its last run: the turns since found it running.
	last := ran[len(ran)-1]
	for turn := last.start.Unix() + 1; turn < ended.Add(-2*time.Second).Unix(); turn++ {
		if !last.end.After(time.Unix(turn, 0)) {
			t.Errorf("the %s stopped: its last run began at %s and ended at %s", job, last.start.Format("15:04:05.000"), last.end.Format("15:04:05.000"))
			break
		}
	}
	t.Logf("%d %s runs from %s to %s; after the leader's kill the next one began %v later", len(ran), job,
		ran[0].start.Format("15:04:05.000"), ran[len(ran)-1].start.Format("15:04:05.000"), resumed.Round(time.Millisecond))
	if limit := failoverSession + failoverTick + time.Second + failoverSlack; resumed > limit {
		t.Errorf("the %s resumed %v after the leader's kill, over S + k + a turn + slack = %v", job, resumed, limit)
	}
}
