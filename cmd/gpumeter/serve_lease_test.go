package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/cmd/gpumeter/config"
	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/election/electiontest"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// The Lease timings of the serve test: client-go's defaults (15 s, 10 s,
// 2 s) scaled down, with a renew deadline of 2 s so that a leader starved
// of CPU on a loaded machine still renews.
const leaseTimings = "    lease_duration: 3s\n    renew_deadline: 2s\n    retry_period: 300ms\n"

// startLeaseReplica runs serve in process with election.backend
// kubernetes against api, the Lease client injected where the pod's
// in-cluster credentials would be; its identity is its listen address.
func startLeaseReplica(t *testing.T, api *electiontest.LeaseAPI, dsn, extraConfig string) *replica {
	t.Helper()
	r := &replica{addr: harness.FreeAddr(t), metrics: harness.FreeAddr(t)}
	cfgPath := filepath.Join(t.TempDir(), "gpumeter.yaml")
	cfg := fmt.Sprintf("election:\n  backend: kubernetes\n  identity: %s\n  kubernetes:\n    namespace: gpumeter\n%s"+
		"rollup:\n  schedule: \"@every 1s\"\n%s", r.addr, leaseTimings, extraConfig)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", cfgPath, "--clickhouse", dsn, "serve", "--plain-http", "--listen", r.addr,
		"--metrics-listen", r.metrics, "--audit-queue", t.TempDir()}
	g := &globals{stdout: io.Discard, stderr: io.Discard, cfg: config.Default(), leases: api.CoordinationV1()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- cli.Execute(ctx, newRootCmd(g), args, io.Discard) }()
	var once sync.Once
	r.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(r.stop)
	eventually(t, "serve to be ready", 30*time.Second, func() bool { code, _ := harness.HTTPGet(r.addr, "/readyz"); return code == 200 })
	return r
}

// leaseHolder is the holderIdentity of serve's Lease ("" when none).
func leaseHolder(t *testing.T, api *electiontest.LeaseAPI) string {
	t.Helper()
	lease, err := api.Lease(context.Background(), "gpumeter", "gpumeter")
	if err != nil {
		return ""
	}
	return electiontest.Holder(lease)
}

// serve's Lease path (election.backend kubernetes) against a Kubernetes
// API (client-go's fake clientset, with resourceVersion conflicts): two
// in-process replicas share one Lease. One leads at a time and alone runs
// the rollup; the follower forwards admissions to it, so a concurrency
// limit of 6 holds exactly across both; when the leader stops renewing
// (cut off the API server) it steps down and the follower leads after
// the lease duration, decides admissions itself from the rebuilt admitted
// work, and takes the rollup over; when that leader stops it resigns,
// releasing the Lease (its holder cleared), and the other leads again.
func TestServeLeaseElection(t *testing.T) {
	dsn := testDSN(t)
	code, out, stderr := gpumeter(t, "--clickhouse", dsn, "keys", "create", "--scope", "admin", "--expires", "1h")
	if code != 0 {
		t.Fatalf("keys create: exit %d\n%s", code, stderr)
	}
	token := strings.TrimSpace(out)
	quotas := "quotas:\n  refresh: 1s\n  rules:\n    - tenant: uni-astro\n      concurrent_gpus: {limit: 6}\n"
	api := electiontest.NewLeaseAPI()

	a := startLeaseReplica(t, api, dsn, quotas)
	eventually(t, "the first replica to hold the Lease and run the rollup", 10*time.Second, func() bool {
		return leaseHolder(t, api) == a.addr && a.rollups(t) >= 1
	})
	b := startLeaseReplica(t, api, dsn, quotas)
	a0 := a.rollups(t)
	time.Sleep(3500 * time.Millisecond) // over a lease duration: the leader renews
	if h := leaseHolder(t, api); h != a.addr {
		t.Fatalf("after a lease duration the Lease names %q, want the first replica %s", h, a.addr)
	}
	if a1, b1 := a.rollups(t), b.rollups(t); a1-a0 < 2 || b1 != 0 {
		t.Fatalf("over 3.5 s at @every 1s: the leader ran %d rollups, the follower %d; want at least 2 and none", a1-a0, b1)
	}

	// 12 clients at once, half on each replica, one GPU each: exactly 6 fit.
	if allowed, byLeader := admitSplit(t, a.addr, b.addr, token, 12); allowed != 6 || byLeader != 6 {
		t.Fatalf("12 concurrent admissions of 1 GPU under a limit of 6, half to the follower: %d allowed (want 6), %d of the follower's decided by the leader (want 6)", allowed, byLeader)
	}

	// The leader loses the API server: it cannot renew, steps down after
	// the renew deadline, and the follower takes the Lease once it expires.
	cut := time.Now()
	api.Cut(a.addr)
	eventually(t, "the follower to take the Lease", 10*time.Second, func() bool { return leaseHolder(t, api) == b.addr })
	t.Logf("the follower holds the Lease %v after the leader was cut off", time.Since(cut).Round(time.Millisecond))
	// decidesItself waits until addr decides admissions itself (no
	// Gpumeter-Decided-By), never admitting a 7th GPU under the limit of
	// 6: a new leader rebuilds the admitted work before it decides.
	decidesItself := func(what, addr, overAdmitted string) {
		t.Helper()
		eventually(t, what, 5*time.Second, func() bool {
			status, ok, by := admit(t, addr, token, 1)
			if status == http.StatusOK && by == "" && ok {
				t.Errorf("%s", overAdmitted)
			}
			return status == http.StatusOK && by == ""
		})
	}
	decidesItself("the new leader to decide itself", b.addr, "the new leader admitted a 7th GPU under a limit of 6: it did not rebuild the admitted work")
	eventually(t, "the old leader to forward to the new one", 5*time.Second, func() bool {
		status, ok, by := admit(t, a.addr, token, 1)
		if status == http.StatusOK && ok {
			t.Errorf("a 7th GPU admitted through the old leader")
		}
		return status == http.StatusOK && by == b.addr
	})
	eventually(t, "the new leader to run the rollup", 5*time.Second, func() bool { return b.rollups(t) >= 1 })
	a2, b2 := a.rollups(t), b.rollups(t)
	time.Sleep(2 * time.Second)
	if a3, b3 := a.rollups(t), b.rollups(t); a3 != a2 || b3-b2 < 1 {
		t.Fatalf("over 2 s after the handover: the old leader ran %d rollups (want none), the new one %d (want some)", a3-a2, b3-b2)
	}

	// The old leader reaches the API server again; the new one stops and
	// resigns: the Lease is released and taken at the next retry.
	api.Heal(a.addr)
	stopped := time.Now()
	go b.stop() // the Lease is watched while serve winds down after resigning
	eventually(t, "the other replica to lead again", 10*time.Second, func() bool { return leaseHolder(t, api) == a.addr })
	t.Logf("the other replica holds the Lease %v after the leader began to stop", time.Since(stopped).Round(time.Millisecond))
	decidesItself("the replica leading again to decide itself", a.addr, "admitted a 7th GPU under a limit of 6 after the second handover")
	// One holder at a time, in this order; "" is the resignation's release,
	// which lets the other take the Lease at its next retry rather than
	// after a lease duration.
	if got, want := api.Holders(), []string{a.addr, b.addr, "", a.addr}; !slices.Equal(got, want) {
		t.Errorf("the Lease's holders over the run: %q, want %q", got, want)
	}
}

