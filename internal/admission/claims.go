package admission

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/shopspring/decimal"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourceclient "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/rest"

	"github.com/gpumeter/gpumeter/internal/quota"
)

// ClaimReader reads the Dynamic Resource Allocation objects a Pod names
// from the API server (resource.k8s.io/v1): the webhook's service account
// needs get on resourceclaims and resourceclaimtemplates, nothing more.
type ClaimReader interface {
	ResourceClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error)
	ResourceClaimTemplate(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaimTemplate, error)
}

// APIClaims reads claims through the API server.
type APIClaims struct {
	client resourceclient.ResourceV1Interface
}

var _ ClaimReader = (*APIClaims)(nil)

// NewAPIClaims reads claims through client.
func NewAPIClaims(client resourceclient.ResourceV1Interface) *APIClaims {
	return &APIClaims{client: client}
}

// InClusterClaims reads claims with the pod's in-cluster service account.
func InClusterClaims() (*APIClaims, error) {
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("resource claims client: %w", err)
	}
	client, err := resourceclient.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("resource claims client: %w", err)
	}
	return NewAPIClaims(client), nil
}

// ResourceClaim gets one claim.
func (a *APIClaims) ResourceClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	return a.client.ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}

// ResourceClaimTemplate gets one template.
func (a *APIClaims) ResourceClaimTemplate(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaimTemplate, error) {
	return a.client.ResourceClaimTemplates(namespace).Get(ctx, name, metav1.GetOptions{})
}

// claimWants is what the Pod's resourceClaims ask for. A claim by
// resourceClaimName that is already reserved for a consumer counts
// nothing: it is shared, and held already by the Pod that first used it.
// A claim or template that cannot be read is an error (the Pod is
// denied): it is never free.
func claimWants(ctx context.Context, claims ClaimReader, cfg DRAConfig, namespace string, pod corev1.PodSpec, weigh weigher) ([]want, error) {
	if len(pod.ResourceClaims) == 0 {
		return nil, nil
	}
	if claims == nil {
		return nil, errors.New("pod has resourceClaims, which gpumeter cannot read here (serve reads them with its in-cluster service account): they are not admitted uncounted")
	}
	if cfg.LookupTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.LookupTimeout)
		defer cancel()
	}
	var out wantList
	seen := map[string]bool{}
	for _, pc := range pod.ResourceClaims {
		var spec resourcev1.ResourceClaimSpec
		var source string
		switch {
		case pc.ResourceClaimName != nil && pc.ResourceClaimTemplateName == nil:
			name := *pc.ResourceClaimName
			source = "ResourceClaim " + name
			if seen[source] {
				continue // one claim named twice is one set of devices
			}
			seen[source] = true
			rc, err := claims.ResourceClaim(ctx, namespace, name)
			if err != nil {
				return nil, lookupError(source, namespace, err)
			}
			if len(rc.Status.ReservedFor) > 0 {
				continue
			}
			spec = rc.Spec
		case pc.ResourceClaimTemplateName != nil && pc.ResourceClaimName == nil:
			name := *pc.ResourceClaimTemplateName
			source = "ResourceClaimTemplate " + name
			t, err := claims.ResourceClaimTemplate(ctx, namespace, name)
			if err != nil {
				return nil, lookupError(source, namespace, err)
			}
			spec = t.Spec.Spec
		default:
			return nil, fmt.Errorf("resourceClaims %q: give exactly one of resourceClaimName and resourceClaimTemplateName", pc.Name)
		}
		ws, err := cfg.count(spec, source, weigh)
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			if err := out.add(w); err != nil {
				return nil, err
			}
		}
	}
	return out.list, nil
}

func lookupError(source, namespace string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s not found in namespace %s: create claims and templates before the Pods that use them", source, namespace)
	}
	return fmt.Errorf("%s in namespace %s cannot be read, so its devices cannot be counted: %v", source, namespace, err)
}

// weigher is one device of a MIG profile ("" for a whole GPU) in
// GPU-equivalents of the Pod's model; ok false when the model has no
// such profile or is not known.
type weigher func(profile string) (decimal.Decimal, bool)

// alternative is one way a request can be met: its exactly, or one of
// its firstAvailable sub-requests.
type alternative struct {
	name, class string
	selectors   []resourcev1.DeviceSelector
	mode        resourcev1.DeviceAllocationMode
	count       int64
}

