package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/quota"
)

// QuotaService decides admissions and reports quota state, from memory
// (quota.Service).
type QuotaService interface {
	// AdmitAll decides one tenant's requests as one admission: all are
	// held, under one id, or none is.
	AdmitAll(ctx context.Context, scope auth.Scope, rs []quota.Request) (quota.Decision, error)
	State(ctx context.Context, scope auth.Scope) ([]quota.RuleState, time.Time, error)
}

// maxAdmissionBody bounds POST /v1/admission.
const maxAdmissionBody = 64 << 10

// admissionBody is POST /v1/admission's JSON: one kind of device
// (gpu_model, profile, count), or several as parts (a Slurm job asking for
// two GPU types), decided together.
type admissionBody struct {
	Tenant           string          `json:"tenant"`
	GPUModel         string          `json:"gpu_model"`
	Profile          string          `json:"profile"`
	Count            int             `json:"count"`
	Parts            []admissionPart `json:"parts"`
	ExpectedDuration string          `json:"expected_duration"` // Go duration: 90m, 2h
	// DryRun decides without holding anything (no admission_id).
	DryRun bool `json:"dry_run"`
}

type admissionPart struct {
	GPUModel string `json:"gpu_model"`
	Profile  string `json:"profile"`
	Count    int    `json:"count"`
}

// maxAdmissionParts bounds the parts of one admission: the evaluator's.
const maxAdmissionParts = quota.MaxParts

const admissionFields = `(want {"tenant","gpu_model","profile","count","expected_duration","dry_run"} or {"tenant","parts":[{"gpu_model","profile","count"}],"expected_duration","dry_run"})`

