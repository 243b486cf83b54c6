package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/gpumeter/gpumeter/reports"
)

// respondError is the one map from errors to statuses: the categories by
// their status, the statuses outside them first, anything else a 500
// that shows nothing of the cause and logs it.
func TestRespondError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
		body   string // the message, whole
	}{
		{"validation", fmt.Errorf("usage: %w", fault.Validationf("from: not a time")), 400, "bad_request", "usage: from: not a time"},
		{"the handler's own bad request", badRequest{"tz: given 2 times"}, 400, "bad_request", "tz: given 2 times"},
		{"a pricing validation error", pricing.NewValidationError("input", []pricing.Problem{{Path: "usage[0].sku", Message: "unknown"}}, 0), 400, "bad_request", "invalid input: usage[0].sku: unknown"},
		{"an invalid admission", fmt.Errorf("%w: count 0: want 1 to 100000", quota.ErrInvalid), 400, "bad_request", "invalid admission request: count 0: want 1 to 100000"},
		{"not found", fault.NotFoundf("tenant %q: not found", "globex"), 404, "not_found", `tenant "globex": not found (in this key's scope)`},
		{"an unknown invoice", fmt.Errorf("invoice %q: %w", "GC-9", billing.ErrNotFound), 404, "not_found", `invoice "GC-9": no such invoice (in this key's scope)`},
		{"an unknown quota tenant", fmt.Errorf("tenant %q: %w", "x", quota.ErrUnknownTenant), 404, "not_found", `tenant "x": unknown tenant (in this key's scope)`},
		{"conflict", fault.Conflictf("invoice GC-1 is already void"), 409, "conflict", "invoice GC-1 is already void"},
		{"precondition", fault.Preconditionf("draft d1 cannot be finalized yet"), 412, "precondition_failed", "draft d1 cannot be finalized yet"},
		{"a glyph the PDF font lacks", fmt.Errorf("render: %w", &reports.GlyphError{Text: "研究部", Rune: '研', Font: "Go"}), 422, "unrenderable", ""},
		{"forbidden", fmt.Errorf("fleet capacity is for admin keys: %w", ErrForbidden), 403, "forbidden", "fleet capacity is for admin keys: forbidden"},
		// Auth errors have categories for other callers; the API answers 401.
		{"an unknown key, a not found elsewhere", fmt.Errorf("key %q: %w", "k", auth.ErrUnknownKey), 401, "unauthorized", "invalid API key"},
		{"a malformed token, a validation error elsewhere", auth.ErrMalformedToken, 401, "unauthorized", "invalid API key"},
		{"an expired key, a precondition elsewhere", auth.ErrExpired, 401, "unauthorized", "API key expired"},
		{"a revoked key", auth.ErrRevoked, 401, "unauthorized", "API key revoked"},
		{"a token in the URL", errPortalOnly, 401, "unauthorized", errPortalOnly.Error()},
		{"anything else", errors.New("clickhouse: connection refused to 10.0.0.7"), 500, "internal", "internal error (request )"},
		{"a category cut off as the server's own", fmt.Errorf("price acme: %w", fault.Internal(fault.Validationf("usage[3].sku: unknown SKU"))), 500, "internal", "internal error (request )"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			s := New(DefaultConfig(), prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&logs, nil)))
			rec := httptest.NewRecorder()
			c, _ := gin.CreateTestContext(rec)
			c.Request = httptest.NewRequest(http.MethodGet, "/v1/x", nil)
			s.respondError(c, tc.err)
			var e apiError
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatalf("body %q: %v", rec.Body.String(), err)
			}
			if rec.Code != tc.status || e.Code != tc.code || (tc.body != "" && e.Message != tc.body) {
				t.Fatalf("%d %+v, want %d %s %q", rec.Code, e, tc.status, tc.code, tc.body)
			}
			if logged := strings.Contains(logs.String(), "request failed"); logged != (tc.status == 500) {
				t.Errorf("logged %t: %s", logged, logs.String())
			}
			if tc.status == 500 && !strings.Contains(logs.String(), tc.err.Error()) {
				t.Errorf("a 500 without its cause in the log: %s", logs.String())
			}
		})
	}
}
