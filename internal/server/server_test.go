package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

type fakePinger struct{ err error }

func (f fakePinger) Ping(context.Context) error { return f.err }

func TestHealthReadinessMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "gpumeter_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	cases := []struct {
		name     string
		pinger   fakePinger
		path     string
		want     int
		contains string
	}{
		{"healthz is up without clickhouse", fakePinger{errors.New("down")}, "/healthz", 200, "ok"},
		{"readyz needs clickhouse", fakePinger{errors.New("down")}, "/readyz", 503, "unreachable"},
		{"readyz with clickhouse", fakePinger{}, "/readyz", 200, "ready"},
		{"metrics exposes the registry", fakePinger{}, "/metrics", 200, "gpumeter_test_total 1"},
		{"unknown path is a JSON 404", fakePinger{}, "/nope", 404, "not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.pinger, reg, slog.New(slog.DiscardHandler))
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			if rec.Code != tc.want || !strings.Contains(rec.Body.String(), tc.contains) {
				t.Fatalf("GET %s = %d %q, want %d containing %q", tc.path, rec.Code, rec.Body.String(), tc.want, tc.contains)
			}
		})
	}
}