// count is what one claim spec asks for. A request with firstAvailable
// counts as the heaviest of its alternatives, since the scheduler picks
// whichever fits the node.
func (cfg DRAConfig) count(spec resourcev1.ResourceClaimSpec, source string, weigh weigher) ([]want, error) {
	var out wantList
	for _, r := range spec.Devices.Requests {
		var alts []alternative
		switch {
		case r.Exactly != nil && len(r.FirstAvailable) == 0:
			e := r.Exactly
			alts = append(alts, alternative{r.Name, e.DeviceClassName, e.Selectors, e.AllocationMode, e.Count})
		case r.Exactly == nil && len(r.FirstAvailable) > 0:
			for _, s := range r.FirstAvailable {
				alts = append(alts, alternative{r.Name + "/" + s.Name, s.DeviceClassName, s.Selectors, s.AllocationMode, s.Count})
			}
		default:
			return nil, fmt.Errorf("%s: request %q: give exactly one of exactly and firstAvailable", source, r.Name)
		}
		var best want
		var bestWeight decimal.Decimal
		for i, a := range alts {
			w, err := cfg.countAlternative(a, source, weigh)
			if err != nil {
				return nil, err
			}
			unit, ok := weigh(w.profile)
			if !ok {
				unit = one
			}
			if total := unit.Mul(decimal.NewFromInt(w.count)); i == 0 || total.GreaterThan(bestWeight) {
				best, bestWeight = w, total
			}
		}
		if err := out.add(best); err != nil {
			return nil, err
		}
	}
	return out.list, nil
}

// countAlternative is one alternative's devices: its class says what a
// device is, its mode and count how many.
func (cfg DRAConfig) countAlternative(a alternative, source string, weigh weigher) (want, error) {
	at := fmt.Sprintf("%s: request %q", source, a.name)
	dc, listed := cfg.DeviceClasses[a.class]
	if !listed {
		if cfg.UnknownDeviceClasses != UnknownWholeGPU {
			return want{}, fmt.Errorf("%s: device class %q is not one gpumeter counts (kubernetes.dra.device_classes); unknown classes are refused", at, a.class)
		}
		dc = DeviceClass{Kind: KindGPU}
	}
	if dc.Kind == KindNone {
		return want{}, nil
	}
	var n int64
	switch a.mode {
	case resourcev1.DeviceAllocationModeExactCount, "":
		n = a.count
		if n == 0 {
			n = 1 // the API's default
		}
		if n < 0 || n > quota.MaxCount {
			return want{}, fmt.Errorf("%s: count %d: want 1 to %d", at, n, quota.MaxCount)
		}
	case resourcev1.DeviceAllocationModeAll:
		if dc.AllCount == 0 {
			return want{}, fmt.Errorf("%s: allocationMode All of class %q is refused: how many devices it gets depends on the node (set kubernetes.dra.device_classes[%q].all_count to count it)", at, a.class, a.class)
		}
		n = dc.AllCount
	default:
		return want{}, fmt.Errorf("%s: allocationMode %q: want ExactCount or All", at, a.mode)
	}
	w := want{count: n}
	if dc.Kind == KindMIG {
		w.profile = dc.Profile
		if w.profile == "" {
			profiles := selectedProfiles(a.selectors)
			if len(profiles) == 0 {
				return want{}, fmt.Errorf("%s: class %q is MIG devices, and its selectors name no profile: select one with device.attributes['gpu.nvidia.com'].profile == '3g.40gb'", at, a.class)
			}
			w.profile = heaviest(profiles, weigh)
		}
	}
	w.what = fmt.Sprintf("%s request %s: %s", source, a.name, a.class)
	if w.profile != "" {
		w.what += " " + w.profile
	}
	w.what += fmt.Sprintf(" x %d", n)
	return w, nil
}

// heaviest is the profile of most GPU-equivalents; the first named when
// none can be weighed (the evaluator then refuses the unknown profile).
func heaviest(profiles []string, weigh weigher) string {
	best, bestWeight := profiles[0], decimal.Decimal{}
	for _, p := range profiles {
		if w, ok := weigh(p); ok && w.GreaterThan(bestWeight) {
			best, bestWeight = p, w
		}
	}
	return best
}

// NVIDIA's DRA driver names a MIG device's profile in its attribute
// "profile" of the domain gpu.nvidia.com, so CEL selectors compare
// device.attributes['gpu.nvidia.com'].profile with a string, or test it
// against a list.
var (
	profileAttr = `device\.attributes\[\s*['"]gpu\.nvidia\.com['"]\s*\]\s*\.\s*profile`
	quoted      = `['"]([^'"]+)['"]`
	profileEq   = regexp.MustCompile(profileAttr + `\s*==\s*` + quoted)
	profileEqR  = regexp.MustCompile(quoted + `\s*==\s*` + profileAttr)
	profileIn   = regexp.MustCompile(profileAttr + `\s+in\s*\[([^\]]*)\]`)
	quotedItem  = regexp.MustCompile(quoted)
)

// selectedProfiles are the MIG profiles a request's CEL selectors name,
// in order, each once.
func selectedProfiles(selectors []resourcev1.DeviceSelector) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		p = strings.TrimSpace(p)
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, s := range selectors {
		if s.CEL == nil {
			continue
		}
		expr := s.CEL.Expression
		for _, re := range []*regexp.Regexp{profileEq, profileEqR} {
			for _, m := range re.FindAllStringSubmatch(expr, -1) {
				add(m[1])
			}
		}
		for _, m := range profileIn.FindAllStringSubmatch(expr, -1) {
			for _, item := range quotedItem.FindAllStringSubmatch(m[1], -1) {
				add(item[1])
			}
		}
	}
	return out
}
