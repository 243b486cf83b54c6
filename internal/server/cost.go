package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/chargeback"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/gpumeter/gpumeter/reports"
)

// CostService prices a tenant's month so far (usage.Service).
type CostService interface {
	Cost(ctx context.Context, q usage.CostRequest) (usage.CostResult, error)
}

// TenantService lists the customers a scope may see (usage.Service).
type TenantService interface {
	Tenants(ctx context.Context, scope auth.Scope) ([]usage.TenantInfo, error)
}

// ChargebackService charges a month to departments
// (billing.ChargebackService).
type ChargebackService interface {
	Chargeback(ctx context.Context, r billing.ScopedChargebackRequest) (chargeback.Report, error)
}

// parseCostRequest decodes GET /v1/cost; usage.CostRequest.Validate
// checks it.
func parseCostRequest(v url.Values, scope auth.Scope) (usage.CostRequest, error) {
	q := usage.CostRequest{Scope: scope, Tenant: v.Get("tenant"), Month: v.Get("month")}
	if err := onlyParams(v, 128, "tenant", "month"); err != nil {
		return q, err
	}
	return q, q.Validate()
}

// onlyParams refuses parameters not named and text that is not short,
// valid UTF-8 (access_token is always allowed: the portal's token).
func onlyParams(v url.Values, maxLen int, names ...string) error {
	allowed := map[string]bool{"access_token": true}
	for _, n := range names {
		allowed[n] = true
	}
	for k, vals := range v {
		if !allowed[k] {
			return badRequest{fmt.Sprintf("unknown parameter %q (want %v)", truncate(k, 64), names)}
		}
		if len(vals) > 1 {
			return badRequest{fmt.Sprintf("%s: given %d times; give it once", k, len(vals))}
		}
		limit := maxLen
		if k == "access_token" {
			limit = maxTokenLen // checked whole by authentication already
		}
		for _, s := range vals {
			if !validText(s) || len(s) > limit {
				return badRequest{fmt.Sprintf("%s: not valid UTF-8 text of at most %d bytes", k, limit)}
			}
		}
	}
	return nil
}

// maxTokenLen bounds an access_token parameter (a portal token is about
// 70 bytes).
const maxTokenLen = 256

func money(d decimal.Decimal, places int32) string { return d.StringFixed(places) }

func (s *Server) getCost(svc CostService) gin.HandlerFunc {
	return func(c *gin.Context) {
		q, err := parseCostRequest(c.Request.URL.Query(), scopeOf(c))
		if err != nil {
			s.respondError(c, err)
			return
		}
		r, err := svc.Cost(c.Request.Context(), q)
		if err != nil {
			s.respondError(c, err)
			return
		}
		c.JSON(http.StatusOK, costBody(r))
	}
}

