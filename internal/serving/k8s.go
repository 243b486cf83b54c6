package serving

import (
	"context"
	"errors"

	"github.com/gpumeter/gpumeter/internal/admission"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/server"
)

// Kubernetes answers admission reviews from the quota evaluator.
type Kubernetes struct {
	quotas *Quotas
	cfg    admission.Config
}

var _ server.KubernetesService = (*Kubernetes)(nil)

// NewKubernetes maps namespaces to tenants by cfg.
func NewKubernetes(q *Quotas, cfg admission.Config) *Kubernetes {
	return &Kubernetes{quotas: q, cfg: cfg}
}

// Review decides one AdmissionReview.
func (k *Kubernetes) Review(ctx context.Context, scope auth.Scope, body []byte) ([]byte, error) {
	out, err := admission.Review(ctx, k.quotas, scope, k.cfg, body)
	if errors.Is(err, admission.ErrMalformed) {
		// admission has no category of its own yet: a malformed review is
		// bad input.
		return nil, fault.Validation(err)
	}
	return out, err
}

// The webhook admits a Pod's GPU resources together through Quotas.
var _ admission.Decider = (*Quotas)(nil)
