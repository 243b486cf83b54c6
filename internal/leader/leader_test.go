package leader

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/election"
	"github.com/gpumeter/gpumeter/internal/jobs"
	"github.com/gpumeter/gpumeter/internal/server/tlstest"
)

// fakeElector reports a fixed leader; Campaign hands out terms from a
// channel.
type fakeElector struct {
	leader election.Leader
	err    error
	terms  chan *election.Term
	closed atomic.Bool
}

func (f *fakeElector) Campaign(ctx context.Context) (*election.Term, error) {
	select {
	case t := <-f.terms:
		return t, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
func (f *fakeElector) Leader(context.Context) (election.Leader, error) { return f.leader, f.err }
func (f *fakeElector) Resign(context.Context) error                    { return nil }
func (f *fakeElector) Close() error                                    { f.closed.Store(true); return nil }

// A follower forwards to the leader the engine names, with the caller's
// Authorization and its own mark; it never forwards a forwarded request
// again, never to itself, and says ErrNoLeader when nobody leads.
func TestForwarder(t *testing.T) {
	var got http.Header
	var gotBody, gotPath string
	leaderSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, gotPath = r.Header.Clone(), r.URL.Path
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"allowed":true}`)
	}))
	defer leaderSrv.Close()
	leaderID := strings.TrimPrefix(leaderSrv.URL, "http://")
	e := &fakeElector{leader: election.Leader{Identity: leaderID, Token: 7}}
	gate := NewGate()
	f, err := NewForwarder(gate, e, "127.0.0.1:1", false, ForwardTLS{})
	if err != nil {
		t.Fatal(err)
	}
	f.leaderTTL = 0 // every call asks the elector, which this test changes between calls
	h := http.Header{"Authorization": {"Bearer gmk_x"}, "Content-Type": {"application/json"}}
	out, local, err := f.Forward(context.Background(), "/v1/admission", h, []byte(`{"tenant":"a"}`))
	if err != nil || local || out.Status != 200 || string(out.Body) != `{"allowed":true}` || out.Leader != leaderID {
		t.Fatalf("forward: %+v local %v err %v", out, local, err)
	}
	if got.Get("Authorization") != "Bearer gmk_x" || got.Get(ForwardedHeader) != "127.0.0.1:1" || gotPath != "/v1/admission" || gotBody != `{"tenant":"a"}` {
		t.Errorf("the leader got %s %q with headers %v", gotPath, gotBody, got)
	}
	if _, _, err := f.Forward(context.Background(), "/v1/admission", http.Header{ForwardedHeader: {"10.0.0.9:1"}}, nil); !errors.Is(err, ErrNoLeader) {
		t.Errorf("a forwarded request on a follower: %v, want ErrNoLeader (no second hop)", err)
	}
	e.leader.Identity = "127.0.0.1:1"
	if _, _, err := f.Forward(context.Background(), "/v1/admission", h, nil); !errors.Is(err, ErrNoLeader) {
		t.Errorf("the engine names this replica before its term began: %v, want ErrNoLeader", err)
	}
	e.err = election.ErrNoLeader
	if _, _, err := f.Forward(context.Background(), "/v1/admission", h, nil); !errors.Is(err, ErrNoLeader) {
		t.Errorf("no leader: %v, want ErrNoLeader", err)
	}
	e.err = nil
	leaderSrv.Close()
	e.leader.Identity = leaderID
	if _, _, err := f.Forward(context.Background(), "/v1/admission", h, nil); !errors.Is(err, ErrNoLeader) {
		t.Errorf("the leader unreachable: %v, want ErrNoLeader", err)
	}
	gate.set(context.Background(), 1)
	if _, local, err := f.Forward(context.Background(), "/v1/admission", http.Header{ForwardedHeader: {"x:1"}}, nil); !local || err != nil {
		t.Errorf("leading: local %v, %v; want local", local, err)
	}
}

// A read goes to the leader as it came: GET, the path and the query
// string, the caller's Authorization and the follower's mark, no body and
// no Content-Type; the same guards hold as for an admission (no second
// hop, never to itself, ErrNoLeader with nobody or an unreachable leader,
// local while leading), and an answer over the size cap is refused, not
// relayed cut.
func TestForwarderForwardsReads(t *testing.T) {
	var got *http.Request
	var gotBody string
	answer := `{"as_of":"","quotas":[]}`
	leaderSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	}))
	defer leaderSrv.Close()
	leaderID := strings.TrimPrefix(leaderSrv.URL, "http://")
	e := &fakeElector{leader: election.Leader{Identity: leaderID, Token: 3}}
	gate := NewGate()
	f, err := NewForwarder(gate, e, "127.0.0.1:1", false, ForwardTLS{})
	if err != nil {
		t.Fatal(err)
	}
	f.leaderTTL = 0
	h := http.Header{"Authorization": {"Bearer gmk_x"}, "Content-Type": {"application/json"}}
	out, local, err := f.ForwardGet(context.Background(), "/v1/quotas", "access_token=gmp_y&x=%2F", h)
	if err != nil || local || out.Status != 200 || string(out.Body) != answer || out.ContentType != "application/json" || out.Leader != leaderID {
		t.Fatalf("forward a read: %+v local %v err %v", out, local, err)
	}
	if got.Method != http.MethodGet || got.URL.Path != "/v1/quotas" || got.URL.RawQuery != "access_token=gmp_y&x=%2F" || gotBody != "" {
		t.Errorf("the leader got %s %s?%s with body %q; want GET /v1/quotas?access_token=gmp_y&x=%%2F, no body", got.Method, got.URL.Path, got.URL.RawQuery, gotBody)
	}
	if got.Header.Get("Authorization") != "Bearer gmk_x" || got.Header.Get(ForwardedHeader) != "127.0.0.1:1" || got.Header.Get("Content-Type") != "" {
		t.Errorf("the leader got headers %v; want the caller's Authorization, the mark, no Content-Type", got.Header)
	}
	if _, _, err := f.ForwardGet(context.Background(), "/v1/quotas", "", nil); err != nil || got.URL.RawQuery != "" || got.RequestURI != "/v1/quotas" {
		t.Errorf("a read without a query: %v, the leader got %q", err, got.RequestURI)
	}

	answer = strings.Repeat("x", maxForwardedResponse+1)
	if _, _, err := f.ForwardGet(context.Background(), "/v1/quotas", "", h); !errors.Is(err, ErrNoLeader) || !strings.Contains(err.Error(), "over") {
		t.Errorf("an answer over %d bytes: %v, want ErrNoLeader (not relayed cut)", maxForwardedResponse, err)
	}
	answer = "{}"
	if _, _, err := f.ForwardGet(context.Background(), "/v1/quotas", "", http.Header{ForwardedHeader: {"10.0.0.9:1"}}); !errors.Is(err, ErrNoLeader) {
		t.Errorf("a forwarded read on a follower: %v, want ErrNoLeader (no second hop)", err)
	}
	e.leader.Identity = "127.0.0.1:1"
	if _, _, err := f.ForwardGet(context.Background(), "/v1/quotas", "", h); !errors.Is(err, ErrNoLeader) {
		t.Errorf("the engine names this replica: %v, want ErrNoLeader", err)
	}
	e.leader.Identity, e.err = leaderID, election.ErrNoLeader
	if _, _, err := f.ForwardGet(context.Background(), "/v1/quotas", "", h); !errors.Is(err, ErrNoLeader) {
		t.Errorf("no leader: %v, want ErrNoLeader", err)
	}
	e.err = nil
	leaderSrv.Close()
	if _, _, err := f.ForwardGet(context.Background(), "/v1/quotas", "", h); !errors.Is(err, ErrNoLeader) {
		t.Errorf("the leader down: %v, want ErrNoLeader", err)
	}
	gate.set(context.Background(), 1)
	if _, local, err := f.ForwardGet(context.Background(), "/v1/quotas", "", h); !local || err != nil {
		t.Errorf("leading: local %v, %v; want local", local, err)
	}
}

// A follower forwards to the leader it last read for leaderTTL, without
// asking the engine again, and asks again at once when that leader fails
// it or answers 503.
func TestForwarderCachesTheLeader(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
	defer srv.Close()
	e := &countingElector{fakeElector: fakeElector{leader: election.Leader{Identity: strings.TrimPrefix(srv.URL, "http://")}}}
	f, err := NewForwarder(NewGate(), e, "127.0.0.1:1", false, ForwardTLS{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	f.now = func() time.Time { return now }
	forward := func() int {
		out, _, err := f.Forward(context.Background(), "/v1/admission", http.Header{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out.Status
	}
	for range 3 {
		forward()
	}
	if e.calls != 1 {
		t.Errorf("three forwards within %s asked the elector %d times, want once", leaderTTL, e.calls)
	}
	now = now.Add(leaderTTL)
	forward()
	if e.calls != 2 {
		t.Errorf("after %s the elector was asked %d times in all, want twice", leaderTTL, e.calls)
	}
	status = http.StatusServiceUnavailable
	if got := forward(); got != http.StatusServiceUnavailable {
		t.Fatalf("status %d", got)
	}
	status = http.StatusOK
	forward()
	if e.calls != 3 {
		t.Errorf("after the leader answered 503 the elector was asked %d times in all, want 3 (asked again at once)", e.calls)
	}
}

// countingElector counts the leader lookups.
type countingElector struct {
	fakeElector
	calls int
}

func (c *countingElector) Leader(ctx context.Context) (election.Leader, error) {
	c.calls++
	return c.fakeElector.Leader(ctx)
}

// Campaign opens the gate for each term and closes it when the term
// ends; WhileLeading's work runs during each term and is cancelled with
// it; on shutdown the elector is closed.
func TestCampaignGatesWork(t *testing.T) {
	e := &fakeElector{terms: make(chan *election.Term)}
	gate := NewGate()
	ctx, cancel := context.WithCancel(context.Background())
	var starts, stops atomic.Int32
	var wg sync.WaitGroup
	wg.Go(func() {
		Campaign(ctx, e, gate, func(context.Context) error { starts.Add(1); return nil }, func(context.Context) { stops.Add(1) }, slog.New(slog.DiscardHandler))
	})
	var runs, cancelled atomic.Int32
	wg.Go(func() {
		gate.WhileLeading(ctx, func(ctx context.Context) { runs.Add(1); <-ctx.Done(); cancelled.Add(1) })
	})
	if gate.Leading() {
		t.Fatal("leading before any term")
	}
	if _, _, ok := gate.Within(ctx); ok {
		t.Fatal("Within while not leading")
	}
	for i := range 2 {
		term, end := testTerm()
		e.terms <- term
		waitFor(t, "the gate to open", func() bool { return gate.Leading() && runs.Load() == int32(i+1) })
		if starts.Load() != int32(i+1) {
			t.Errorf("term %d opened after %d start-ups", i+1, starts.Load())
		}
		jobCtx, done, ok := gate.Within(context.Background())
		if !ok {
			t.Fatal("Within while leading")
		}
		end()
		waitFor(t, "the term's work to stop", func() bool { return !gate.Leading() && cancelled.Load() == int32(i+1) && jobCtx.Err() != nil })
		done()
	}
	cancel()
	wg.Wait()
	if !e.closed.Load() || stops.Load() != 1 {
		t.Errorf("on shutdown: elector closed %v, stop ran %d times; want closed, once", e.closed.Load(), stops.Load())
	}
}

func TestSoloAlwaysLeads(t *testing.T) {
	g := Solo()
	ctx, cancel, ok := g.Within(context.Background())
	if !g.Leading() || !ok || ctx.Err() != nil {
		t.Fatal("a single replica does not lead")
	}
	cancel()
}

func testTerm() (*election.Term, func()) {
	term, end := election.NewTerm(election.Leader{Identity: "127.0.0.1:1", Token: 1})
	return term, func() { end(election.ErrLeadershipLost) }
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Over TLS the follower forwards over HTTPS and checks the leader's
// certificate against the configured CA and name.
func TestForwarderOverTLS(t *testing.T) {
	leaderSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"allowed":false}`)
	}))
	defer leaderSrv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaderSrv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &fakeElector{leader: election.Leader{Identity: strings.TrimPrefix(leaderSrv.URL, "https://"), Token: 1}}
	h := http.Header{"Authorization": {"Bearer gmk_x"}}
	for _, c := range []struct {
		name string
		tls  ForwardTLS
		ok   bool
	}{
		{"the leader's CA, its IP", ForwardTLS{CAFile: caFile}, true},
		{"the leader's CA, a name its certificate carries", ForwardTLS{CAFile: caFile, ServerName: "example.com"}, true},
		{"the leader's CA, a name it does not carry", ForwardTLS{CAFile: caFile, ServerName: "gpumeter.other.svc"}, false},
		{"the system roots", ForwardTLS{}, false},
	} {
		f, err := NewForwarder(NewGate(), e, "127.0.0.1:1", true, c.tls)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := f.Forward(context.Background(), "/v1/admission", h, []byte(`{}`))
		if c.ok && (err != nil || out.Status != 200 || string(out.Body) != `{"allowed":false}`) {
			t.Errorf("%s: %+v %v, want the leader's answer", c.name, out, err)
		}
		if !c.ok && !errors.Is(err, ErrNoLeader) {
			t.Errorf("%s: %v, want ErrNoLeader (certificate refused)", c.name, err)
		}
	}
	if _, err := NewForwarder(NewGate(), e, "127.0.0.1:1", true, ForwardTLS{CAFile: filepath.Join(t.TempDir(), "missing.pem")}); err == nil {
		t.Error("a missing CA file was accepted")
	}
}

