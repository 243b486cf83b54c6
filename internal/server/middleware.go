package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// requestIDHeader carries a request's id in and out.
const requestIDHeader = "X-Request-ID"

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// requestID takes the caller's X-Request-ID when it is sane, else makes
// one, and echoes it in the response, so a log line and a complaint meet.
func requestID() gin.HandlerFunc {
	return func(c *gin.Context) {
		id := c.GetHeader(requestIDHeader)
		if !requestIDPattern.MatchString(id) {
			var b [8]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		c.Set(requestIDHeader, id)
		c.Header(requestIDHeader, id)
		c.Next()
	}
}

func requestIDOf(c *gin.Context) string { return c.GetString(requestIDHeader) }

// route is the matched route pattern (never the raw path, whose ids would
// make every label value unique); unmatched requests share one value.
func route(c *gin.Context) string {
	if r := c.FullPath(); r != "" {
		return r
	}
	return "unmatched"
}

// accessLog writes one structured line per request; the key id, when a
// request was authenticated, is added by the API's middleware.
func accessLog(logger *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		attrs := []any{"method", c.Request.Method, "route", route(c), "status", c.Writer.Status(),
			"duration_ms", time.Since(start).Milliseconds(), "bytes", c.Writer.Size(), "remote", c.ClientIP(),
			"request_id", requestIDOf(c)}
		if k := c.GetString(keyIDContext); k != "" {
			attrs = append(attrs, "key_id", k)
		}
		level := slog.LevelInfo
		if c.Request.URL.Path == "/healthz" || c.Request.URL.Path == "/readyz" || c.Request.URL.Path == "/metrics" {
			level = slog.LevelDebug
		}
		logger.Log(c.Request.Context(), level, "request", attrs...)
	}
}

type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpumeter_http_requests_total",
			Help: "HTTP requests by route, method and status code."}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gpumeter_http_request_duration_seconds",
			Help: "HTTP request latency by route, method and status code.", Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}},
			[]string{"route", "method", "code"}),
	}
	m.requests = register(reg, m.requests)
	m.latency = register(reg, m.latency)
	return m
}

// register adds c to reg, or returns the collector registered before
// under the same name (two servers on one registry share their series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(fmt.Sprintf("register metrics: %v", err)) // a programming error: two metrics of one name and different shapes
	}
	return c
}

func (m *httpMetrics) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	labels := prometheus.Labels{"route": route(c), "method": c.Request.Method, "code": strconv.Itoa(c.Writer.Status())}
	m.requests.With(labels).Inc()
	m.latency.With(labels).Observe(time.Since(start).Seconds())
}

// bodyLimit refuses bodies over max: a declared length at once (413), a
// longer stream when the handler reads past it.
func bodyLimit(max int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.Request.ContentLength > max {
			writeError(c, http.StatusRequestEntityTooLarge, "body_too_large", "request body over "+strconv.FormatInt(max, 10)+" bytes")
			c.Abort()
			return
		}
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, max)
		c.Next()
	}
}

// recoverJSON turns a handler panic into a generic 500, the cause logged.
func recoverJSON(logger *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if r := recover(); r != nil {
				logger.Error("handler panic", "route", route(c), "panic", r, "request_id", requestIDOf(c))
				writeError(c, http.StatusInternalServerError, "internal", "internal error (request "+requestIDOf(c)+")")
				c.Abort()
			}
		}()
		c.Next()
	}
}
