package admission

import (
	"context"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/quota"
)

// Webhook answers the admission reviews the API receives (POST
// /v1/admission/k8s) from a Decider, with the configured namespaces.
type Webhook struct {
	decider Decider
	cfg     Config
	claims  ClaimReader
}

// The webhook admits a Pod's GPU resources together through the quota
// service.
var _ Decider = (*quota.Service)(nil)

// NewWebhook maps namespaces to tenants by cfg and decides through d.
func NewWebhook(d Decider, cfg Config) *Webhook {
	return &Webhook{decider: d, cfg: cfg}
}

// WithClaims reads the ResourceClaims and templates Pods name through r;
// without it, a Pod with resourceClaims is denied.
func (w *Webhook) WithClaims(r ClaimReader) *Webhook {
	w.claims = r
	return w
}

// Review decides one AdmissionReview in the webhook key's scope; a body
// that is none is ErrMalformed (a validation error).
func (w *Webhook) Review(ctx context.Context, scope auth.Scope, body []byte) ([]byte, error) {
	return reviewWith(ctx, w.decider, w.claims, scope, w.cfg, body)
}
