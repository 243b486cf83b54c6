package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

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
}

func (f *fakeForwarder) Forward(_ context.Context, path string, _ http.Header, body []byte) (leader.Forwarded, bool, error) {
	f.paths, f.bodies = append(f.paths, path), append(f.bodies, string(body))
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
