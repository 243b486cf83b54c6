package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/leader"
	"github.com/gpumeter/gpumeter/internal/quota"
)

// fakeForwarder stands for leader.Forwarder: local, a leader's answer, or
// no leader, recording what it was asked to send.
type fakeForwarder struct {
	local  bool
	err    error
	answer leader.Forwarded
	paths  []string
	bodies []string
	reads  []string // path?query of each read
}

func (f *fakeForwarder) Forward(_ context.Context, path string, _ http.Header, body []byte) (leader.Forwarded, bool, error) {
	f.paths, f.bodies = append(f.paths, path), append(f.bodies, string(body))
	return f.answer, f.local, f.err
}

func (f *fakeForwarder) ForwardGet(_ context.Context, path, rawQuery string, _ http.Header) (leader.Forwarded, bool, error) {
	f.reads = append(f.reads, path+"?"+rawQuery)
	return f.answer, f.local, f.err
}

type countingAdmit struct {
	allowAll
	calls int
}

func (c *countingAdmit) AdmitAll(ctx context.Context, s auth.Scope, rs []quota.Request) (quota.Decision, error) {
	c.calls++
	return c.allowAll.AdmitAll(ctx, s, rs)
}

// Both admission routes: a follower relays the leader's answer as it is
// and decides nothing itself; with no leader it answers 503 with a
// Retry-After (the webhook's failurePolicy then applies); while leading
// the route decides, from the body the forwarder read.
func TestAdmissionRoutesForwardToTheLeader(t *testing.T) {
	body := `{"tenant":"acme","gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h"}`
	for _, path := range []string{"/v1/admission", "/v1/admission/k8s"} {
		fwd := &fakeForwarder{answer: leader.Forwarded{Status: 200, ContentType: "application/json", Body: []byte(`{"from":"leader"}`), Leader: "10.0.0.1:8443"}}
		quotas := &countingAdmit{}
		r := newAPIRig(t, DefaultConfig(), API{Quotas: quotas, Forward: fwd})
		token := r.addKey(t, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindAdmin}})

		rec := r.do(http.MethodPost, path, token, body, "")
		if rec.Code != 200 || rec.Body.String() != `{"from":"leader"}` || rec.Header().Get("Gpumeter-Decided-By") != "10.0.0.1:8443" {
			t.Errorf("%s on a follower: %d %s (decided by %q), want the leader's answer", path, rec.Code, rec.Body, rec.Header().Get("Gpumeter-Decided-By"))
		}
		if len(fwd.paths) != 1 || fwd.paths[0] != path || fwd.bodies[0] != body || quotas.calls != 0 {
			t.Errorf("%s: forwarded %v %q, decided locally %d times; want the path and body forwarded once, nothing decided here", path, fwd.paths, fwd.bodies, quotas.calls)
		}

		fwd.err = fmt.Errorf("%w: nobody", leader.ErrNoLeader)
		rec = r.do(http.MethodPost, path, token, body, "")
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "no_leader") {
			t.Errorf("%s with no leader: %d %s (Retry-After %q), want 503 no_leader", path, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
		}

		fwd.err, fwd.local = nil, true
		if path == "/v1/admission" {
			rec = r.do(http.MethodPost, path, token, body, "")
			if rec.Code != 200 || quotas.calls != 1 || !strings.Contains(rec.Body.String(), `"allowed":true`) {
				t.Errorf("%s on the leader: %d %s, decided %d times; want decided here once", path, rec.Code, rec.Body, quotas.calls)
			}
		}
		// An unauthenticated request is refused before anything is forwarded.
		before := len(fwd.paths)
		if rec = r.do(http.MethodPost, path, "", body, ""); rec.Code != http.StatusUnauthorized || len(fwd.paths) != before {
			t.Errorf("%s without a key: %d, forwarded %d; want 401, nothing forwarded", path, rec.Code, len(fwd.paths)-before)
		}
	}
}

// countingState counts the quota state reads answered here.
type countingState struct {
	allowAll
	reads int
}