func decodeAdmission(r io.Reader, scope auth.Scope) ([]quota.Request, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxAdmissionBody+1))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, badRequest{"body over the server's limit"}
		}
		return nil, badRequest{"read body: " + err.Error()}
	}
	if len(data) > maxAdmissionBody {
		return nil, badRequest{fmt.Sprintf("body over %d bytes", maxAdmissionBody)}
	}
	if !validJSONText(data) {
		return nil, badRequest{"body: not valid UTF-8 text"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var b admissionBody
	if err := dec.Decode(&b); err != nil {
		return nil, badRequest{"body: " + err.Error() + " " + admissionFields}
	}
	if dec.More() {
		return nil, badRequest{"body: one JSON object only"}
	}
	if b.Tenant == "" && scope.Kind == auth.KindTenant {
		b.Tenant = scope.Name
	}
	d, err := time.ParseDuration(b.ExpectedDuration)
	if err != nil {
		return nil, badRequest{fmt.Sprintf("expected_duration %q: want a duration such as 90m or 2h", truncate(b.ExpectedDuration, 32))}
	}
	parts := b.Parts
	switch {
	case len(parts) == 0:
		parts = []admissionPart{{GPUModel: b.GPUModel, Profile: b.Profile, Count: b.Count}}
	case b.GPUModel != "" || b.Profile != "" || b.Count != 0:
		return nil, badRequest{"body: gpu_model, profile and count, or parts, not both " + admissionFields}
	case len(parts) > maxAdmissionParts:
		return nil, badRequest{fmt.Sprintf("parts: %d, at most %d", len(parts), maxAdmissionParts)}
	}
	reqs := make([]quota.Request, 0, len(parts))
	for i, p := range parts {
		req := quota.Request{Tenant: b.Tenant, GPUModel: p.GPUModel, Profile: p.Profile, Count: p.Count, Duration: d, DryRun: b.DryRun}
		if err := req.Validate(); err != nil {
			if len(b.Parts) > 0 {
				return nil, badRequest{fmt.Sprintf("parts[%d]: %v", i, err)}
			}
			return nil, badRequest{err.Error()}
		}
		reqs = append(reqs, req)
	}
	return reqs, nil
}

func (s *Server) postAdmission(svc QuotaService) gin.HandlerFunc {
	return func(c *gin.Context) {
		scope := scopeOf(c)
		reqs, err := decodeAdmission(c.Request.Body, scope)
		if err != nil {
			s.respondError(c, err)
			return
		}
		d, err := svc.AdmitAll(c.Request.Context(), scope, reqs)
		if err != nil {
			s.respondError(c, err) // quota.ErrUnknownTenant: 404, quota.ErrInvalid: 400
			return
		}
		c.JSON(http.StatusOK, admissionResponseOf(d))
	}
}

// admissionResponse is POST /v1/admission's answer; amounts are decimal
// strings.
type admissionResponse struct {
	AdmissionID    string            `json:"admission_id"` // empty for a dry run or a denial: nothing is held
	Allowed        bool              `json:"allowed"`
	DryRun         bool              `json:"dry_run,omitempty"`
	Reason         string            `json:"reason"`
	Headroom       map[string]string `json:"headroom"`
	Warnings       []string          `json:"warnings"`
	Stale          bool              `json:"stale"`
	GPUEquivalents string            `json:"gpu_equivalents"`
	GPUHours       string            `json:"gpu_hours"`
	Spend          string            `json:"spend"`
}

func admissionResponseOf(d quota.Decision) admissionResponse {
	out := admissionResponse{AdmissionID: d.ID, Allowed: d.Allowed, DryRun: d.DryRun, Reason: d.Reason, Headroom: make(map[string]string, len(d.Headroom)),
		Warnings: d.Warnings, Stale: d.Stale, GPUEquivalents: d.Demand.GPUs.Round(9).String(),
		GPUHours: d.Demand.GPUHours.Round(9).String(), Spend: d.Demand.Spend.Round(9).String()}
	for m, v := range d.Headroom {
		out.Headroom[string(m)] = v.Round(9).String()
	}
	if out.Warnings == nil {
		out.Warnings = []string{}
	}
	return out
}

func (s *Server) getQuotas(svc QuotaService) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := onlyParams(c.Request.URL.Query(), 64); err != nil {
			s.respondError(c, err)
			return
		}
		states, at, err := svc.State(c.Request.Context(), scopeOf(c))
		if err != nil {
			s.respondError(c, err)
			return
		}
		out := make([]gin.H, 0, len(states))
		for _, st := range states {
			h := gin.H{"subject": st.Subject, "metric": st.Metric, "limit": st.Limit.String(), "hard": st.Hard.Round(9).String(),
				"used": st.Used.Round(9).String(), "admitted": st.Admitted.Round(9).String(),
				"headroom": st.Hard.Sub(st.Used).Sub(st.Admitted).Round(9).String()}
			if st.Tenant != "" {
				h["tenant"] = st.Tenant
			}
			if st.Dept != "" {
				h["department"] = st.Dept
			}
			if st.GPUModel != "" {
				h["gpu_model"] = st.GPUModel
			}
			if st.Soft != nil {
				h["soft"] = st.Soft.Round(9).String()
			}
			out = append(out, h)
		}
		asOf := ""
		if !at.IsZero() {
			asOf = at.UTC().Format(time.RFC3339)
		}
		c.JSON(http.StatusOK, gin.H{"as_of": asOf, "quotas": out})
	}
}

// KubernetesService answers ValidatingAdmissionWebhook reviews: the
// AdmissionReview in, the AdmissionReview to return out
// (admission.Webhook).
type KubernetesService interface {
	Review(ctx context.Context, scope auth.Scope, body []byte) ([]byte, error)
}

func (s *Server) postK8sAdmission(svc KubernetesService) gin.HandlerFunc {
	return func(c *gin.Context) {
		body, err := io.ReadAll(io.LimitReader(c.Request.Body, s.cfg.MaxBodyBytes+1))
		if err != nil || int64(len(body)) > s.cfg.MaxBodyBytes {
			s.respondError(c, badRequest{fmt.Sprintf("AdmissionReview over %d bytes or unreadable", s.cfg.MaxBodyBytes)})
			return
		}
		out, err := svc.Review(c.Request.Context(), scopeOf(c), body)
		if err != nil {
			s.respondError(c, err)
			return
		}
		c.Data(http.StatusOK, "application/json", out)
	}
}