// serve with an election refuses a listener that requires a client
// certificate of every client (a client CA without client_auth
// verify_if_given) when the followers have none to forward with. Exit 2
// before anything is dialled; verify_if_given or a forward certificate
// gets past the check.
func TestServeElectionRefusesRequiredClientCerts(t *testing.T) {
	down := "clickhouse://127.0.0.1:1/none"
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	election := "election:\n  backend: kubernetes\n  identity: 10.0.0.1:8443\n  kubernetes: {namespace: gpumeter}\n"
	files := "cert_file: " + missing + ", key_file: " + missing + ", client_ca_file: " + missing
	for _, c := range []struct {
		name, tls string
		refused   bool
	}{
		{"a client CA, certificates required by default", "{" + files + "}", true},
		{"certificates required by name", "{" + files + ", client_auth: require}", true},
		{"certificates checked when given", "{" + files + ", client_auth: verify_if_given}", false},
		{"certificates required, the followers given one", "{" + files + "}", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			election := election
			if c.name == "certificates required, the followers given one" {
				election += "  forward: {cert_file: " + missing + ", key_file: " + missing + "}\n"
			}
			cfg := writeTemp(t, "ha.yaml", election+"server:\n  tls: "+c.tls+"\n")
			code, _, stderr := gpumeter(t, "--config", cfg, "--clickhouse", down, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "")
			refusal := strings.Contains(stderr, "give the followers one (election.forward.cert_file and key_file) or set server.tls.client_auth: verify_if_given")
			if code != 2 || refusal != c.refused {
				t.Fatalf("exit %d, refusal named %v (want exit 2, %v):\n%s", code, refusal, c.refused, stderr)
			}
		})
	}
}

// The collector and migrate load the same file without an identity; serve
// cannot stand for election without one, and says which field.
func TestServeElectionRequiresIdentity(t *testing.T) {
	down := "clickhouse://127.0.0.1:1/none"
	cfg := writeTemp(t, "ha.yaml", "election:\n  backend: kubernetes\n  kubernetes: {namespace: gpumeter}\n")
	code, _, stderr := gpumeter(t, "--config", cfg, "--clickhouse", down, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--plain-http")
	if code != 2 || !strings.Contains(stderr, "election.identity: required") {
		t.Fatalf("serve without an identity: exit %d (want 2 naming election.identity):\n%s", code, stderr)
	}
	code, _, stderr = gpumeter(t, "--config", cfg, "--clickhouse", down, "migrate")
	if strings.Contains(stderr, "election.identity") {
		t.Fatalf("migrate refused the file for the election's identity: exit %d\n%s", code, stderr)
	}
}
