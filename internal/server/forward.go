package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/gpumeter/gpumeter/internal/leader"
)

// AdmissionForwarder sends admissions to the leader replica when another
// replica leads (leader.Forwarder); local is true when this one decides.
type AdmissionForwarder interface {
	Forward(ctx context.Context, path string, header http.Header, body []byte) (out leader.Forwarded, local bool, err error)
}

// forwardAdmission answers an admission from the leader when this
// replica does not lead, and 503 when no leader can be reached, so that
// the webhook's failurePolicy decides (docs/ha.md). With no forwarder, or
// while leading, the route's own handler decides.
func (s *Server) forwardAdmission(fwd AdmissionForwarder) gin.HandlerFunc {
	return func(c *gin.Context) {
		if fwd == nil {
			c.Next()
			return
		}
		body, err := io.ReadAll(io.LimitReader(c.Request.Body, s.cfg.MaxBodyBytes+1))
		if err != nil || int64(len(body)) > s.cfg.MaxBodyBytes {
			s.respondError(c, badRequest{fmt.Sprintf("body over %d bytes or unreadable", s.cfg.MaxBodyBytes)})
			return
		}
		out, local, err := fwd.Forward(c.Request.Context(), c.Request.URL.Path, c.Request.Header, body)
		switch {
		case local:
			c.Request.Body = io.NopCloser(bytes.NewReader(body))
			c.Next()
		case err != nil:
			if !errors.Is(err, leader.ErrNoLeader) {
				s.logger.Warn("forward admission", "err", err)
			}
			c.Header("Retry-After", "1")
			writeError(c, http.StatusServiceUnavailable, "no_leader", err.Error())
		default:
			c.Header("Gpumeter-Decided-By", out.Leader)
			c.Data(out.Status, out.ContentType, out.Body)
			c.Abort()
		}
	}
}
