package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/insights"
)

func TestSignAndVerify(t *testing.T) {
	secret := []byte("a-secret-of-some-length")
	at := time.Unix(1_796_000_000, 0)
	body := []byte(`{"id":"evt_1"}`)
	h := Sign(secret, at, body)
	if !strings.HasPrefix(h, "t=1796000000,v1=") {
		t.Fatalf("header %q", h)
	}
	if err := Verify(secret, h, body, at.Add(time.Minute), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		secret []byte
		header string
		body   string
		now    time.Time
		want   error
	}{
		"tampered body": {secret, h, `{"id":"evt_2"}`, at, ErrBadSignature},
		"other secret":  {[]byte("another-secret-xxxxx"), h, string(body), at, ErrBadSignature},
		"no v1":         {secret, "t=1796000000", string(body), at, ErrBadSignature},
		"garbage":       {secret, "hello", string(body), at, ErrBadSignature},
		"replayed late": {secret, h, string(body), at.Add(time.Hour), ErrStale},
	} {
		if err := Verify(c.secret, c.header, []byte(c.body), c.now, 5*time.Minute); !errors.Is(err, c.want) || !fault.IsValidation(err) {
			t.Errorf("%s: %v, want %v, a validation error", name, err, c.want)
		}
	}
}

type memRecorder struct {
	mu       sync.Mutex
	attempts []Attempt
}

func (m *memRecorder) RecordAttempt(_ context.Context, a Attempt) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.attempts = append(m.attempts, a)
	return nil
}

