package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/reports"
)

// KeyLookup finds a key by id (an error wrapping auth.ErrUnknownKey when
// there is none).
type KeyLookup interface {
	Key(ctx context.Context, id string) (auth.Key, error)
}

// AuditSink records key use.
type AuditSink interface {
	RecordAudit(ctx context.Context, entries []auth.AuditEntry) error
}

// UsageService answers usage series in a scope.
type UsageService interface {
	Usage(ctx context.Context, q UsageRequest) (UsageResult, error)
}

// InvoiceService reads invoices in a scope.
type InvoiceService interface {
	Invoices(ctx context.Context, q InvoiceListRequest) ([]billing.StoredInvoice, error)
	Invoice(ctx context.Context, scope auth.Scope, ref string) (billing.StoredInvoice, error)
}

// API is what the /v1 routes call.
type API struct {
	Keys       KeyLookup
	Audit      AuditSink
	Usage      UsageService
	Invoices   InvoiceService
	Cost       CostService
	Tenants    TenantService
	Chargeback ChargebackService
	Quotas     QuotaService
	Kubernetes KubernetesService
	Insights   InsightsService
	Now        func() time.Time
}

// Context keys of an authenticated request.
const (
	keyIDContext = "gpumeter.key_id"
	scopeContext = "gpumeter.scope"
)

// keyCacheTTL is how long a looked-up key is trusted without asking the
// store again: a revoked key stops working within it (plus one lookup).
// A key older than that is still served while a background lookup
// refreshes it, so no request waits on ClickHouse for a key it has seen,
// and ClickHouse being down does not stop admissions decided from memory;
// keyCacheMaxStale bounds how long that lasts.
const (
	keyCacheTTL      = 2 * time.Second
	keyCacheMaxStale = 5 * time.Minute
)

type cachedKey struct {
	key     auth.Key
	err     error
	fetched time.Time
}

type apiState struct {
	api      API
	cfg      RateLimit
	mu       sync.Mutex
	keys     map[string]cachedKey
	fetching map[string]bool // key ids with a background lookup running
	limiters map[string]*rate.Limiter
	audit    chan auth.AuditEntry
	dropped  prometheus.Counter
	logger   *slog.Logger
}

// MountAPI adds the /v1 routes. The audit writer runs until ctx ends;
// the returned function waits for it to flush.
func (s *Server) MountAPI(ctx context.Context, reg prometheus.Registerer, api API) (wait func()) {
	if api.Now == nil {
		api.Now = time.Now
	}
	st := &apiState{api: api, cfg: s.cfg.RateLimit, keys: map[string]cachedKey{}, fetching: map[string]bool{}, limiters: map[string]*rate.Limiter{},
		audit: make(chan auth.AuditEntry, 10_000), logger: s.logger,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpumeter_api_audit_dropped_total",
			Help: "API audit entries dropped because the audit writer fell behind."})}
	st.dropped = register(reg, st.dropped)
	s.mountPortal()
	v1 := s.engine.Group("/v1")
	v1.GET("/openapi.json", func(c *gin.Context) { c.Data(http.StatusOK, "application/json", openAPIDocument) })
	v1.Use(func(c *gin.Context) { c.Header("Cache-Control", "no-store"); c.Next() })
	authed := v1.Group("", st.authenticate(s), st.recordUse, st.limit)
	authed.GET("/usage", s.getUsage(api.Usage))
	authed.GET("/invoices", s.listInvoices(api.Invoices))
	authed.GET("/invoices/*ref", s.getInvoice(api.Invoices))
	authed.GET("/cost", s.getCost(api.Cost))
	authed.GET("/tenants", s.getTenants(api.Tenants))
	authed.GET("/chargeback", s.getChargeback(api.Chargeback))
	authed.POST("/admission", s.postAdmission(api.Quotas))
	authed.GET("/quotas", s.getQuotas(api.Quotas))
	authed.POST("/admission/k8s", s.postK8sAdmission(api.Kubernetes))
	authed.GET("/insights/efficiency", s.getEfficiency(api.Insights))
	authed.GET("/insights/rightsize", s.getRightSize(api.Insights))
	authed.GET("/insights/anomalies", s.getAnomalies(api.Insights))
	authed.GET("/insights/capacity", s.getCapacity(api.Insights, api.Now))
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.writeAudit(ctx)
	}()
	return func() { <-done }
}

