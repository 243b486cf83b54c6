package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/quota"
)

// memKeys is a key store whose keys can be revoked and whose reads can
// be made to fail, counting reads.
type memKeys struct {
	mu    sync.Mutex
	keys  map[string]auth.Key
	fail  error
	reads int
}

func (m *memKeys) Key(_ context.Context, id string) (auth.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	if m.fail != nil {
		return auth.Key{}, m.fail
	}
	k, ok := m.keys[id]
	if !ok {
		return auth.Key{}, auth.ErrUnknownKey
	}
	return k, nil
}

func (m *memKeys) readCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reads
}

type nopAudit struct{}

func (nopAudit) RecordAudit(context.Context, []auth.AuditEntry) error { return nil }

type allowAll struct{}

func (allowAll) AdmitAll(context.Context, auth.Scope, []quota.Request) (quota.Decision, error) {
	return quota.Decision{Allowed: true, Reason: "test"}, nil
}

func (allowAll) State(context.Context, auth.Scope) ([]quota.RuleState, time.Time, error) {
	return nil, time.Time{}, nil
}

// apiRig is the /v1 API over in-memory keys.
type apiRig struct {
	srv  *Server
	keys *memKeys
	reg  *prometheus.Registry
}

func newAPIRig(t *testing.T, cfg Config, api API) *apiRig {
	t.Helper()
	r := &apiRig{keys: &memKeys{keys: map[string]auth.Key{}}, reg: prometheus.NewRegistry()}
	r.srv = New(cfg, r.reg, slog.New(slog.DiscardHandler))
	api.Keys = r.keys
	if api.Audit == nil {
		api.Audit = nopAudit{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait := r.srv.MountAPI(ctx, r.reg, api)
	t.Cleanup(func() { cancel(); wait() })
	return r
}

func (r *apiRig) addKey(t *testing.T, req auth.NewKeyRequest) string {
	t.Helper()
	k, token, err := auth.NewKey(req, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	r.keys.mu.Lock()
	r.keys.keys[k.ID] = k
	r.keys.mu.Unlock()
	return token
}

// do sends a request from remote; token goes in the header unless the
// path carries it.
func (r *apiRig) do(method, path, token, body, remote string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if remote != "" {
		req.RemoteAddr = remote
	}
	rec := httptest.NewRecorder()
	r.srv.Handler().ServeHTTP(rec, req)
	return rec
}

// The key cache serves a key it has seen without waiting on the store:
// within keyCacheTTL from memory, after it while a background read
// refreshes it (so a revocation lands one read later), and while the
// store is down for at most keyCacheMaxStale.
func TestKeyCacheRefreshesInTheBackground(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	k, token, err := auth.NewKey(auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindAdmin}}, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r := newAPIRig(t, DefaultConfig(), API{Quotas: allowAll{}, Now: clock})
	keys := r.keys
	keys.keys[k.ID] = k
	admit := func() int {
		return r.do(http.MethodPost, "/v1/admission", token, `{"tenant":"acme","gpu_model":"H100-SXM5-80GB","count":1,"expected_duration":"1h"}`, "").Code
	}
	waitReads := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); keys.readCount() < n; {
			if time.Now().After(deadline) {
				t.Fatalf("store reads = %d, want %d", keys.readCount(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}

	if got := admit(); got != http.StatusOK || keys.readCount() != 1 {
		t.Fatalf("first request: %d after %d reads, want 200 after 1", got, keys.readCount())
	}
	keys.mu.Lock()
	k.RevokedAt = now
	keys.keys[k.ID] = k
	keys.mu.Unlock()
	advance(time.Second)
	if got := admit(); got != http.StatusOK || keys.readCount() != 1 {
		t.Fatalf("within the TTL: %d after %d reads, want 200 from the cache", got, keys.readCount())
	}
	advance(2 * time.Second)
	if got := admit(); got != http.StatusOK {
		t.Fatalf("past the TTL the cached key answers while it is refreshed: got %d", got)
	}
	waitReads(2)
	for deadline := time.Now().Add(5 * time.Second); admit() != http.StatusUnauthorized; {
		if time.Now().After(deadline) {
			t.Fatal("a revoked key still works after its refresh")
		}
		time.Sleep(time.Millisecond)
	}

	// A second key, then the store goes down.
	k2, token2, err := auth.NewKey(auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindAdmin}}, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	keys.mu.Lock()
	keys.keys[k2.ID] = k2
	keys.mu.Unlock()
	token = token2
	if got := admit(); got != http.StatusOK {
		t.Fatalf("second key: %d", got)
	}
	keys.mu.Lock()
	keys.fail = errors.New("clickhouse: connection refused")
	keys.mu.Unlock()
	reads := keys.readCount()
	advance(time.Minute)
	if got := admit(); got != http.StatusOK {
		t.Fatalf("store down, key seen a minute ago: %d, want 200", got)
	}
	waitReads(reads + 1) // the failed refresh ran and was not cached
	advance(keyCacheMaxStale)
	if got := admit(); got != http.StatusInternalServerError {
		t.Fatalf("store down, key older than keyCacheMaxStale: %d, want 500", got)
	}
}
