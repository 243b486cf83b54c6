package election

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpumeter/gpumeter/internal/election/electiontest"
)

// Lease timings of the tests: client-go's defaults (15 s, 10 s, 2 s)
// scaled down; the lease is stored in whole seconds.
const (
	testLeaseDuration = 2 * time.Second
	testRenewDeadline = time.Second
	testRetryPeriod   = 200 * time.Millisecond
)

// fakeAPI is the API server of the Lease tests (electiontest.LeaseAPI).
type fakeAPI = electiontest.LeaseAPI

func newFakeAPI() *fakeAPI { return electiontest.NewLeaseAPI() }

func leaseOf(t *testing.T, api *fakeAPI) *coordinationv1.Lease {
	t.Helper()
	lease, err := api.Lease(context.Background(), "gpumeter", "gpumeter")
	if err != nil {
		t.Fatalf("read the lease: %v", err)
	}
	return lease
}
func leaseCandidates(t *testing.T, api *fakeAPI, n int) (map[string]*Kubernetes, *ledger) {
	t.Helper()
	l := newLedger()
	electors := map[string]*Kubernetes{}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("10.0.0.%d:8443", i+1)
		e, err := NewKubernetes(KubernetesOptions{
			Client: api.CoordinationV1(), Namespace: "gpumeter", Name: "gpumeter", Identity: id,
			LeaseDuration: testLeaseDuration, RenewDeadline: testRenewDeadline, RetryPeriod: testRetryPeriod,
			Logger: testLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		electors[id] = e
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for id, e := range electors {
		campaignLoop(ctx, e, id, l)
	}
	return electors, l
}

func TestLeaseOneLeaderAmongThree(t *testing.T) {
	api := newFakeAPI()
	electors, l := leaseCandidates(t, api, 3)
	first := l.next(t, 5*time.Second)
	// Longer than a lease: the leader renews, nobody else takes over.
	l.expectNone(t, testLeaseDuration+testRetryPeriod*3)
	if n := l.held(); n != 1 {
		t.Fatalf("%d terms held, want 1", n)
	}
	if got := holderOf(leaseOf(t, api)); got != first.identity {
		t.Fatalf("lease holderIdentity %q, want the leader %s", got, first.identity)
	}
	for _, e := range electors {
		awaitLeaderSeen(t, e, first.term.Leader, 2*time.Second)
	}
	l.check(t)
}

// TestLeaseHandoverWhenLeaderStopsRenewing cuts the leader off the API
// server: it must step down after the renew deadline, before the others
// may take the lease after a whole lease duration.
func TestLeaseHandoverWhenLeaderStopsRenewing(t *testing.T) {
	api := newFakeAPI()
	electors, l := leaseCandidates(t, api, 3)
	first := l.next(t, 5*time.Second)
	start := time.Now()
	api.Cut(first.identity)
	<-first.term.Done()
	stepDown := time.Since(start)
	if !errors.Is(context.Cause(first.term.Context()), ErrLeadershipLost) {
		t.Fatalf("the cut-off leader's term ended with %v, want ErrLeadershipLost", context.Cause(first.term.Context()))
	}
	// Candidates retry every RetryPeriod to 2.2 times it (client-go jitters by 1.2).
	bound := testLeaseDuration + testRetryPeriod*22/10
	second := l.next(t, bound+2*time.Second)
	handover := second.at.Sub(start)
	t.Logf("cut-off leader stepped down after %s; %s leads after %s (lease %s, renew deadline %s, retry %s)",
		stepDown, second.identity, handover, testLeaseDuration, testRenewDeadline, testRetryPeriod)
	if stepDown > testRenewDeadline+testRetryPeriod+slack {
		t.Errorf("stepped down after %s, want about the renew deadline %s", stepDown, testRenewDeadline)
	}
	if handover > bound+slack {
		t.Errorf("handover took %s, want at most about %s", handover, bound)
	}
	if second.identity == first.identity {
		t.Fatal("the cut-off replica leads again")
	}
	lease := leaseOf(t, api)
	if holderOf(lease) != second.identity {
		t.Fatalf("lease holderIdentity %q, want %s", holderOf(lease), second.identity)
	}
	for id, e := range electors {
		if id != first.identity {
			awaitLeaderSeen(t, e, second.term.Leader, 2*time.Second)
		}
	}
	l.check(t)
}

func TestLeaseHandoverOnResign(t *testing.T) {
	api := newFakeAPI()
	electors, l := leaseCandidates(t, api, 3)
	g := l.next(t, 5*time.Second)
	const rounds = 4
	var longest time.Duration
	for i := 0; i < rounds; i++ {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := electors[g.identity].Resign(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: resign: %v", i, err)
		}
		// Released, the lease is free at the others' next retry, not
		// after a lease duration.
		next := l.next(t, testLeaseDuration)
		if next.identity == g.identity {
			t.Fatalf("round %d: %s resigned and leads again", i, g.identity)
		}
		longest = max(longest, next.at.Sub(start))
		if got := holderOf(leaseOf(t, api)); got != next.identity {
			t.Fatalf("round %d: lease holderIdentity %q, want %s", i, got, next.identity)
		}
		g = next
	}
	t.Logf("%d handovers by resignation, the longest %s", rounds, longest)
	l.check(t)
}

func TestNewKubernetesRefusesBadOptions(t *testing.T) {
	good := KubernetesOptions{Client: fake.NewClientset().CoordinationV1(), Namespace: "gpumeter", Name: "gpumeter", Identity: "10.0.0.1:8443",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	if _, err := NewKubernetes(good); err != nil {
		t.Fatalf("client-go's default timings refused: %v", err)
	}
	for name, mutate := range map[string]func(*KubernetesOptions){
		"no client":                 func(o *KubernetesOptions) { o.Client = nil },
		"no namespace":              func(o *KubernetesOptions) { o.Namespace = "" },
		"upper-case name":           func(o *KubernetesOptions) { o.Name = "GPUmeter" },
		"identity sans port":        func(o *KubernetesOptions) { o.Identity = "pod-0" },
		"sub-second lease":          func(o *KubernetesOptions) { o.LeaseDuration = 1500 * time.Millisecond },
		"renew not under the lease": func(o *KubernetesOptions) { o.RenewDeadline = 15 * time.Second },
		"retry too close to renew":  func(o *KubernetesOptions) { o.RetryPeriod = 9 * time.Second },
	} {
		opts := good
		mutate(&opts)
		if _, err := NewKubernetes(opts); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A closed leader releases the Lease: with nobody else standing, the
// others read no leader instead of a dead one's address.
func TestLeaseNoLeaderAfterClose(t *testing.T) {
	api := newFakeAPI()
	electors, l := leaseCandidates(t, api, 1)
	first := l.next(t, 5*time.Second)
	reader, err := NewKubernetes(KubernetesOptions{
		Client: api.CoordinationV1(), Namespace: "gpumeter", Name: "gpumeter", Identity: "10.0.0.9:8443",
		LeaseDuration: testLeaseDuration, RenewDeadline: testRenewDeadline, RetryPeriod: testRetryPeriod,
	})
	if err != nil {
		t.Fatal(err)
	}
	awaitLeaderSeen(t, reader, first.term.Leader, time.Second)
	if err := electors[first.identity].Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Leader(context.Background()); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader after the only candidate closed: %v, want ErrNoLeader", err)
	}
}