// authenticate resolves the bearer token (or, for portal tokens, the
// access_token query parameter) to a key and its scope.
func (st *apiState) authenticate(s *Server) gin.HandlerFunc {
	return func(c *gin.Context) {
		token, fromQuery := bearer(c)
		if token == "" {
			c.Header("WWW-Authenticate", `Bearer realm="gpumeter"`)
			writeError(c, http.StatusUnauthorized, "unauthorized", "an API key is required: Authorization: Bearer gmk_...")
			return
		}
		id, secret, err := auth.ParseToken(token)
		if err == nil {
			var k auth.Key
			if k, err = st.key(c.Request.Context(), id); err == nil {
				if err = k.Verify(secret, st.api.Now()); err == nil && fromQuery && !k.Portal {
					err = errPortalOnly
				}
				if err == nil {
					c.Set(keyIDContext, k.ID)
					c.Set(scopeContext, k.Scope)
					c.Next()
					return
				}
			}
		}
		if !isAuthError(err) {
			s.respondError(c, err) // the key store failed: a 500, not a bad token
			return
		}
		c.Header("WWW-Authenticate", `Bearer realm="gpumeter", error="invalid_token"`)
		if errors.Is(err, errPortalOnly) {
			writeError(c, http.StatusUnauthorized, "unauthorized", err.Error())
			return
		}
		s.respondError(c, err)
	}
}

func isAuthError(err error) bool {
	for _, e := range []error{auth.ErrUnknownKey, auth.ErrWrongSecret, auth.ErrMalformedToken, auth.ErrExpired, auth.ErrRevoked, errPortalOnly} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// errPortalOnly: a token in the URL ends up in logs and browser history,
// so only short-lived portal tokens may travel there.
var errPortalOnly = errors.New("only portal tokens may be passed as access_token")

func bearer(c *gin.Context) (token string, fromQuery bool) {
	if h := c.GetHeader("Authorization"); h != "" {
		if scheme, t, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(t), false
		}
		return "", false
	}
	if t := c.Query("access_token"); t != "" {
		return t, true
	}
	return "", false
}

func (st *apiState) key(ctx context.Context, id string) (auth.Key, error) {
	now := st.api.Now()
	st.mu.Lock()
	ck, ok := st.keys[id]
	age := now.Sub(ck.fetched)
	if ok && age >= keyCacheTTL && age < keyCacheMaxStale {
		if !st.fetching[id] {
			st.fetching[id] = true
			go st.refreshKey(context.WithoutCancel(ctx), id)
		}
		st.mu.Unlock()
		return ck.key, ck.err
	}
	st.mu.Unlock()
	if ok && age < keyCacheTTL {
		return ck.key, ck.err
	}
	return st.fetchKey(ctx, id)
}

// refreshKey looks a cached key up again in the background.
func (st *apiState) refreshKey(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := st.fetchKey(ctx, id); err != nil {
		st.logger.Warn("refresh API key; serving the cached one", "key_id", id, "err", err)
	}
	st.mu.Lock()
	delete(st.fetching, id)
	st.mu.Unlock()
}

// fetchKey reads a key from the store and caches the answer (an unknown
// id too, so guessing ids costs one read per TTL each).
func (st *apiState) fetchKey(ctx context.Context, id string) (auth.Key, error) {
	fetched := st.api.Now()
	k, err := st.api.Keys.Key(ctx, id)
	if err != nil && !errors.Is(err, auth.ErrUnknownKey) {
		return auth.Key{}, err // a store error is not cached
	}
	st.mu.Lock()
	if len(st.keys) > 100_000 { // unknown ids must not grow the cache without bound
		st.keys = map[string]cachedKey{}
	}
	st.keys[id] = cachedKey{key: k, err: err, fetched: fetched}
	st.mu.Unlock()
	return k, err
}

// limit applies the key's token bucket.
func (st *apiState) limit(c *gin.Context) {
	id := c.GetString(keyIDContext)
	st.mu.Lock()
	l, ok := st.limiters[id]
	if !ok {
		l = rate.NewLimiter(rate.Limit(st.cfg.PerSecond), st.cfg.Burst)
		st.limiters[id] = l
	}
	st.mu.Unlock()
	r := l.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		c.Header("Retry-After", strconv.Itoa(int(math.Ceil(d.Seconds()))))
		writeError(c, http.StatusTooManyRequests, "rate_limited",
			fmt.Sprintf("over %g requests/s for this key; retry in %s", st.cfg.PerSecond, d.Round(time.Millisecond)))
		return
	}
	c.Next()
}

// recordUse queues an audit entry once the request is answered.
func (st *apiState) recordUse(c *gin.Context) {
	c.Next()
	scope, _ := c.Get(scopeContext)
	sc, _ := scope.(auth.Scope)
	e := auth.AuditEntry{At: st.api.Now().UTC(), KeyID: c.GetString(keyIDContext), Scope: sc.String(),
		Method: c.Request.Method, Route: route(c), Path: truncate(auditPath(c.Request.URL), 512), Status: c.Writer.Status(),
		Remote: c.ClientIP(), RequestID: requestIDOf(c)}
	select {
	case st.audit <- e:
	default:
		st.dropped.Inc()
	}
}