// A leader whose listener requires client certificates takes a
// follower's forward only with the configured certificate, re-read when
// its files change.
func TestForwarderPresentsClientCertificate(t *testing.T) {
	ca := tlstest.NewCA(t, "gpumeter test CA")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	ca.WriteCA(t, caFile)
	leaderSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"forwarded_by":"`+r.TLS.PeerCertificates[0].Subject.CommonName+`"}`)
	}))
	serving := ca.Server(t, "leader")
	leaderCert, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaderSrv.TLS = &tls.Config{MinVersion: tls.VersionTLS12, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert,
		Certificates: []tls.Certificate{leaderCert}}
	leaderSrv.StartTLS()
	defer leaderSrv.Close()
	e := &fakeElector{leader: election.Leader{Identity: strings.TrimPrefix(leaderSrv.URL, "https://"), Token: 1}}
	h := http.Header{"Authorization": {"Bearer gmk_x"}}

	without, err := NewForwarder(NewGate(), e, "127.0.0.1:1", true, ForwardTLS{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := without.Forward(context.Background(), "/v1/admission", h, []byte(`{}`)); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("no client certificate: %v, want ErrNoLeader (refused by the leader)", err)
	}
	certFile, keyFile := ca.Client(t, "follower-1").Write(t, dir, "forward")
	with, err := NewForwarder(NewGate(), e, "127.0.0.1:1", true, ForwardTLS{CAFile: caFile, CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := with.Forward(context.Background(), "/v1/admission", h, []byte(`{}`))
	if err != nil || out.Status != 200 || string(out.Body) != `{"forwarded_by":"follower-1"}` {
		t.Fatalf("with the client certificate: %+v %v", out, err)
	}
	if _, err := NewForwarder(NewGate(), e, "127.0.0.1:1", true, ForwardTLS{CAFile: caFile, CertFile: certFile, KeyFile: caFile}); err == nil ||
		!strings.Contains(err.Error(), "election.forward") {
		t.Errorf("a certificate with the wrong key: %v, want an error naming election.forward", err)
	}
}

// A job runs only while the gate is open, ends with the term, and logs
// each run with the term's token; a follower's turn is skipped.
func TestJobRunsOnlyWhileLeading(t *testing.T) {
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	g := NewGate()
	runs := 0
	job := g.Job("rollup", log, func(ctx context.Context) error { runs++; <-ctx.Done(); return context.Cause(ctx) })
	if err := job(context.Background()); !errors.Is(err, jobs.ErrSkipped) || runs != 0 {
		t.Fatalf("a turn while not leading: %v after %d runs, want jobs.ErrSkipped and none", err, runs)
	}
	term, end := election.NewTerm(election.Leader{Identity: "127.0.0.1:1", Token: 42})
	g.set(term.Context(), term.Token)
	time.AfterFunc(10*time.Millisecond, func() { end(election.ErrLeadershipLost) })
	if err := job(context.Background()); !errors.Is(err, election.ErrLeadershipLost) || runs != 1 {
		t.Fatalf("a turn ended by the term: %v after %d runs, want ErrLeadershipLost and 1", err, runs)
	}
	for _, want := range []string{`msg="leader job started" job=rollup token=42`, `msg="leader job done" job=rollup token=42`} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("the log has no %q:\n%s", want, logged.String())
		}
	}
}
