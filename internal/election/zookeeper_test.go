package election

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/store/storetest"
)

// testSessionTimeout: scripts/zookeeper.sh ticks every 500 ms, so the
// server grants 1–10 s; 2 s keeps the partition test to a few seconds.
const (
	testSessionTimeout = 2 * time.Second
	testTick           = 500 * time.Millisecond
)

// TestZooKeeper runs the election against a real ZooKeeper of its own
// (started once for all cases: the JVM takes seconds to start).
func TestZooKeeper(t *testing.T) {
	server := fmt.Sprintf("127.0.0.1:%d", storetest.StartZooKeeper(t))
	t.Run("OneLeaderAmongThree", func(t *testing.T) { testOneLeaderAmongThree(t, server) })
	t.Run("HandoverWhenLeaderCloses", func(t *testing.T) { testHandoverOnClose(t, server) })
	t.Run("PartitionedLeaderStepsDownBeforeSuccessor", func(t *testing.T) { testPartitionedLeader(t, server) })
	t.Run("NoTwoLeadersOverHandovers", func(t *testing.T) { testHandoverLoop(t, server) })
	t.Run("HandoverWhenLeaderProcessIsKilled", func(t *testing.T) { testHandoverOnKill(t, server) })
	t.Run("FromConfig", func(t *testing.T) {
		c := DefaultConfig()
		c.Backend, c.Name, c.Identity = BackendZooKeeper, "from-config", "127.0.0.1:7100"
		c.ZooKeeper.Servers, c.ZooKeeper.SessionTimeout = []string{server}, testSessionTimeout
		e, err := FromConfig(c, testLogger())
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		term, err := e.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		awaitLeaderSeen(t, e, term.Leader, 5*time.Second)
	})
	t.Run("NoLeaderWithoutCandidates", func(t *testing.T) {
		e := newTestZooKeeper(t, server, "empty", "127.0.0.1:7000")
		if _, err := e.Leader(context.Background()); !errors.Is(err, ErrNoLeader) {
			t.Fatalf("Leader of an election nobody stands in: %v, want ErrNoLeader", err)
		}
	})
}