// auditPath is the request's path and query without access_token: a
// portal token in the audit table would be a credential at rest.
func auditPath(u *url.URL) string {
	q := u.Query()
	if !q.Has("access_token") {
		return u.RequestURI()
	}
	q.Set("access_token", "redacted")
	return u.Path + "?" + q.Encode()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// writeAudit inserts queued entries once a second, and what is left when
// ctx ends.
func (st *apiState) writeAudit(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var buf []auth.AuditEntry
	flush := func(ctx context.Context) {
		if len(buf) == 0 {
			return
		}
		if err := st.api.Audit.RecordAudit(ctx, buf); err != nil {
			st.logger.Error("record API audit; entries lost", "entries", len(buf), "err", err)
			st.dropped.Add(float64(len(buf)))
		}
		buf = buf[:0]
	}
	for {
		select {
		case e := <-st.audit:
			buf = append(buf, e)
			if len(buf) >= 1000 {
				flush(ctx)
			}
		case <-t.C:
			flush(ctx)
		case <-ctx.Done():
			for {
				select {
				case e := <-st.audit:
					buf = append(buf, e)
				default:
					c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
					flush(c)
					cancel()
					return
				}
			}
		}
	}
}

func scopeOf(c *gin.Context) auth.Scope {
	v, _ := c.Get(scopeContext)
	sc, _ := v.(auth.Scope)
	return sc
}

func (s *Server) getUsage(svc UsageService) gin.HandlerFunc {
	return func(c *gin.Context) {
		q, err := parseUsageRequest(c.Request.URL.Query(), scopeOf(c))
		if err != nil {
			s.respondError(c, err)
			return
		}
		res, err := svc.Usage(c.Request.Context(), q)
		if err != nil {
			s.respondError(c, err)
			return
		}
		c.JSON(http.StatusOK, usageResponse(q, res))
	}
}

func (s *Server) listInvoices(svc InvoiceService) gin.HandlerFunc {
	return func(c *gin.Context) {
		q, err := parseInvoiceList(c.Request.URL.Query(), scopeOf(c))
		if err != nil {
			s.respondError(c, err)
			return
		}
		q.Limit++ // one more than the page, to know whether another follows
		invs, err := svc.Invoices(c.Request.Context(), q)
		if err != nil {
			s.respondError(c, err)
			return
		}
		out := invoiceList{Invoices: []invoiceSummary{}}
		for i, si := range invs {
			if i == q.Limit-1 {
				out.NextPageToken = invs[i-1].Invoice.ID
				break
			}
			out.Invoices = append(out.Invoices, summarize(si.Invoice))
		}
		c.JSON(http.StatusOK, out)
	}
}

func (s *Server) getInvoice(svc InvoiceService) gin.HandlerFunc {
	return func(c *gin.Context) {
		ref := strings.TrimPrefix(c.Param("ref"), "/")
		if err := onlyParams(c.Request.URL.Query(), 16, "format"); err != nil {
			s.respondError(c, err)
			return
		}
		format := c.DefaultQuery("format", "json")
		if ref == "" || len(ref) > 200 || !validText(ref) {
			s.respondError(c, badRequest{"invoice: give an id (tenant/period/n) or a number"})
			return
		}
		write, contentType, ok := invoiceFormat(format)
		if !ok {
			s.respondError(c, badRequest{fmt.Sprintf("format %q: want json, csv or pdf", format)})
			return
		}
		si, err := svc.Invoice(c.Request.Context(), scopeOf(c), ref)
		if err != nil {
			s.respondError(c, err)
			return
		}
		var b strings.Builder
		if err := write(&b, si); err != nil {
			s.respondError(c, err)
			return
		}
		c.Data(http.StatusOK, contentType, []byte(b.String()))
	}
}

type invoiceWriter func(w *strings.Builder, si billing.StoredInvoice) error

func invoiceFormat(f string) (invoiceWriter, string, bool) {
	switch f {
	case "json":
		return func(w *strings.Builder, si billing.StoredInvoice) error {
				return reports.WriteInvoiceJSON(w, si.Document)
			},
			"application/json", true
	case "csv":
		return func(w *strings.Builder, si billing.StoredInvoice) error {
				return reports.WriteInvoiceCSV(w, si.Invoice)
			},
			"text/csv; charset=utf-8", true
	case "pdf":
		return func(w *strings.Builder, si billing.StoredInvoice) error {
				return reports.WriteInvoicePDF(w, si.Invoice)
			},
			"application/pdf", true
	}
	return nil, "", false
}
