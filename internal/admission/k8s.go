// Package admission is the quota service's Kubernetes adapter: it answers
// ValidatingAdmissionWebhook reviews (admission.k8s.io/v1) for Pods, whose
// NVIDIA GPU and MIG requests (device plugin resources, HAMi's shares, and
// Dynamic Resource Allocation claims) are checked against the quotas of
// the tenant their namespace maps to.
package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/quota"
)

// Resource names of NVIDIA's device plugin as the GPU operator sets it
// up: whole GPUs (nvidia.com/gpu; a MIG instance under the single
// strategy), MIG instances under the mixed strategy
// (nvidia.com/mig-3g.40gb, nvidia.com/mig-1g.10gb+me), and either with
// the .shared suffix time-slicing gives them when renameByDefault is set.
const (
	gpuResource  = "nvidia.com/gpu"
	migPrefix    = "nvidia.com/mig-"
	sharedSuffix = ".shared"
	// Pod annotations that say what the quota needs to know.
	ModelAnnotation    = "gpumeter.io/gpu-model"         // e.g. H100-SXM5-80GB
	DurationAnnotation = "gpumeter.io/expected-duration" // e.g. 6h
)

// Decider is the quota evaluator, in the webhook key's scope. A Pod's
// GPU resources are admitted together: all held, or none.
type Decider interface {
	AdmitAll(ctx context.Context, scope auth.Scope, rs []quota.Request) (quota.Decision, error)
}

// ErrMalformed is a body that is not an AdmissionReview request, a
// validation error: the webhook answers it with a 400, since it has no
// uid to answer to.
var ErrMalformed = fault.Validation(errors.New("malformed AdmissionReview"))

// Review decides an AdmissionReview and returns the review to send back.
// A Pod whose GPU requests would break a hard quota is denied with a
// message kubectl shows; Pods of unmapped namespaces, Pods without GPU
// requests and other objects are allowed. It reads no claims: a Pod with
// resourceClaims is denied (Webhook.WithClaims reads them).
func Review(ctx context.Context, d Decider, scope auth.Scope, cfg Config, body []byte) ([]byte, error) {
	return reviewWith(ctx, d, nil, scope, cfg, body)
}

func reviewWith(ctx context.Context, d Decider, claims ClaimReader, scope auth.Scope, cfg Config, body []byte) ([]byte, error) {
	var rev admissionv1.AdmissionReview
	dec := json.NewDecoder(strings.NewReader(string(body)))
	if err := dec.Decode(&rev); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if rev.APIVersion != "admission.k8s.io/v1" || rev.Kind != "AdmissionReview" || rev.Request == nil || rev.Request.UID == "" {
		return nil, fmt.Errorf("%w: want apiVersion admission.k8s.io/v1, kind AdmissionReview and a request with a uid", ErrMalformed)
	}
	resp := decide(ctx, d, claims, scope, cfg, rev.Request)
	resp.UID = rev.Request.UID
	out := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Response: resp}
	return json.Marshal(out)
}

func deny(code int32, format string, a ...any) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Status: metav1.StatusFailure, Code: code,
		Reason: metav1.StatusReasonForbidden, Message: "gpumeter: " + fmt.Sprintf(format, a...)}}
}

// modelWeigher weighs devices of model (as the Pod names it) by the GPU
// catalogue, and gives one GPU's memory in MiB for HAMi's memory grants
// (0 when the catalogue does not know the model).
func modelWeigher(model string) (weigher, int64) {
	canonical, known := gpucatalog.CanonicalModel(model)
	var memoryMiB int64
	if m, ok := gpucatalog.LookupModel(canonical); known && ok {
		memoryMiB = int64(m.MemoryGB) * 1024
	}
	return func(profile string) (decimal.Decimal, bool) {
		if !known {
			return decimal.Decimal{}, false
		}
		num, den, ok := gpucatalog.GPUEquivalent(gpucatalog.SKU(canonical, profile))
		if !ok {
			return decimal.Decimal{}, false
		}
		return decimal.NewFromInt(int64(num)).DivRound(decimal.NewFromInt(int64(den)), 18), true
	}, memoryMiB
}

