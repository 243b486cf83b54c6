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
}

// The webhook admits a Pod's GPU resources together through the quota
// service.
var _ Decider = (*quota.Service)(nil)

// NewWebhook maps namespaces to tenants by cfg and decides through d.
func NewWebhook(d Decider, cfg Config) *Webhook {
	return &Webhook{decider: d, cfg: cfg}
}

// Review decides one AdmissionReview in the webhook key's scope; a body
// that is none is ErrMalformed (a validation error).
func (w *Webhook) Review(ctx context.Context, scope auth.Scope, body []byte) ([]byte, error) {
	return Review(ctx, w.decider, scope, w.cfg, body)
}
