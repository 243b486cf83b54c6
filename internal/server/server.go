// Package server is gpumeter's HTTP side (gin): health, readiness and
// Prometheus metrics for `serve` and the collector's listener, and the
// versioned /v1 API (api.go). Handlers hold service interfaces only and
// never touch storage directly.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpumeter/gpumeter/internal/auditqueue"
	"github.com/gpumeter/gpumeter/reports"
)

// Check is one condition of readiness: ClickHouse reachable for the
// server, a successful poll for the collector. /readyz answers 503 while
// any check fails, naming each failing one.
type Check struct {
	Name  string
	Ready func(ctx context.Context) error
}

// Config of the HTTP listener. The timeouts bound what one client can hold:
// without IdleTimeout, idle keep-alive connections stay open forever.
type Config struct {
	Listen string `yaml:"listen"`
	// MetricsListen is where `serve` exposes /metrics, apart from the API
	// and portal: the metrics name tenants and their quota figures, which
	// the portal's clients must not read. Empty turns /metrics off.
	MetricsListen     string        `yaml:"metrics_listen"`
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	ReadTimeout       time.Duration `yaml:"read_timeout"`
	WriteTimeout      time.Duration `yaml:"write_timeout"`
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	// MaxBodyBytes bounds a request body; a larger one is refused with 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// RateLimit bounds each API key's requests.
	RateLimit RateLimit `yaml:"rate_limit"`
	// Unauthenticated bounds, per client address, the requests that fail
	// authentication or name a key id the server has not cached: each of
	// those may cost a key lookup in ClickHouse.
	Unauthenticated RateLimit `yaml:"unauthenticated_rate_limit"`
	// AuditQueue keeps the audit entries ClickHouse refuses, on disk.
	AuditQueue auditqueue.Config `yaml:"audit_queue"`
	// TLS of the API listener (tls.go). Without it serve refuses to start
	// unless PlainHTTP asks for plain HTTP by name.
	TLS       TLSConfig `yaml:"tls"`
	PlainHTTP bool      `yaml:"plain_http"`
}

// RateLimit is a token bucket per API key: PerSecond requests on average,
// Burst at once. Over it a request gets 429 with Retry-After.
type RateLimit struct {
	PerSecond float64 `yaml:"per_second"`
	Burst     int     `yaml:"burst"`
}

// DefaultConfig listens on loopback port 8080.
func DefaultConfig() Config {
	return Config{
		Listen:            "127.0.0.1:8080",
		MetricsListen:     "127.0.0.1:9402",
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxBodyBytes:      1 << 20,
		RateLimit:         RateLimit{PerSecond: 50, Burst: 100},
		Unauthenticated:   RateLimit{PerSecond: 2, Burst: 20},
		AuditQueue:        auditqueue.DefaultConfig("/var/lib/gpumeter/audit"),
	}
}

// Validate reports every problem.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("server.listen %q: %w", c.Listen, err))
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			errs = append(errs, fmt.Errorf("server.metrics_listen %q: %w", c.MetricsListen, err))
		} else if c.MetricsListen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
			errs = append(errs, fmt.Errorf("server.metrics_listen %q: must differ from server.listen (metrics stay off the API port)", c.MetricsListen))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read_header_timeout", c.ReadHeaderTimeout}, {"read_timeout", c.ReadTimeout}, {"write_timeout", c.WriteTimeout}, {"idle_timeout", c.IdleTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("server.%s: %s: must be positive", d.name, d.v))
		}
	}
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("server.max_body_bytes %d: must be positive", c.MaxBodyBytes))
	}
	if c.RateLimit.PerSecond <= 0 || c.RateLimit.Burst < 1 {
		errs = append(errs, fmt.Errorf("server.rate_limit: per_second %g and burst %d must be positive", c.RateLimit.PerSecond, c.RateLimit.Burst))
	}
	if c.Unauthenticated.PerSecond <= 0 || c.Unauthenticated.Burst < 1 {
		errs = append(errs, fmt.Errorf("server.unauthenticated_rate_limit: per_second %g and burst %d must be positive", c.Unauthenticated.PerSecond, c.Unauthenticated.Burst))
	}
	if err := c.AuditQueue.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("server.audit_queue.%w", err))
	}
	errs = append(errs, c.TLS.validate()...)
	return errors.Join(errs...)
}

// HTTPServer is an http.Server for h with the config's timeouts.
func (c Config) HTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: c.ReadHeaderTimeout, ReadTimeout: c.ReadTimeout,
		WriteTimeout: c.WriteTimeout, IdleTimeout: c.IdleTimeout}
}

// Server serves HTTP.
type Server struct {
	cfg    Config
	engine *gin.Engine
	logger *slog.Logger
	pdf    reports.PDF // set by MountAPI
}

// New builds the routes: /healthz, /readyz (decided by checks) and a JSON
// 404. The server adds its request metrics to reg; MountMetrics exposes a
// registry, on a listener of its own where the API is mounted too.
func New(cfg Config, reg *prometheus.Registry, logger *slog.Logger, checks ...Check) *Server {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	// No proxy is trusted: X-Forwarded-For from a client must not set the
	// remote address that access logs and the audit table record.
	_ = e.SetTrustedProxies(nil)
	logger = logger.With("component", "server")
	m := newHTTPMetrics(reg)
	e.Use(recoverJSON(logger), requestID(), accessLog(logger), m.observe, bodyLimit(cfg.MaxBodyBytes))
	e.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	e.GET("/readyz", func(c *gin.Context) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
		defer cancel()
		// The probe names the failing checks, never their errors: those
		// carry addresses and versions that anyone reaching the port could
		// read. The causes go to the log.
		var failed []string
		for _, ch := range checks {
			if err := ch.Ready(ctx); err != nil {
				logger.Warn("not ready", "check", ch.Name, "err", err)
				failed = append(failed, ch.Name)
			}
		}
		if len(failed) > 0 {
			c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable", "failed": failed})
			return
		}
		c.JSON(http.StatusOK, gin.H{"status": "ready"})
	})
	e.NoRoute(func(c *gin.Context) {
		writeError(c, http.StatusNotFound, "not_found", "not found: "+c.Request.Method+" "+c.Request.URL.Path)
	})
	return &Server{cfg: cfg, engine: e, logger: logger}
}

// MountMetrics serves g's metrics at /metrics.
func (s *Server) MountMetrics(g prometheus.Gatherer) {
	s.engine.GET("/metrics", gin.WrapH(promhttp.HandlerFor(g, promhttp.HandlerOpts{})))
}

// Handler exposes the routes (tests use httptest).
func (s *Server) Handler() http.Handler { return s.engine }

// Start listens on addr and serves in the background until stop is called
// or ctx ends; stop shuts down gracefully and waits. It returns the address
// listened on (addr may ask for port 0).
func (s *Server) Start(ctx context.Context, addr string) (string, func() error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	s.logger.Info("listening", "addr", ln.Addr().String())
	return ln.Addr().String(), func() error {
		cancel()
		return <-done
	}, nil
}

// Serve listens on ln until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := s.cfg.HTTPServer(s.engine)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down http: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve http: %w", err)
	}
	return nil
}