func newTestZooKeeper(t *testing.T, server, name, identity string) *ZooKeeper {
	t.Helper()
	e, err := NewZooKeeper(ZooKeeperOptions{
		Servers: []string{server}, SessionTimeout: testSessionTimeout,
		Name: name, Identity: identity, Logger: testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// candidatesOf starts n campaigning replicas of one election; the
// returned context's cancel runs first at cleanup (registered last).
func candidatesOf(t *testing.T, server, name string, n int) (map[string]*ZooKeeper, *ledger) {
	t.Helper()
	l := newLedger()
	electors := map[string]*ZooKeeper{}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("127.0.0.1:%d", 8001+i)
		electors[id] = newTestZooKeeper(t, server, name, id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for id, e := range electors {
		campaignLoop(ctx, e, id, l)
	}
	return electors, l
}

// awaitLeaderSeen waits until e reports want as the leader.
func awaitLeaderSeen(t *testing.T, e Elector, want Leader, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var got Leader
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		got, err = e.Leader(ctx)
		cancel()
		if err == nil && got == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("leader seen: %+v, %v; want %+v", got, err, want)
}

func testOneLeaderAmongThree(t *testing.T, server string) {
	electors, l := candidatesOf(t, server, "one-of-three", 3)
	first := l.next(t, 10*time.Second)
	l.expectNone(t, time.Second)
	if n := l.held(); n != 1 {
		t.Fatalf("%d terms held, want 1", n)
	}
	for id, e := range electors {
		// Every replica, the leader too, finds the leader's address.
		awaitLeaderSeen(t, e, first.term.Leader, 5*time.Second)
		t.Logf("%s sees leader %s (token %d)", id, first.identity, first.term.Token)
	}
	l.check(t)
}

func testHandoverOnClose(t *testing.T, server string) {
	electors, l := candidatesOf(t, server, "close", 3)
	first := l.next(t, 10*time.Second)
	start := time.Now()
	if err := electors[first.identity].Close(); err != nil {
		t.Fatal(err)
	}
	if first.term.Held() {
		t.Fatal("the closed leader's term still runs")
	}
	if !errors.Is(context.Cause(first.term.Context()), ErrResigned) {
		t.Fatalf("closed leader's term ended with %v, want ErrResigned", context.Cause(first.term.Context()))
	}
	second := l.next(t, 10*time.Second)
	handover := second.at.Sub(start)
	t.Logf("handover after closing the leader's session: %s", handover)
	// Closing the session deletes its znode at once: no session timeout
	// to wait out (docs/ha.md).
	if handover >= testSessionTimeout {
		t.Errorf("handover took %s, want less than the session timeout %s", handover, testSessionTimeout)
	}
	if second.identity == first.identity {
		t.Fatalf("the closed replica %s leads again", second.identity)
	}
	for id, e := range electors {
		if id != first.identity {
			awaitLeaderSeen(t, e, second.term.Leader, 5*time.Second)
		}
	}
	l.check(t)
}

// testPartitionedLeader cuts the leader off ZooKeeper without closing
// anything, as a crash or a network partition would: the leader must step
// down on its own before the server expires its session and a successor
// begins.
func testPartitionedLeader(t *testing.T, server string) {
	proxy := startPartitionProxy(t, server)
	l := newLedger()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The proxied replica stands first, so that it leads.
	const oldID = "127.0.0.1:9001"
	old := newTestZooKeeper(t, proxy.Addr(), "partition", oldID)
	campaignLoop(ctx, old, oldID, l)
	first := l.next(t, 10*time.Second)
	if first.identity != oldID {
		t.Fatalf("%s leads, want the proxied %s", first.identity, oldID)
	}
	others := map[string]*ZooKeeper{}
	for _, id := range []string{"127.0.0.1:9002", "127.0.0.1:9003"} {
		others[id] = newTestZooKeeper(t, server, "partition", id)
		campaignLoop(ctx, others[id], id, l)
	}
	// Both are candidates (behind the leader) before the cut.
	for _, e := range others {
		awaitLeaderSeen(t, e, first.term.Leader, 5*time.Second)
	}
	time.Sleep(200 * time.Millisecond)

	start := time.Now()
	proxy.Partition()
	<-first.term.Done()
	stepDown := time.Since(start)
	if !errors.Is(context.Cause(first.term.Context()), ErrLeadershipLost) {
		t.Fatalf("the partitioned leader's term ended with %v, want ErrLeadershipLost", context.Cause(first.term.Context()))
	}
	second := l.next(t, testSessionTimeout+4*testTick+2*time.Second)
	handover := second.at.Sub(start)
	t.Logf("partitioned leader stepped down after %s; successor %s after %s (session timeout %s, tick %s)",
		stepDown, second.identity, handover, testSessionTimeout, testTick)
	// The client gives up on the connection after 2/3 of the session
	// timeout; the server expires the session after all of it (plus up
	// to a tick): the old leader has stopped before anyone else starts.
	if stepDown > testSessionTimeout*2/3+slack {
		t.Errorf("the partitioned leader stepped down after %s, want about %s", stepDown, testSessionTimeout*2/3)
	}
	if !second.at.After(start.Add(stepDown)) {
		t.Errorf("the successor began %s after the cut, before the old leader stepped down (%s)", handover, stepDown)
	}
	if second.identity == oldID {
		t.Fatalf("the partitioned replica leads again")
	}
	if second.term.Token <= first.term.Token {
		t.Errorf("successor token %d does not fence the old leader's %d", second.term.Token, first.term.Token)
	}
	// Healed, the old replica learns its session expired, stands again,
	// and follows the new leader.
	proxy.Heal()
	awaitLeaderSeen(t, old, second.term.Leader, 15*time.Second)
	l.expectNone(t, 500*time.Millisecond)
	l.check(t)
}

func testHandoverLoop(t *testing.T, server string) {
	electors, l := candidatesOf(t, server, "loop", 3)
	g := l.next(t, 10*time.Second)
	const rounds = 10
	var longest time.Duration
	for i := 0; i < rounds; i++ {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := electors[g.identity].Resign(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: resign %s: %v", i, g.identity, err)
		}
		next := l.next(t, 10*time.Second)
		if next.identity == g.identity {
			t.Fatalf("round %d: %s resigned and leads again before the others", i, g.identity)
		}
		longest = max(longest, next.at.Sub(start))
		g = next
	}
	t.Logf("%d handovers by resignation, the longest %s", rounds, longest)
	l.check(t)
}

func TestNewZooKeeperRefusesBadOptions(t *testing.T) {
	good := ZooKeeperOptions{Servers: []string{"127.0.0.1:2181"}, SessionTimeout: time.Second, Name: "gpumeter", Identity: "10.0.0.1:8080"}
	for name, mutate := range map[string]func(*ZooKeeperOptions){
		"no servers":         func(o *ZooKeeperOptions) { o.Servers = nil },
		"no session timeout": func(o *ZooKeeperOptions) { o.SessionTimeout = 0 },
		"no name":            func(o *ZooKeeperOptions) { o.Name = "" },
		"name with a slash":  func(o *ZooKeeperOptions) { o.Name = "a/b" },
		"identity sans port": func(o *ZooKeeperOptions) { o.Identity = "10.0.0.1" },
		"identity port 0":    func(o *ZooKeeperOptions) { o.Identity = "10.0.0.1:0" },
		"relative root":      func(o *ZooKeeperOptions) { o.Root = "gpumeter" },
	} {
		opts := good
		mutate(&opts)
		if e, err := NewZooKeeper(opts); err == nil {
			e.Close()
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCandidatesOrderBySequence(t *testing.T) {
	got := candidates([]string{
		"_c_0f-n_0000000012", "n_0000000003", "_c_aa-n_0000000010", "lock", "n_12",
	})
	want := []string{"n_0000000003", "_c_aa-n_0000000010", "_c_0f-n_0000000012"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("candidates = %v, want %v", got, want)
	}
}

// helperEnv makes the test binary a leader process (TestLeaderProcess).
const helperEnv = "ELECTION_TEST_LEADER_PROCESS"

// TestLeaderProcess is not a test on its own: run by testHandoverOnKill
// as a child process, it stands in the election named by helperEnv
// ("server name identity"), prints "leading TOKEN" when it leads, and
// then waits to be killed.
func TestLeaderProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		return
	}
	f := strings.Fields(spec)
	e, err := NewZooKeeper(ZooKeeperOptions{Servers: []string{f[0]}, SessionTimeout: testSessionTimeout, Name: f[1], Identity: f[2], Logger: testLogger()})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	term, err := e.Campaign(context.Background())
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("leading", term.Token)
	<-term.Done()
	fmt.Println("lost", context.Cause(term.Context()))
	os.Exit(1)
}

// testHandoverOnKill SIGKILLs a leader process: no session close reaches
// the server, which hands over when the session times out.
func testHandoverOnKill(t *testing.T, server string) {
	const name, leaderID = "kill", "127.0.0.1:9101"
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaderProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s", helperEnv, server, name, leaderID))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "leading ") {
		t.Fatalf("leader process said %q, want leading", lines.Text())
	}
	l := newLedger()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	others := map[string]*ZooKeeper{}
	for _, id := range []string{"127.0.0.1:9102", "127.0.0.1:9103"} {
		others[id] = newTestZooKeeper(t, server, name, id)
		campaignLoop(ctx, others[id], id, l)
	}
	for _, e := range others {
		awaitLeaderSeen(t, e, Leader{Identity: leaderID, Token: leaderToken(t, lines.Text())}, 5*time.Second)
	}
	l.expectNone(t, 200*time.Millisecond)

	start := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	next := l.next(t, testSessionTimeout+4*testTick+2*time.Second)
	handover := next.at.Sub(start)
	t.Logf("SIGKILLed leader: %s leads after %s (session timeout %s, tick %s)", next.identity, handover, testSessionTimeout, testTick)
	if handover > testSessionTimeout+testTick+slack {
		t.Errorf("handover took %s, want at most the session timeout and a tick, %s", handover, testSessionTimeout+testTick)
	}
	l.check(t)
}

func leaderToken(t *testing.T, line string) int64 {
	t.Helper()
	var token int64
	if _, err := fmt.Sscanf(line, "leading %d", &token); err != nil {
		t.Fatalf("leader process line %q: %v", line, err)
	}
	return token
}
