package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/gpumeter/gpumeter/internal/auditqueue"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/usage"
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

// AuditQueue keeps the entries AuditSink refused (ClickHouse down) until
// it takes them again (auditqueue.Queue, on disk).
type AuditQueue interface {
	Put(entries []auth.AuditEntry) error
	Drain(ctx context.Context, write func(context.Context, []auth.AuditEntry) error) (auditqueue.DrainResult, error)
	Pending() (entries int, bytes int64)
}

// UsageService answers usage series in a scope (usage.Service).
type UsageService interface {
	Usage(ctx context.Context, q usage.Request) (usage.Result, error)
}

// InvoiceService reads invoices in a scope (billing.InvoiceService).
type InvoiceService interface {
	Invoices(ctx context.Context, q billing.InvoiceListRequest) ([]billing.StoredInvoice, error)
	Invoice(ctx context.Context, q billing.InvoiceRequest) (billing.StoredInvoice, error)
}

// API is what the /v1 routes call.
type API struct {
	Keys  KeyLookup
	Audit AuditSink
	// AuditQueue, when set, keeps what Audit refuses; without it those
	// entries are dropped and counted.
	AuditQueue AuditQueue
	Usage      UsageService
	Invoices   InvoiceService
	Cost       CostService
	Tenants    TenantService
	Chargeback ChargebackService
	Quotas     QuotaService
	Kubernetes KubernetesService
	// Forward sends admissions and quota reads to the leader replica;
	// nil: this replica decides every admission (a single replica).
	Forward  AdmissionForwarder
	Insights InsightsService
	// Credits serves /v1/credits (its reads scoped by Tenants, its
	// depletion dates from Cost's forecast); nil: 404 there.
	Credits        CreditsService
	CreditSettings credits.Settings
	// PDF renders invoices and chargebacks as PDF (the zero value: the
	// embedded Go fonts; reports.pdf_font configures another).
	PDF reports.PDF
	Now func() time.Time
}

// Context keys of an authenticated request.
const (
	keyIDContext  = "gpumeter.key_id"
	scopeContext  = "gpumeter.scope"
	portalContext = "gpumeter.portal"
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
	anonCfg  RateLimit
	anon     map[string]*rate.Limiter // client address → unauthenticated budget
	audit    chan auth.AuditEntry
	dropped  prometheus.Counter
	queued   prometheus.Gauge
	logger   *slog.Logger
}

