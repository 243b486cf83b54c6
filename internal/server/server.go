// Package server is gpumeter's HTTP side (gin): health, readiness and
// Prometheus metrics now, for `serve` and for the collector's listener;
// the versioned /v1 API joins it later. Handlers hold service interfaces
// only and never touch storage directly.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	Listen            string        `yaml:"listen"`
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	ReadTimeout       time.Duration `yaml:"read_timeout"`
	WriteTimeout      time.Duration `yaml:"write_timeout"`
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
}

// DefaultConfig listens on loopback port 8080.
func DefaultConfig() Config {
	return Config{
		Listen:            "127.0.0.1:8080",
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
}

// Validate reports every problem.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("server.listen %q: %w", c.Listen, err))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read_header_timeout", c.ReadHeaderTimeout}, {"read_timeout", c.ReadTimeout}, {"write_timeout", c.WriteTimeout}, {"idle_timeout", c.IdleTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("server.%s: %s: must be positive", d.name, d.v))
		}
	}
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
}

// New builds the routes. gather is the registry /metrics exposes; checks
// decide /readyz.
func New(cfg Config, gather prometheus.Gatherer, logger *slog.Logger, checks ...Check) *Server {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	logger = logger.With("component", "server")
	e.Use(requestLog(logger))
	e.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	e.GET("/readyz", func(c *gin.Context) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
		defer cancel()
		failed := map[string]string{}
		for _, ch := range checks {
			if err := ch.Ready(ctx); err != nil {
				logger.Warn("not ready", "check", ch.Name, "err", err)
				failed[ch.Name] = err.Error()
			}
		}
		if len(failed) > 0 {
			c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable", "failed": failed})
			return
		}
		c.JSON(http.StatusOK, gin.H{"status": "ready"})
	})
	e.GET("/metrics", gin.WrapH(promhttp.HandlerFor(gather, promhttp.HandlerOpts{})))
	e.NoRoute(func(c *gin.Context) { c.JSON(http.StatusNotFound, gin.H{"error": "not found"}) })
	return &Server{cfg: cfg, engine: e, logger: logger}
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

func requestLog(logger *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		logger.Debug("request", "method", c.Request.Method, "path", c.FullPath(),
			"status", c.Writer.Status(), "duration", time.Since(start))
	}
}
