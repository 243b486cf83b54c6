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

// AdmissionForwarder sends admissions, and reads of the admitted work, to
// the leader replica when another replica leads (leader.Forwarder); local
// is true when this one leads and answers itself.
type AdmissionForwarder interface {
	Forward(ctx context.Context, path string, header http.Header, body []byte) (out leader.Forwarded, local bool, err error)
	ForwardGet(ctx context.Context, path, rawQuery string, header http.Header) (out leader.Forwarded, local bool, err error)
}

// AnsweredByHeader names, on a read only the leader can answer whole
// (GET /v1/quotas), whose figures a follower's answer holds: the
// leader's identity when the leader answered, AnsweredLocally when the
// follower answered from its own snapshot. Absent on a replica that leads
// or runs alone: its own figures are the leader's.
const AnsweredByHeader = "Gpumeter-Answered-By"

// AnsweredLocally is AnsweredByHeader's value when a follower could not
// ask the leader: its admitted figures leave the leader's out.
const AnsweredLocally = "local"

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

// forwardRead answers a read from the leader when this replica does not
// lead, so that admitted work, which only the leader holds, is counted.
// A read never fails for want of a leader: with none reachable, or an
// answer from it other than 200, this replica answers itself and says so
// (AnsweredLocally). Only a read another replica forwarded here, to a
// replica that no longer leads, gets 503: its sender then answers itself.
func (s *Server) forwardRead(fwd AdmissionForwarder) gin.HandlerFunc {
	return func(c *gin.Context) {
		if fwd == nil {
			c.Next()
			return
		}
		out, local, err := fwd.ForwardGet(c.Request.Context(), c.Request.URL.Path, c.Request.URL.RawQuery, c.Request.Header)
		switch {
		case local:
			c.Next()
		case err == nil && out.Status == http.StatusOK:
			c.Header(AnsweredByHeader, out.Leader)
			c.Data(out.Status, out.ContentType, out.Body)
			c.Abort()
		case err != nil && c.GetHeader(leader.ForwardedHeader) != "":
			c.Header("Retry-After", "1")
			writeError(c, http.StatusServiceUnavailable, "no_leader", err.Error())
		default:
			if err != nil && !errors.Is(err, leader.ErrNoLeader) {
				s.logger.Warn("forward read", "path", c.Request.URL.Path, "err", err)
			} else {
				s.logger.Debug("read answered here, not by the leader", "path", c.Request.URL.Path, "status", out.Status, "err", err)
			}
			c.Header(AnsweredByHeader, AnsweredLocally)
			c.Next()
		}
	}
}
