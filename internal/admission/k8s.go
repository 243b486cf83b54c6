// Package admission answers Kubernetes ValidatingAdmissionWebhook reviews
// (admission.k8s.io/v1) for Pods: their NVIDIA GPU and MIG requests are
// checked against the quotas of the tenant their namespace maps to.
package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/quota"
)

// Resource names of NVIDIA's device plugin: whole GPUs, and MIG
// instances under the mixed strategy (nvidia.com/mig-3g.40gb).
const (
	gpuResource = "nvidia.com/gpu"
	migPrefix   = "nvidia.com/mig-"
	// Pod annotations that say what the quota needs to know.
	ModelAnnotation    = "gpumeter.io/gpu-model"         // e.g. H100-SXM5-80GB
	DurationAnnotation = "gpumeter.io/expected-duration" // e.g. 6h
)

// Config maps namespaces to tenants and fills in what a Pod leaves out.
type Config struct {
	Namespaces      map[string]string `yaml:"namespaces"`       // namespace → tenant
	DefaultModel    string            `yaml:"default_model"`    // when a Pod names none
	DefaultDuration time.Duration     `yaml:"default_duration"` // when a Pod names none
}

// DefaultConfig assumes work runs an hour.
func DefaultConfig() Config { return Config{DefaultDuration: time.Hour} }

// Decider is the quota evaluator, in the webhook key's scope.
type Decider interface {
	Admit(ctx context.Context, scope auth.Scope, r quota.Request) (quota.Decision, error)
}

// ErrMalformed is a body that is not an AdmissionReview request: the
// webhook answers it with a 400, since it has no uid to answer to.
var ErrMalformed = errors.New("malformed AdmissionReview")

// Review decides an AdmissionReview and returns the review to send back.
// A Pod whose GPU requests would break a hard quota is denied with a
// message kubectl shows; Pods of unmapped namespaces, Pods without GPU
// requests and other objects are allowed.
func Review(ctx context.Context, d Decider, scope auth.Scope, cfg Config, body []byte) ([]byte, error) {
	var rev admissionv1.AdmissionReview
	dec := json.NewDecoder(strings.NewReader(string(body)))
	if err := dec.Decode(&rev); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if rev.APIVersion != "admission.k8s.io/v1" || rev.Kind != "AdmissionReview" || rev.Request == nil || rev.Request.UID == "" {
		return nil, fmt.Errorf("%w: want apiVersion admission.k8s.io/v1, kind AdmissionReview and a request with a uid", ErrMalformed)
	}
	resp := decide(ctx, d, scope, cfg, rev.Request)
	resp.UID = rev.Request.UID
	out := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Response: resp}
	return json.Marshal(out)
}

func deny(code int32, format string, a ...any) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Status: metav1.StatusFailure, Code: code,
		Reason: metav1.StatusReasonForbidden, Message: "gpumeter: " + fmt.Sprintf(format, a...)}}
}

func decide(ctx context.Context, d Decider, scope auth.Scope, cfg Config, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	if req.Kind.Kind != "Pod" || (req.Operation != admissionv1.Create && req.Operation != "") {
		return allow
	}
	tenant, ok := cfg.Namespaces[req.Namespace]
	if !ok {
		return allow // not a namespace gpumeter meters
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(400, "the Pod in the review does not decode: %v", err)
	}
	wants := effective(pod.Spec)
	if len(wants) == 0 {
		return allow
	}
	model := pod.Annotations[ModelAnnotation]
	if model == "" {
		model = cfg.DefaultModel
	}
	if model == "" {
		return deny(400, "pod requests GPUs but names no GPU model: set the annotation %s", ModelAnnotation)
	}
	duration := cfg.DefaultDuration
	if v := pod.Annotations[DurationAnnotation]; v != "" {
		dd, err := time.ParseDuration(v)
		if err != nil {
			return deny(400, "annotation %s %q: want a duration such as 6h", DurationAnnotation, v)
		}
		duration = dd
	}
	resources := make([]string, 0, len(wants))
	for r := range wants {
		resources = append(resources, r)
	}
	sort.Strings(resources)
	var warnings []string
	for _, r := range resources {
		qr := quota.Request{Tenant: tenant, GPUModel: model, Count: int(wants[r]), Duration: duration}
		if p, ok := strings.CutPrefix(r, migPrefix); ok {
			qr.Profile = p
		}
		dec, err := d.Admit(ctx, scope, qr)
		if err != nil {
			return deny(403, "%s x %d for tenant %s: %v", r, wants[r], tenant, err)
		}
		if !dec.Allowed {
			return deny(403, "%s x %d would break a quota of tenant %s: %s", r, wants[r], tenant, dec.Reason)
		}
		warnings = append(warnings, dec.Warnings...)
	}
	allow.Warnings = warnings
	return allow
}

// effective is the Pod's GPU and MIG requests by Kubernetes' rule: per
// resource the larger of the containers' sum and the largest init
// container. A container's extended resource is its request, else its
// limit (the two must be equal for extended resources).
func effective(spec corev1.PodSpec) map[string]int64 {
	count := func(c corev1.Container, name corev1.ResourceName) int64 {
		if q, ok := c.Resources.Requests[name]; ok {
			return q.Value()
		}
		if q, ok := c.Resources.Limits[name]; ok {
			return q.Value()
		}
		return 0
	}
	names := map[corev1.ResourceName]bool{}
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for _, c := range cs {
			for n := range c.Resources.Requests {
				names[n] = true
			}
			for n := range c.Resources.Limits {
				names[n] = true
			}
		}
	}
	out := map[string]int64{}
	for n := range names {
		s := string(n)
		if s != gpuResource && !strings.HasPrefix(s, migPrefix) {
			continue
		}
		var sum, initMax int64
		for _, c := range spec.Containers {
			sum += count(c, n)
		}
		for _, c := range spec.InitContainers {
			initMax = max(initMax, count(c, n))
		}
		if v := max(sum, initMax); v > 0 {
			out[s] = v
		}
	}
	return out
}