// A receiver that fails the first two attempts: the third delivers, each
// attempt is signed and recorded, and the waits between grow.
func TestDeliverRetriesUntilDelivered(t *testing.T) {
	secret := "receiver-shared-secret"
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := Verify([]byte(secret), r.Header.Get(SignatureHeader), body, time.Now(), time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n <= 2 {
			http.Error(w, "try later", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	rec := &memRecorder{}
	cfg := DefaultConfig()
	s := NewSender(cfg, rec, slog.New(slog.DiscardHandler))
	var waits []time.Duration
	s.sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	ev, err := NewEvent(TypeInvoiceFinalized, time.Now(), map[string]string{"number": "GC-000001"})
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.Deliver(context.Background(), Endpoint{Name: "erp", URL: srv.URL, Secret: secret}, ev, 1, cfg.MaxAttempts)
	if err != nil || last.N != 3 || last.Status != 204 {
		t.Fatalf("last attempt %+v, %v", last, err)
	}
	if len(rec.attempts) != 3 || rec.attempts[0].Status != 503 || rec.attempts[1].Status != 503 || !rec.attempts[2].Delivered() {
		t.Fatalf("recorded %+v", rec.attempts)
	}
	if len(waits) != 2 || waits[0] > cfg.BackoffInitial || waits[1] > 2*cfg.BackoffInitial || waits[1] < cfg.BackoffInitial {
		t.Fatalf("waits %v", waits)
	}

	// A receiver that never accepts: MaxAttempts, then an error.
	cfg.MaxAttempts = 3
	s = NewSender(cfg, rec, slog.New(slog.DiscardHandler))
	s.sleep = func(context.Context, time.Duration) error { return nil }
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	defer down.Close()
	if _, err := s.Deliver(context.Background(), Endpoint{Name: "down", URL: down.URL, Secret: secret}, ev, 4, cfg.MaxAttempts); err == nil ||
		!strings.Contains(err.Error(), "not delivered after 3 attempts") || rec.attempts[len(rec.attempts)-1].N != 6 {
		t.Fatalf("a receiver that is down: %v, attempts %+v", err, rec.attempts)
	}
}

func TestBackoffGrowsWithJitterToTheMaximum(t *testing.T) {
	c := Config{BackoffInitial: time.Second, BackoffMax: 10 * time.Second}
	for n, limit := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 9: 10 * time.Second} {
		for range 50 {
			if d := c.Backoff(n); d < limit/2 || d > limit {
				t.Fatalf("backoff(%d) = %s, want in [%s, %s]", n, d, limit/2, limit)
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	c.Endpoints = []Endpoint{
		{Name: "a", URL: "ftp://x", Secret: "short"},
		{Name: "a", URL: "https://ok.example/hook", Secret: "long-enough-secret", Events: []string{"invoice.paid"}},
	}
	err := c.Validate()
	for _, want := range []string{"endpoints[0].url", "endpoints[0].secret", "endpoints[1].name", "unknown type \"invoice.paid\""} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v lacks %q", err, want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// An endpoint may subscribe to insight.anomaly, and an anomaly's event id
// follows from the anomaly's, so enqueuing it twice leaves one event.
func TestInsightAnomalyEventIsDeterministic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Endpoints = []Endpoint{{Name: "ops", URL: "https://ops.example/hook", Secret: "0123456789abcdef", Events: []string{TypeInsightAnomaly}}}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("insight.anomaly refused: %v", err)
	}
	start := time.Date(2026, 11, 23, 14, 0, 0, 0, time.UTC)
	a := insights.Anomaly{ID: insights.AnomalyID("spiky", "gpu_hours", "", insights.Hourly, start), Tenant: "spiky", Meter: "gpu_hours",
		Start: start, End: start.Add(time.Hour), Direction: insights.Spike, Observed: decimal.NewFromInt(6), Spread: decimal.NewFromInt(1), Score: 6}
	e1, err := InsightAnomaly(a, start.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	e2, err := InsightAnomaly(a, start.Add(5*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if e1.ID != e2.ID || e1.ID != "evt_anomaly_"+a.ID || e1.Type != TypeInsightAnomaly {
		t.Errorf("events %s and %s (%s), want both evt_anomaly_%s", e1.ID, e2.ID, e1.Type, a.ID)
	}
	if !strings.Contains(string(e1.Data), `"tenant":"spiky"`) || !strings.Contains(string(e1.Data), `"observed":"6"`) {
		t.Errorf("data %s", e1.Data)
	}
}

func TestRedactURL(t *testing.T) {
	cases := []struct {
		name, raw, want string
	}{
		{"plain URL unchanged", "https://erp.example/hook", "https://erp.example/hook"},
		{"user and password hidden", "https://alice:pw-123@erp.example/hook", "https://***@erp.example/hook"},
		{"user alone hidden", "https://token-xyz@erp.example/hook", "https://***@erp.example/hook"},
		{"query values hidden, keys kept", "https://erp.example/hook?api_key=k-123&team=ops", "https://erp.example/hook?api_key=redacted&team=redacted"},
		{"both, with a port", "http://u:p@10.0.0.1:8080/a/b?api_key=k", "http://***@10.0.0.1:8080/a/b?api_key=redacted"},
		{"fragment hidden", "https://erp.example/hook#token=abc", "https://erp.example/hook#redacted"},
		{"unparseable URL not shown", "http://u:secret@x/%zz?api_key=k", "(unparseable URL)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := RedactURL(tc.raw); got != tc.want {
				t.Errorf("RedactURL(%q) = %q, want %q", tc.raw, got, tc.want)
			}
		})
	}
}

// A receiver that answers 302 has not received the event: the redirect
// is not followed (Go would follow it with a body-less GET whose 200
// counted as delivered), the attempt fails naming the Location, and it is
// retried per the backoff policy.
func TestDeliverDoesNotFollowRedirects(t *testing.T) {
	var mu sync.Mutex
	targetHits := 0
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		targetHits++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer target.Close()
	location := target.URL + "/moved?sig=location-secret"
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, location, http.StatusFound)
	}))
	defer redirector.Close()

	rec := &memRecorder{}
	cfg := DefaultConfig()
	cfg.MaxAttempts = 3
	s := NewSender(cfg, rec, slog.New(slog.DiscardHandler))
	var waits int
	s.sleep = func(context.Context, time.Duration) error { waits++; return nil }
	ev, err := NewEvent(TypeInvoiceFinalized, time.Now(), map[string]string{"number": "GC-000002"})
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.Deliver(context.Background(), Endpoint{Name: "erp", URL: redirector.URL + "/hook", Secret: "receiver-shared-secret"}, ev, 1, cfg.MaxAttempts)
	if err == nil || last.Delivered() {
		t.Fatalf("a 302 counted as delivered: %+v", last)
	}
	wantLoc := target.URL + "/moved?sig=redacted"
	if len(rec.attempts) != 3 || waits != 2 {
		t.Fatalf("%d attempts with %d waits, want 3 retried per the backoff policy: %+v", len(rec.attempts), waits, rec.attempts)
	}
	for _, a := range rec.attempts {
		if a.Status != http.StatusFound || a.Delivered() || !strings.Contains(a.Error, wantLoc) {
			t.Errorf("attempt %+v: want a failed 302 naming %s", a, wantLoc)
		}
		if strings.Contains(a.Error, "location-secret") {
			t.Errorf("attempt error shows the Location's query value: %s", a.Error)
		}
	}
	if !strings.Contains(err.Error(), wantLoc) {
		t.Errorf("error %v does not name the Location", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if targetHits != 0 {
		t.Errorf("the redirect target received %d requests, want none", targetHits)
	}
}

// An endpoint URL with user:password and an api_key: neither reaches the
// log lines of failed attempts nor the recorded attempts, whatever failed
// (no connection: Go's *url.Error prints the whole URL; an HTTP error; a
// redirect whose relative Location inherits the credentials).
func TestFailedDeliveryKeepsURLCredentialsOut(t *testing.T) {
	const password, apiKey, user = "s3cr3t-pass", "AKIA-very-secret-key", "alice-the-user"
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // connection refused
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	defer failing.Close()
	moving := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	}))
	defer moving.Close()
	withCreds := func(base string) string {
		return strings.Replace(base, "http://", "http://"+user+":"+password+"@", 1) + "/hook?api_key=" + apiKey + "&team=ops"
	}
	for name, srvURL := range map[string]string{"no connection": closed.URL, "HTTP 500": failing.URL, "redirect": moving.URL} {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			rec := &memRecorder{}
			cfg := DefaultConfig()
			cfg.MaxAttempts = 2
			s := NewSender(cfg, rec, slog.New(slog.NewTextHandler(&logs, nil)))
			s.sleep = func(context.Context, time.Duration) error { return nil }
			ev, err := NewEvent(TypeInvoiceFinalized, time.Now(), map[string]string{"number": "GC-000003"})
			if err != nil {
				t.Fatal(err)
			}
			ep := Endpoint{Name: "erp", URL: withCreds(srvURL), Secret: "receiver-shared-secret"}
			_, err = s.Deliver(context.Background(), ep, ev, 1, cfg.MaxAttempts)
			if err == nil {
				t.Fatal("delivered to a failing endpoint")
			}
			texts := map[string]string{"log": logs.String(), "returned error": err.Error()}
			for i, a := range rec.attempts {
				texts[fmt.Sprintf("attempt %d error", i+1)] = a.Error
			}
			if len(rec.attempts) != 2 || rec.attempts[0].Error == "" {
				t.Fatalf("attempts %+v", rec.attempts)
			}
			for what, text := range texts {
				for _, secret := range []string{password, apiKey, user} {
					if strings.Contains(text, secret) {
						t.Errorf("%s shows %q: %s", what, secret, text)
					}
				}
			}
			if !strings.Contains(logs.String(), "***@") || !strings.Contains(logs.String(), "api_key=redacted") {
				t.Errorf("log does not name the endpoint's redacted URL:\n%s", logs.String())
			}
		})
	}
}

// Config errors name a bad URL without its credentials.
func TestConfigValidateKeepsURLCredentialsOut(t *testing.T) {
	for name, u := range map[string]string{
		"wrong scheme": "ftp://alice:s3cr3t-pass@host/x?api_key=AKIA-very-secret-key",
		"unparseable":  "http://alice:s3cr3t-pass@host/%zz?api_key=AKIA-very-secret-key",
	} {
		t.Run(name, func(t *testing.T) {
			c := DefaultConfig()
			c.Endpoints = []Endpoint{{Name: "a", URL: u, Secret: "long-enough-secret"}}
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), "endpoints[0].url") {
				t.Fatalf("%v: want an error naming endpoints[0].url", err)
			}
			for _, secret := range []string{"s3cr3t-pass", "AKIA-very-secret-key"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("%v shows %q", err, secret)
				}
			}
		})
	}
}
