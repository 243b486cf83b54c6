package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func check(name string, err error) Check {
	return Check{Name: name, Ready: func(context.Context) error { return err }}
}

func TestHealthReadinessMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "gpumeter_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	cases := []struct {
		name     string
		checks   []Check
		path     string
		want     int
		contains string
		hidden   string // must not appear: /readyz keeps errors for the log
	}{
		{"healthz is up without clickhouse", []Check{check("clickhouse", errors.New("down"))}, "/healthz", 200, "ok", ""},
		{"readyz needs clickhouse", []Check{check("clickhouse", errors.New("dial tcp 127.0.0.1:9000: connect: connection refused"))}, "/readyz", 503, `"failed":["clickhouse"]`, "127.0.0.1"},
		{"readyz names only the failing check", []Check{check("clickhouse", nil), check("poll", errors.New("no poll"))}, "/readyz", 503, `"failed":["poll"]`, "no poll"},
		{"readyz with clickhouse", []Check{check("clickhouse", nil)}, "/readyz", 200, "ready", ""},
		{"readyz without checks", nil, "/readyz", 200, "ready", ""},
		{"metrics exposes the registry", nil, "/metrics", 200, "gpumeter_test_total 1", ""},
		{"unknown path is a JSON 404", nil, "/nope", 404, "not found", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(DefaultConfig(), reg, slog.New(slog.DiscardHandler), tc.checks...)
			s.MountMetrics(reg)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			if rec.Code != tc.want || !strings.Contains(rec.Body.String(), tc.contains) {
				t.Fatalf("GET %s = %d %q, want %d containing %q", tc.path, rec.Code, rec.Body.String(), tc.want, tc.contains)
			}
			if tc.hidden != "" && strings.Contains(rec.Body.String(), tc.hidden) {
				t.Fatalf("GET %s = %q: shows %q", tc.path, rec.Body.String(), tc.hidden)
			}
		})
	}
}

// An idle keep-alive connection is closed by the server after
// IdleTimeout; before the fix serve set none and such connections stayed
// open forever.
func TestIdleKeepAliveConnectionsAreClosed(t *testing.T) {
	cfg := DefaultConfig()
	cfg.IdleTimeout = 100 * time.Millisecond
	s := New(cfg, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The connection is now idle; the server must close it. The deadline
	// only bounds a failing test.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection still open (read: %v), want EOF from the server", err)
	}
}

func TestConfigValidateTimeouts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.IdleTimeout = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "idle_timeout") {
		t.Fatalf("zero idle timeout: %v", err)
	}
}

func TestStartServesUntilStopped(t *testing.T) {
	s := New(DefaultConfig(), prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	addr, stop, err := s.Start(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz %d", resp.StatusCode)
	}
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatalf("%s still accepts connections after stop", addr)
	}
	if _, _, err := s.Start(context.Background(), "127.0.0.1:99999"); err == nil {
		t.Fatal("Start on an address that cannot be listened on succeeded")
	}
}