// costBody is GET /v1/cost's answer. Every amount is before tax (the
// invoice's subtotal, before its tax line), and so_far, forecast and the
// trend's month end come from one priced forecast, so they agree.
func costBody(r usage.CostResult) gin.H {
	fc := r.Cost
	soFar, forecast := billing.CostByMeter(fc.SoFar), billing.CostByMeter(fc.Forecast)
	meters := []gin.H{}
	for _, m := range append(pricing.Meters(), "") {
		so, okS := soFar[m]
		f, okF := forecast[m]
		if !okS && !okF {
			continue
		}
		name := string(m)
		if m == "" {
			name = "other"
		}
		meters = append(meters, gin.H{"meter": name, "so_far": money(so, r.MinorUnits), "forecast": money(f, r.MinorUnits)})
	}
	body := gin.H{"tenant": r.Tenant, "month": r.Month, "time_zone": r.TimeZone, "currency": r.Currency, "book_version": r.BookVersion,
		"start": r.Start.UTC().Format(time.RFC3339), "end": r.End.UTC().Format(time.RFC3339), "as_of": fc.AsOf.UTC().Format(time.RFC3339),
		"before_tax": true, "so_far": money(fc.SoFar.Total, r.MinorUnits), "forecast": money(fc.Forecast.Total, r.MinorUnits),
		"forecast_low": money(fc.Low, r.MinorUnits), "forecast_high": money(fc.High, r.MinorUnits), "forecast_method": fc.Method,
		"meters": meters}
	// A run rate is no trend: the chart of one would claim a season.
	if fc.Method == insights.MethodRunRate {
		return body
	}
	// GPU-hours of every SKU (GPU-equivalents, MIG included).
	z := decimal.Zero
	actual, projected, total, low, high := z, z, z, z, z
	for _, u := range fc.Usage {
		if u.Meter == pricing.GPUHours {
			actual, projected, total = actual.Add(u.Actual), projected.Add(u.Projected), total.Add(u.Total)
			low, high = low.Add(u.Low), high.Add(u.High)
		}
	}
	hours := gin.H{"actual": actual, "projected": projected, "total": total, "low": low, "high": high}
	trend := gin.H{"method": fc.Method, "through": fc.AsOf.UTC().Format(time.RFC3339),
		"spend":     gin.H{"before_tax": true, "actual": fc.SoFar.Total, "total": fc.Forecast.Total, "low": fc.Low, "high": fc.High, "path": fc.Path},
		"gpu_hours": hours, "usage": fc.Usage}
	if fc.Method == insights.MethodTrend {
		trend["history_from"] = fc.HistoryFrom.UTC().Format(time.RFC3339)
		trend["weeks"] = fc.Weeks
	}
	body["trend"] = trend
	return body
}

func (s *Server) getTenants(svc TenantService) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := onlyParams(c.Request.URL.Query(), 128); err != nil {
			s.respondError(c, err)
			return
		}
		ts, err := svc.Tenants(c.Request.Context(), scopeOf(c))
		if err != nil {
			s.respondError(c, err)
			return
		}
		if ts == nil {
			ts = []usage.TenantInfo{}
		}
		// The scope tells a client (the portal) which view the key gets.
		c.JSON(http.StatusOK, gin.H{"scope": scopeOf(c).String(), "tenants": ts})
	}
}

func (s *Server) getChargeback(svc ChargebackService) gin.HandlerFunc {
	return func(c *gin.Context) {
		v := c.Request.URL.Query()
		if err := onlyParams(v, 64, "month", "idle", "format"); err != nil {
			s.respondError(c, err)
			return
		}
		scope := scopeOf(c)
		r := billing.ScopedChargebackRequest{Scope: scope, Month: v.Get("month"), Idle: v.Get("idle")}
		if err := r.Validate(); err != nil {
			s.respondError(c, err)
			return
		}
		writers := map[string]struct {
			write       func(io.Writer, chargeback.Report) error
			contentType string
		}{
			"json": {reports.WriteChargebackJSON, "application/json"},
			"csv":  {reports.WriteChargebackCSV, "text/csv; charset=utf-8"},
			"html": {reports.WriteChargebackHTML, "text/html; charset=utf-8"},
			"pdf":  {s.pdf.WriteChargeback, "application/pdf"},
		}
		format := c.DefaultQuery("format", "json")
		w, ok := writers[format]
		if !ok {
			s.respondError(c, badRequest{fmt.Sprintf("format %q: want json, csv, html or pdf", truncate(format, 16))})
			return
		}
		if scope.Kind == auth.KindTenant {
			s.respondError(c, fmt.Errorf("chargeback is for department and admin keys: %w", ErrForbidden))
			return
		}
		rep, err := svc.Chargeback(c.Request.Context(), r)
		if err != nil {
			s.respondError(c, err)
			return
		}
		// Rendered whole before any byte is sent: a report the PDF font
		// cannot show is a 422, not a 200 with an empty body.
		var b bytes.Buffer
		if err := w.write(&b, rep); err != nil {
			s.respondError(c, err)
			return
		}
		c.Data(http.StatusOK, w.contentType, b.Bytes())
	}
}