func (c *countingState) State(ctx context.Context, s auth.Scope) ([]quota.RuleState, time.Time, error) {
	c.reads++
	return c.allowAll.State(ctx, s)
}

// GET /v1/quotas on a follower relays the leader's 200 and names the
// leader; with no leader, a leader down or any other answer from it, the
// follower answers from its own snapshot and says so; a read forwarded to
// a replica that does not lead gets 503 (its sender answers itself);
// while leading the replica answers itself with no mark.
func TestQuotasReadForwardsToTheLeader(t *testing.T) {
	fwd := &fakeForwarder{answer: leader.Forwarded{Status: 200, ContentType: "application/json", Body: []byte(`{"from":"leader"}`), Leader: "10.0.0.1:8443"}}
	quotas := &countingState{}
	r := newAPIRig(t, DefaultConfig(), API{Quotas: quotas, Forward: fwd})
	token := r.addKey(t, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindAdmin}})
	local := `{"as_of":"","quotas":[]}`

	rec := r.do(http.MethodGet, "/v1/quotas?x=1", token, "", "")
	if rec.Code != 200 || rec.Body.String() != `{"from":"leader"}` || rec.Header().Get(AnsweredByHeader) != "10.0.0.1:8443" || quotas.reads != 0 {
		t.Errorf("on a follower: %d %s (answered by %q), read here %d times; want the leader's answer, named", rec.Code, rec.Body, rec.Header().Get(AnsweredByHeader), quotas.reads)
	}
	if len(fwd.reads) != 1 || fwd.reads[0] != "/v1/quotas?x=1" {
		t.Errorf("forwarded %q; want the path and query once", fwd.reads)
	}

	for _, c := range []struct {
		name   string
		err    error
		status int
	}{
		{"no leader", fmt.Errorf("%w: nobody", leader.ErrNoLeader), 0},
		{"the forward failing otherwise", errors.New("boom"), 0},
		{"the leader over its rate limit", nil, http.StatusTooManyRequests},
		{"the leader failing", nil, http.StatusInternalServerError},
	} {
		fwd.err, fwd.answer.Status = c.err, c.status
		before := quotas.reads
		rec = r.do(http.MethodGet, "/v1/quotas", token, "", "")
		if rec.Code != 200 || rec.Body.String() != local || rec.Header().Get(AnsweredByHeader) != AnsweredLocally || quotas.reads != before+1 {
			t.Errorf("%s: %d %s (answered by %q); want this replica's own answer, marked %q", c.name, rec.Code, rec.Body, rec.Header().Get(AnsweredByHeader), AnsweredLocally)
		}
	}

	// Forwarded here by another replica, this one not leading: 503.
	fwd.err = fmt.Errorf("%w (forwarded)", leader.ErrNoLeader)
	req := httptest.NewRequest(http.MethodGet, "/v1/quotas", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(leader.ForwardedHeader, "10.0.0.2:8443")
	rec = httptest.NewRecorder()
	r.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "no_leader") || rec.Header().Get(AnsweredByHeader) != "" {
		t.Errorf("a forwarded read on a follower: %d %s; want 503 no_leader", rec.Code, rec.Body)
	}

	fwd.err, fwd.local = nil, true
	before := quotas.reads
	if rec = r.do(http.MethodGet, "/v1/quotas", token, "", ""); rec.Code != 200 || rec.Body.String() != local || rec.Header().Get(AnsweredByHeader) != "" || quotas.reads != before+1 {
		t.Errorf("on the leader: %d %s (answered by %q); want its own answer, unmarked", rec.Code, rec.Body, rec.Header().Get(AnsweredByHeader))
	}
	reads := len(fwd.reads)
	if rec = r.do(http.MethodGet, "/v1/quotas", "", "", ""); rec.Code != http.StatusUnauthorized || len(fwd.reads) != reads {
		t.Errorf("without a key: %d, forwarded %d; want 401, nothing forwarded", rec.Code, len(fwd.reads)-reads)
	}
}