// MountAPI adds the /v1 routes. The audit writer runs until ctx ends;
// the returned function waits for it to flush.
func (s *Server) MountAPI(ctx context.Context, reg prometheus.Registerer, api API) (wait func()) {
	if api.Now == nil {
		api.Now = time.Now
	}
	st := &apiState{api: api, cfg: s.cfg.RateLimit, keys: map[string]cachedKey{}, fetching: map[string]bool{}, limiters: map[string]*rate.Limiter{},
		anonCfg: s.cfg.Unauthenticated, anon: map[string]*rate.Limiter{},
		audit: make(chan auth.AuditEntry, 10_000), logger: s.logger,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpumeter_api_audit_dropped_total",
			Help: "API audit entries lost: the audit writer fell behind, or the store refused them and the on-disk queue could not keep them."}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpumeter_api_audit_queued_entries",
			Help: "API audit entries kept in the on-disk queue until ClickHouse takes them."})}
	st.dropped = register(reg, st.dropped)
	st.queued = register(reg, st.queued)
	s.pdf = api.PDF
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
	authed.POST("/admission", s.forwardAdmission(api.Forward), s.postAdmission(api.Quotas))
	authed.GET("/quotas", s.forwardRead(api.Forward), s.getQuotas(api.Quotas))
	authed.POST("/admission/k8s", s.forwardAdmission(api.Forward), s.postK8sAdmission(api.Kubernetes))
	authed.GET("/insights/efficiency", s.getEfficiency(api.Insights))
	authed.GET("/insights/rightsize", s.getRightSize(api.Insights))
	authed.GET("/insights/anomalies", s.getAnomalies(api.Insights))
	authed.GET("/insights/capacity", s.getCapacity(api.Insights, api.Now))
	authed.GET("/credits", s.getCredits(api))
	authed.POST("/credits", s.postCredits(api))
	authed.POST("/credits/:id/void", s.postVoid(api))
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
		// A request that is not served from a cached, valid key spends from
		// its address's unauthenticated budget first: it may cost a key
		// lookup in ClickHouse, or it is a failed attempt.
		spent := false
		spend := func() bool {
			if spent {
				return true
			}
			spent = true
			l := st.anonymous(c.ClientIP())
			if l == nil || l.Allow() {
				return true
			}
			c.Header("Retry-After", strconv.Itoa(int(math.Ceil(1/st.anonCfg.PerSecond))))
			writeError(c, http.StatusTooManyRequests, "rate_limited",
				fmt.Sprintf("over %g unauthenticated requests/s from this address; retry later", st.anonCfg.PerSecond))
			return false
		}
		token, fromQuery := bearer(c)
		if token == "" {
			if !spend() {
				return
			}
			c.Header("WWW-Authenticate", `Bearer realm="gpumeter"`)
			writeError(c, http.StatusUnauthorized, "unauthorized", "an API key is required: Authorization: Bearer gmk_...")
			return
		}
		id, secret, err := auth.ParseToken(token)
		if err == nil {
			if !st.cached(id) && !spend() {
				return
			}
			var k auth.Key
			if k, err = st.key(c.Request.Context(), id); err == nil {
				if err = k.Verify(secret, st.api.Now()); err == nil && fromQuery && !k.Portal {
					err = errPortalOnly
				}
				if err == nil && k.Portal && !readOnly(c.Request.Method) {
					// Portal tokens travel in URLs and live in browsers: they
					// read, they never place holds or change anything.
					writeError(c, http.StatusForbidden, "forbidden", "portal tokens are read-only: "+c.Request.Method+" needs an API key")
					return
				}
				if err == nil {
					c.Set(keyIDContext, k.ID)
					c.Set(scopeContext, k.Scope)
					c.Set(portalContext, k.Portal)
					c.Next()
					return
				}
			}
		}
		if !isAuthError(err) {
			s.respondError(c, err) // the key store failed: a 500, not a bad token
			return
		}
		if !spend() {
			return
		}
		c.Header("WWW-Authenticate", `Bearer realm="gpumeter", error="invalid_token"`)
		s.respondError(c, err)
	}
}

