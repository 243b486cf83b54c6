package server

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/reports"
)

// apiError is the body of every API error: a stable code and a message
// for people.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError writes an error body. Called directly, it answers what is no
// service's error, each with the status HTTP has for it: over a rate limit
// (429, with Retry-After), no key at all (401), a portal token's write
// (403), a body over the limit (413), a path no route serves or insights
// not served here (404), a handler's panic (500). Every error a handler
// or service returns goes through respondError.
func writeError(c *gin.Context, status int, code, message string) {
	c.AbortWithStatusJSON(status, apiError{Code: code, Message: message})
}

// ErrForbidden is a request the key's kind of scope may not make at all.
var ErrForbidden = errors.New("forbidden")

// badRequest is an input problem the handler found itself: a validation
// error whose message is shown.
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

// Is puts badRequest in the validation category.
func (e badRequest) Is(target error) bool { return target == fault.ErrValidation }

// respondError maps an error to its status; this is the only place that
// does. The fault categories answer 400, 404, 409 and 412 with the error's
// message; anything else is a 500 with a generic body, the cause in the
// log. The statuses outside the categories come first, each for its
// reason: the same error may carry a category for other callers (an
// unknown key is a not found to `keys revoke`, a 401 here).
func (s *Server) respondError(c *gin.Context, err error) {
	var glyph *reports.GlyphError
	switch {
	case errors.As(err, &glyph):
		// 422, not 400: the request is sound, but the document holds text
		// the configured PDF font cannot show: the operator's to fix
		// (reports.pdf_font); other formats still work.
		writeError(c, http.StatusUnprocessableEntity, "unrenderable", glyph.Error()+"; the other formats show it")
	// 401: the credential, whatever its category, is not one to serve.
	case errors.Is(err, auth.ErrUnknownKey), errors.Is(err, auth.ErrWrongSecret), errors.Is(err, auth.ErrMalformedToken):
		writeError(c, http.StatusUnauthorized, "unauthorized", "invalid API key")
	case errors.Is(err, auth.ErrExpired):
		writeError(c, http.StatusUnauthorized, "unauthorized", "API key expired")
	case errors.Is(err, auth.ErrRevoked):
		writeError(c, http.StatusUnauthorized, "unauthorized", "API key revoked")
	case errors.Is(err, errPortalOnly):
		writeError(c, http.StatusUnauthorized, "unauthorized", err.Error())
	case errors.Is(err, ErrForbidden):
		// 403: the key is valid and the request well-formed, but its kind
		// of scope may never make it.
		writeError(c, http.StatusForbidden, "forbidden", err.Error())
	case fault.IsValidation(err):
		writeError(c, http.StatusBadRequest, "bad_request", err.Error())
	case fault.IsNotFound(err):
		// Absent and outside the scope are the same to the caller.
		writeError(c, http.StatusNotFound, "not_found", err.Error()+" (in this key's scope)")
	case fault.IsConflict(err):
		writeError(c, http.StatusConflict, "conflict", err.Error())
	case fault.IsPrecondition(err):
		writeError(c, http.StatusPreconditionFailed, "precondition_failed", err.Error())
	default:
		s.logger.Error("request failed", "route", route(c), "err", err, "request_id", requestIDOf(c))
		writeError(c, http.StatusInternalServerError, "internal", "internal error (request "+requestIDOf(c)+")")
	}
}