func decide(ctx context.Context, d Decider, claims ClaimReader, scope auth.Scope, cfg Config, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
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
	model := pod.Annotations[ModelAnnotation]
	if model == "" {
		model = cfg.DefaultModel
	}
	weigh, memoryMiB := modelWeigher(model)
	wants, err := effective(pod.Spec, cfg, memoryMiB)
	if err != nil {
		return deny(400, "%v", err)
	}
	fromClaims, err := claimWants(ctx, claims, cfg.DRA, req.Namespace, pod.Spec, weigh)
	if err != nil {
		return deny(403, "%v", err)
	}
	var all wantList
	for _, w := range append(wants, fromClaims...) {
		if err := all.add(w); err != nil {
			return deny(400, "%v", err)
		}
	}
	wants = all.list
	if len(wants) == 0 {
		return allow
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
	// A server-side dry run (kubectl --dry-run=server) creates no Pod, so
	// it must hold nothing.
	dryRun := req.DryRun != nil && *req.DryRun
	reqs := make([]quota.Request, 0, len(wants))
	names := make([]string, 0, len(wants))
	for _, w := range wants {
		reqs = append(reqs, quota.Request{Tenant: tenant, GPUModel: model, Profile: w.profile, Count: int(w.count), Duration: duration, DryRun: dryRun, Share: w.share})
		names = append(names, w.what)
	}
	what := strings.Join(names, ", ")
	dec, err := d.AdmitAll(ctx, scope, reqs)
	if err != nil {
		return deny(403, "%s for tenant %s: %v", what, tenant, err)
	}
	if dec.CreditRefused {
		return deny(403, "%s is refused for tenant %s, whose credit cannot pay for it: %s", what, tenant, dec.Reason)
	}
	if !dec.Allowed {
		return deny(403, "%s would break a quota of tenant %s: %s", what, tenant, dec.Reason)
	}
	allow.Warnings = dec.Warnings
	return allow
}

// parseResource reads a container resource name: the MIG profile it
// asks for ("" for whole GPUs), ok false for a resource that is not an
// NVIDIA GPU or MIG instance.
func parseResource(name string, extra map[string]string) (profile string, ok bool, err error) {
	if p, ok := extra[name]; ok {
		return p, true, nil
	}
	base := strings.TrimSuffix(name, sharedSuffix)
	if base == gpuResource {
		return "", true, nil
	}
	p, isMIG := strings.CutPrefix(base, migPrefix)
	if !isMIG {
		return "", false, nil
	}
	if p == "" {
		return "", true, fmt.Errorf("resource %q names no MIG profile", name)
	}
	return p, true, nil
}

// want is what a Pod asks for of one MIG profile ("" for whole GPUs) at
// one share of each device (zero for whole devices), summed over the
// resource names and claims that give it (nvidia.com/gpu and
// nvidia.com/gpu.shared).
type want struct {
	profile string
	share   decimal.Decimal
	count   int64
	what    string // "nvidia.com/gpu x 3, nvidia.com/gpu.shared x 1"
}

// wantList sums wants of one profile and share, in the order first seen.
type wantList struct {
	list []want
	at   map[string]int
}

// add sums w into the list, refused once a sum is over quota.MaxCount.
func (l *wantList) add(w want) error {
	if w.count == 0 {
		return nil
	}
	if l.at == nil {
		l.at = map[string]int{}
	}
	key := w.profile + "@" + w.share.String()
	i, seen := l.at[key]
	if !seen {
		l.at[key] = len(l.list)
		l.list = append(l.list, w)
		return nil
	}
	sum, err := addCount(l.list[i].count, w.count)
	if err != nil {
		return fmt.Errorf("%s with %s: %w", l.list[i].what, w.what, err)
	}
	l.list[i].count = sum
	l.list[i].what += ", " + w.what
	return nil
}

// deviceCount is a container's quantity of a GPU resource, refused when
// negative or over quota.MaxCount (so sums of such counts stay far from
// overflowing int64); a fraction counts as the next whole device.
func deviceCount(q resource.Quantity) (int64, error) {
	if q.Sign() < 0 {
		return 0, fmt.Errorf("%s is negative", q.String())
	}
	if q.Cmp(*resource.NewQuantity(quota.MaxCount, resource.DecimalSI)) > 0 {
		return 0, fmt.Errorf("%s is more than %d devices", q.String(), quota.MaxCount)
	}
	return q.Value(), nil
}

// addCount is a+b for counts of at most quota.MaxCount, refused once the
// sum is over it.
func addCount(a, b int64) (int64, error) {
	if a < 0 || b < 0 || a > quota.MaxCount || b > quota.MaxCount || a+b > quota.MaxCount {
		return 0, fmt.Errorf("%d + %d devices is more than %d", a, b, quota.MaxCount)
	}
	return a + b, nil
}

// quantityOf is a container's quantity of one resource, ok false when it
// asks for none.
type quantityOf func(c corev1.Container) (q resource.Quantity, ok bool, err error)

// effective is the Pod's GPU and MIG requests by Kubernetes' rule (the
// scheduler's PodRequests): per resource, the containers' sum plus the
// sidecars' (init containers with restartPolicy Always, which keep
// running beside them), or, when larger, what an init container needs
// with the sidecars started before it. A container's extended resource is
// its request, else its limit (the two must be equal for extended
// resources). Resources giving the same profile are summed, in the order
// of their names. Under HAMi, nvidia.com/gpu is counted per granted share
// (hami.go), each share as a resource of its own; memoryMiB is one GPU's
// memory, for HAMi's memory grants (0 when not known).
func effective(spec corev1.PodSpec, cfg Config, memoryMiB int64) ([]want, error) {
	names := map[corev1.ResourceName]bool{}
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for _, c := range cs {
			for n := range c.Resources.Requests {
				names[n] = true
			}
			for n := range c.Resources.Limits {
				names[n] = true
			}
			if _, asks, _ := cfg.HAMi.share(c, memoryMiB); asks {
				names[gpuResource] = true // HAMi's default of one GPU
			}
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, string(n))
	}
	sort.Strings(sorted)
	var out wantList
	for _, s := range sorted {
		profile, ok, err := parseResource(s, cfg.GPUResources)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		name := corev1.ResourceName(s)
		if s == gpuResource {
			if err := hamiWants(&out, spec, cfg.HAMi, memoryMiB); err != nil {
				return nil, err
			}
			continue
		}
		v, err := podCount(spec, func(c corev1.Container) (resource.Quantity, bool, error) {
			q, ok := c.Resources.Requests[name]
			if !ok {
				q, ok = c.Resources.Limits[name]
			}
			return q, ok, nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s, err)
		}
		if err := out.add(want{profile: profile, count: v, what: fmt.Sprintf("%s x %d", s, v)}); err != nil {
			return nil, err
		}
	}
	return out.list, nil
}