// readOnly is true for the methods that change nothing.
func readOnly(method string) bool {
	return method == http.MethodGet || method == http.MethodHead
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

// cached is true when id's key (or its absence) is in the cache, fresh or
// stale: answering needs no lookup the caller waits on.
func (st *apiState) cached(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	ck, ok := st.keys[id]
	return ok && st.api.Now().Sub(ck.fetched) < keyCacheMaxStale
}

// anonymous is the token bucket for requests not authenticated from the
// cache from addr: per IPv4 address, per IPv6 /64 (one host can use a
// whole /64). Loopback has none (nil): it is this host's own TLS sidecar
// in front of the admission webhook, relaying the Kubernetes API server,
// whose first lookup of its key after a restart must never wait on a
// budget other callers of the sidecar spent.
func (st *apiState) anonymous(addr string) *rate.Limiter {
	ip, err := netip.ParseAddr(addr)
	if err == nil && ip.IsLoopback() {
		return nil
	}
	if err == nil && ip.Is6() && !ip.Is4In6() {
		if p, err := ip.Prefix(64); err == nil {
			addr = p.String()
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	l, ok := st.anon[addr]
	if !ok {
		if len(st.anon) > 100_000 { // random source addresses must not grow it without bound
			st.anon = map[string]*rate.Limiter{}
		}
		l = rate.NewLimiter(rate.Limit(st.anonCfg.PerSecond), st.anonCfg.Burst)
		st.anon[addr] = l
	}
	return l
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
// ctx ends. What the store refuses (ClickHouse down) is kept in the
// on-disk queue and written again, oldest first, once the store takes
// entries; only what a full queue cannot hold is dropped, and counted.
func (st *apiState) writeAudit(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	w := &auditWriter{st: st, backoff: time.Second}
	var buf []auth.AuditEntry
	flush := func(ctx context.Context) {
		w.flush(ctx, buf)
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
					w.retryAt = time.Time{} // one last try before the process ends
					flush(c)
					cancel()
					return
				}
			}
		}
	}
}

// auditWriter writes audit batches through the store, keeping the ones it
// refuses in the on-disk queue. While the queue holds entries, new batches
// join it, so entries reach the table in the order they were made.
type auditWriter struct {
	st      *apiState
	retryAt time.Time // no store write before this after a failure
	backoff time.Duration
}

func (w *auditWriter) flush(ctx context.Context, buf []auth.AuditEntry) {
	st := w.st
	q := st.api.AuditQueue
	defer func() {
		if q != nil {
			n, _ := q.Pending()
			st.queued.Set(float64(n))
		}
	}()
	var err error
	if q != nil && time.Now().Before(w.retryAt) {
		// Without a queue every batch is tried: a refused one is lost.
		err = errAuditBackoff
	} else if err = w.drain(ctx); err == nil && len(buf) > 0 {
		err = w.write(ctx, buf)
	}
	if err != nil && !errors.Is(err, errAuditBackoff) {
		w.retryAt = time.Now().Add(w.backoff)
		w.backoff = min(2*w.backoff, 30*time.Second)
	} else if err == nil {
		w.backoff = time.Second
	}
	if err == nil || len(buf) == 0 {
		return
	}
	if q == nil {
		st.logger.Error("record API audit; entries lost", "entries", len(buf), "err", err)
		st.dropped.Add(float64(len(buf)))
		return
	}
	if qerr := q.Put(buf); qerr != nil {
		st.logger.Error("record API audit; entries lost (the on-disk queue cannot keep them)", "entries", len(buf), "err", err, "queue_err", qerr)
		st.dropped.Add(float64(len(buf)))
		return
	}
	if !errors.Is(err, errAuditBackoff) {
		st.logger.Warn("record API audit; kept on disk until the store takes them", "entries", len(buf), "err", err)
	}
}

// drain writes what the on-disk queue holds; nil when it is empty after.
func (w *auditWriter) drain(ctx context.Context) error {
	q := w.st.api.AuditQueue
	if q == nil {
		return nil
	}
	if n, _ := q.Pending(); n == 0 {
		return nil
	}
	// A bounded share per flush: the writer must come back to the channel
	// before it fills (requests would then drop their entries).
	dctx, cancel := context.WithTimeout(ctx, auditDrainBudget)
	defer cancel()
	res, err := q.Drain(dctx, func(_ context.Context, b []auth.AuditEntry) error { return w.write(ctx, b) })
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && res.Written > 0 {
		err = errAuditBackoff // progress made; the rest next time, without backing off
	}
	if res.Corrupt > 0 {
		w.st.logger.Error("audit queue: damaged batches set aside; entries lost", "entries", res.Corrupt)
		w.st.dropped.Add(float64(res.Corrupt))
	}
	if res.Written > 0 {
		w.st.logger.Info("audit queue: kept entries written", "entries", res.Written)
	}
	return err
}

// write sends one batch, bounded so that a store that hangs rather than
// refuses cannot hold the writer.
func (w *auditWriter) write(ctx context.Context, buf []auth.AuditEntry) error {
	ctx, cancel := context.WithTimeout(ctx, auditWriteTimeout)
	defer cancel()
	return w.st.api.Audit.RecordAudit(ctx, buf)
}

const (
	auditWriteTimeout = 10 * time.Second
	auditDrainBudget  = 2 * time.Second
)

// errAuditBackoff: the store failed a moment ago (or the queue has more
// to drain); the batch goes to the queue without another try.
var errAuditBackoff = errors.New("audit store failed recently")

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
		q.Portal = c.GetBool(portalContext)
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
		q := billing.InvoiceRequest{Scope: scopeOf(c), Ref: ref, Portal: c.GetBool(portalContext)}
		if err := q.Validate(); err != nil {
			s.respondError(c, err)
			return
		}
		if !validText(ref) {
			s.respondError(c, badRequest{"invoice: give an id (tenant/period/n) or a number"})
			return
		}
		write, contentType, ok := invoiceFormat(format, s.pdf)
		if !ok {
			s.respondError(c, badRequest{fmt.Sprintf("format %q: want json, csv or pdf", format)})
			return
		}
		si, err := svc.Invoice(c.Request.Context(), q)
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

func invoiceFormat(f string, pdf reports.PDF) (invoiceWriter, string, bool) {
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
				return pdf.WriteInvoice(w, si.Invoice)
			},
			"application/pdf", true
	}
	return nil, "", false
}
