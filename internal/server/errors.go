package server

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/reports"
)

// apiError is the body of every API error: a stable code and a message
// for people.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(c *gin.Context, status int, code, message string) {
	c.AbortWithStatusJSON(status, apiError{Code: code, Message: message})
}

// ErrInvalidInput marks a service error caused by the request (its
// message is shown): a 400.
var ErrInvalidInput = errors.New("invalid input")

// badRequest is an input problem the handler found itself.
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

// respondError maps a service error to its status; this is the only place
// that does. Anything unexpected is a 500 with a generic body, the cause
// in the log.
func (s *Server) respondError(c *gin.Context, err error) {
	var br badRequest
	var glyph *reports.GlyphError
	switch {
	case errors.As(err, &glyph):
		// The document holds text the configured PDF font cannot show: the
		// operator's to fix (reports.pdf_font); other formats still work.
		writeError(c, http.StatusUnprocessableEntity, "unrenderable", glyph.Error()+"; the other formats show it")
	case errors.As(err, &br):
		writeError(c, http.StatusBadRequest, "bad_request", br.msg)
	case errors.Is(err, ErrInvalidInput), isInsightsInput(err):
		writeError(c, http.StatusBadRequest, "bad_request", err.Error())
	case errors.Is(err, billing.ErrNotFound):
		writeError(c, http.StatusNotFound, "not_found", "no such invoice in this key's scope")
	case errors.Is(err, ErrNotFound):
		writeError(c, http.StatusNotFound, "not_found", err.Error()+" (in this key's scope)")
	case errors.Is(err, ErrForbidden):
		writeError(c, http.StatusForbidden, "forbidden", err.Error())
	case errors.Is(err, auth.ErrUnknownKey), errors.Is(err, auth.ErrWrongSecret), errors.Is(err, auth.ErrMalformedToken):
		writeError(c, http.StatusUnauthorized, "unauthorized", "invalid API key")
	case errors.Is(err, auth.ErrExpired):
		writeError(c, http.StatusUnauthorized, "unauthorized", "API key expired")
	case errors.Is(err, auth.ErrRevoked):
		writeError(c, http.StatusUnauthorized, "unauthorized", "API key revoked")
	default:
		s.logger.Error("request failed", "route", route(c), "err", err, "request_id", requestIDOf(c))
		writeError(c, http.StatusInternalServerError, "internal", "internal error (request "+requestIDOf(c)+")")
	}
}