// hamiWants adds the Pod's nvidia.com/gpu, by the share HAMi grants each
// container (the whole GPU where it grants none), each share counted by
// Kubernetes' rule as a resource of its own.
func hamiWants(out *wantList, spec corev1.PodSpec, h HAMiConfig, memoryMiB int64) error {
	shares := map[string]decimal.Decimal{}
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for _, c := range cs {
			sh, _, err := h.share(c, memoryMiB)
			if err != nil {
				return err
			}
			shares[sh.String()] = sh
		}
	}
	for _, key := range sortedKeys(shares) {
		sh := shares[key]
		v, err := podCount(spec, func(c corev1.Container) (resource.Quantity, bool, error) {
			csh, asks, err := h.share(c, memoryMiB)
			if err != nil || !csh.Equal(sh) {
				return resource.Quantity{}, false, err
			}
			q, ok := hamiGPUs(c, asks)
			return q, ok, nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", gpuResource, err)
		}
		w := want{count: v, what: fmt.Sprintf("%s x %d", gpuResource, v)}
		if !sh.Equal(one) {
			w.share = sh
			w.what += fmt.Sprintf(" at %s%% (HAMi)", sh.Mul(hundred).String())
		}
		if err := out.add(w); err != nil {
			return err
		}
	}
	return nil
}

// podCount is one resource's effective count in the Pod.
func podCount(spec corev1.PodSpec, of quantityOf) (int64, error) {
	count := func(c corev1.Container) (int64, error) {
		q, ok, err := of(c)
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, nil
		}
		v, err := deviceCount(q)
		if err != nil {
			return 0, fmt.Errorf("container %s: %w", c.Name, err)
		}
		return v, nil
	}
	var sum, sidecars, initMax int64
	for _, c := range spec.Containers {
		v, err := count(c)
		if err != nil {
			return 0, err
		}
		if sum, err = addCount(sum, v); err != nil {
			return 0, fmt.Errorf("containers in all: %w", err)
		}
	}
	for _, c := range spec.InitContainers {
		v, err := count(c)
		if err != nil {
			return 0, err
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			if sum, err = addCount(sum, v); err != nil {
				return 0, fmt.Errorf("containers and sidecars in all: %w", err)
			}
			if sidecars, err = addCount(sidecars, v); err != nil {
				return 0, fmt.Errorf("sidecars in all: %w", err)
			}
			initMax = max(initMax, sidecars)
			continue
		}
		withSidecars, err := addCount(v, sidecars)
		if err != nil {
			return 0, fmt.Errorf("init container %s with the sidecars before it: %w", c.Name, err)
		}
		initMax = max(initMax, withSidecars)
	}
	return max(sum, initMax), nil
}
