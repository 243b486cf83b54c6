package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/quota"
)

// evaluatorDecider decides through a real quota evaluator and keeps the
// last decision, whose demand is the Pod's GPU-equivalents.
type evaluatorDecider struct {
	e    *quota.Evaluator
	last quota.Decision
	n    int
}

func (d *evaluatorDecider) AdmitAll(_ context.Context, _ auth.Scope, rs []quota.Request) (quota.Decision, error) {
	d.n++
	dec, err := d.e.AdmitAll(rs)
	d.last = dec
	return dec, err
}

// newEvaluator holds tenant acme to limit concurrent GPU-equivalents,
// with usedGPUs H100s in use.
func newEvaluator(t testing.TB, limit, usedGPUs string) *evaluatorDecider {
	t.Helper()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	cfg := quota.DefaultConfig()
	cfg.Rules = []quota.Rule{{Tenant: "acme", ConcurrentGPUs: &quota.Limit{Limit: decimal.RequireFromString(limit)}}}
	e, err := quota.NewEvaluator(cfg, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	e.Update(quota.Snapshot{At: now, Tenants: map[string]quota.TenantState{"acme": {Tenant: "acme",
		Concurrent: map[string]decimal.Decimal{"H100-SXM5-80GB": decimal.RequireFromString(usedGPUs)}}}})
	return &evaluatorDecider{e: e}
}

// claimObjects are testdata/dra/claims.json as API objects.
func claimObjects(t testing.TB) []runtime.Object {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "dra", "claims.json"))
	if err != nil {
		t.Fatal(err)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		t.Fatal(err)
	}
	var out []runtime.Object
	for _, item := range items {
		var kind struct{ Kind string }
		if err := json.Unmarshal(item, &kind); err != nil {
			t.Fatal(err)
		}
		var obj runtime.Object
		switch kind.Kind {
		case "ResourceClaim":
			obj = &resourcev1.ResourceClaim{}
		case "ResourceClaimTemplate":
			obj = &resourcev1.ResourceClaimTemplate{}
		default:
			t.Fatalf("claims.json: kind %q", kind.Kind)
		}
		if err := json.Unmarshal(item, obj); err != nil {
			t.Fatal(err)
		}
		out = append(out, obj)
	}
	return out
}

// podReview wraps testdata/dra/<file>, with replacements applied in
// pairs, in an AdmissionReview as the API server sends it.
func podReview(t testing.TB, file string, replace ...string) []byte {
	t.Helper()
	pod, err := os.ReadFile(filepath.Join("testdata", "dra", file))
	if err != nil {
		t.Fatal(err)
	}
	obj := strings.NewReplacer(replace...).Replace(string(pod))
	return fmt.Appendf(nil, `{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
  "request": {"uid": "b1c2d3e4-0000-4000-8000-000000000036", "kind": {"group": "", "version": "v1", "kind": "Pod"},
    "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "team-acme", "operation": "CREATE",
    "userInfo": {"username": "alice"}, "object": %s}}`, obj)
}

type reviewAnswer struct {
	Response struct {
		UID     string
		Allowed bool
		Status  *struct {
			Code    int
			Message string
		} `json:"status"`
	}
}

func decodeAnswer(t *testing.T, out []byte) reviewAnswer {
	t.Helper()
	var a reviewAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatalf("answer %s: %v", out, err)
	}
	return a
}

func claimsConfig() Config {
	cfg := DefaultConfig()
	cfg.Namespaces = map[string]string{"team-acme": "acme"}
	cfg.DefaultModel = "H100-SXM5-80GB"
	return cfg
}

// A Pod's claims count in GPU-equivalents of its model: whole GPUs as
// one, MIG devices by the profile their CEL selectors name, the heaviest
// of a prioritized list; unknown classes, allocationMode All and MIG
// requests without a profile are denied unless configured otherwise.
func TestReviewCountsClaims(t *testing.T) {
	template := func(name string) []string { return []string{`"double-gpu"`, `"` + name + `"`} }
	for _, tc := range []struct {
		name      string
		file      string
		replace   []string
		cfg       func(*Config)
		allowed   bool
		gpus      string // the demand asked of the evaluator; "" when it is not asked
		message   string // in the denial
		evaluated bool
	}{
		{name: "template, two whole GPUs (NVIDIA's gpu-test-count)", file: "pod-template.json", allowed: true, gpus: "2"},
		{name: "template, MIG devices weighted: 1g + 2g + 2 x 3g = 9/7", file: "pod-template.json", replace: template("mig-devices"), allowed: true,
			gpus: "1.285714285714285714"},
		{name: "firstAvailable counts its heaviest: 2 x 4g.40gb", file: "pod-template.json", replace: template("gpu-or-migs"), allowed: true,
			gpus: "1.142857142857142857"},
		{name: "allocationMode All is refused by default", file: "pod-template.json", replace: template("all-gpus"),
			message: `allocationMode All of class "gpu.nvidia.com" is refused`},
		{name: "allocationMode All counts the class's all_count", file: "pod-template.json", replace: template("all-gpus"), allowed: true, gpus: "8",
			cfg: func(c *Config) { c.DRA.DeviceClasses[nvidiaGPUClass] = DeviceClass{Kind: KindGPU, AllCount: 8} }},
		{name: "unknown device class denied", file: "pod-template.json", replace: template("example-device"),
			message: `device class "resource.example.com" is not one gpumeter counts`},
		{name: "unknown device class as whole GPUs", file: "pod-template.json", replace: template("example-device"), allowed: true, gpus: "1",
			cfg: func(c *Config) { c.DRA.UnknownDeviceClasses = UnknownWholeGPU }},
		{name: "a class that is not GPUs counts nothing", file: "pod-template.json", replace: template("example-device"), allowed: true,
			cfg: func(c *Config) { c.DRA.DeviceClasses["resource.example.com"] = DeviceClass{Kind: KindNone} }},
		{name: "a class fixed to one MIG profile", file: "pod-template.json", replace: template("example-device"), allowed: true, gpus: "0.428571428571428571",
			cfg: func(c *Config) {
				c.DRA.DeviceClasses["resource.example.com"] = DeviceClass{Kind: KindMIG, Profile: "3g.40gb"}
			}},
		{name: "MIG request without a profile denied", file: "pod-template.json", replace: template("mig-any-profile"),
			message: `selectors name no profile`},
		{name: "missing template denied", file: "pod-template.json", replace: template("no-such-template"),
			message: "ResourceClaimTemplate no-such-template not found in namespace team-acme"},
		{name: "claim by name, not yet reserved: one GPU", file: "pod-claim.json", allowed: true, gpus: "1"},
		{name: "claim by name, reserved by another Pod: already held", file: "pod-claim.json",
			replace: []string{`"resourceClaimName": "shared-gpu"`, `"resourceClaimName": "shared-gpu-in-use"`}, allowed: true},
		{name: "claim and device plugin GPUs admitted together", file: "pod-template.json",
			replace: []string{`"resources": {"claims"`, `"resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "7"}, "claims"`},
			allowed: true, gpus: "4"},
		{name: "over quota: denied with a message", file: "pod-template.json", replace: template("mig-devices"),
			cfg:     func(c *Config) { c.DefaultModel = "h100-sxm5-80gb" },
			message: "ResourceClaimTemplate mig-devices request mig-1g-10gb-0: mig.nvidia.com 1g.10gb x 1", evaluated: true},
		{name: "claim without a model denied", file: "pod-template.json", cfg: func(c *Config) { c.DefaultModel = "" },
			message: "names no GPU model"},
		{name: "claim naming neither a claim nor a template", file: "pod-template.json",
			replace: []string{`"resourceClaimTemplateName": "double-gpu"`, `"x": 1`}, message: "give exactly one of resourceClaimName and resourceClaimTemplateName"},
		{name: "HAMi: 25% of the cores of one GPU", file: "pod-hami.json", allowed: true, gpus: "0.25"},
		{name: "HAMi: memory larger than the cores share", file: "pod-hami.json", replace: []string{`"3000"`, `"40960"`}, allowed: true, gpus: "0.5"},
		{name: "HAMi: no cores limit is the whole GPU", file: "pod-hami.json", replace: []string{`"nvidia.com/gpucores": "25"`, `"nvidia.com/gpucores": "0"`}, allowed: true, gpus: "1"},
		{name: "HAMi: cores over 100 denied", file: "pod-hami.json", replace: []string{`"nvidia.com/gpucores": "25"`, `"nvidia.com/gpucores": "250"`},
			message: "nvidia.com/gpucores 250: want a percentage from 0 to 100"},
		{name: "HAMi: fractional cores denied", file: "pod-hami.json", replace: []string{`"nvidia.com/gpucores": "25"`, `"nvidia.com/gpucores": "250m"`},
			message: "want a whole number"},
		{name: "HAMi: resources off count the whole GPU", file: "pod-hami.json", allowed: true, gpus: "1", cfg: func(c *Config) { c.HAMi = HAMiConfig{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := claimsConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			limit := "10"
			if tc.evaluated {
				limit = "1" // 9/7 does not fit
			}
			d := newEvaluator(t, limit, "0")
			reader := NewAPIClaims(fake.NewClientset(claimObjects(t)...).ResourceV1())
			out, err := NewWebhook(d, cfg).WithClaims(reader).Review(context.Background(), auth.Scope{Kind: auth.KindAdmin}, podReview(t, tc.file, tc.replace...))
			if err != nil {
				t.Fatal(err)
			}
			a := decodeAnswer(t, out)
			if a.Response.UID != "b1c2d3e4-0000-4000-8000-000000000036" || a.Response.Allowed != tc.allowed {
				t.Fatalf("answer %s; want allowed %v", out, tc.allowed)
			}
			if !tc.allowed && (a.Response.Status == nil || a.Response.Status.Code >= 500 || !strings.Contains(a.Response.Status.Message, tc.message)) {
				t.Fatalf("denial %s; want a message with %q", out, tc.message)
			}
			switch {
			case tc.gpus != "" && (d.n != 1 || !d.last.Demand.GPUs.Equal(decimal.RequireFromString(tc.gpus))):
				t.Fatalf("asked %d times for %s GPU-equivalents; want once for %s", d.n, d.last.Demand.GPUs, tc.gpus)
			case tc.gpus == "" && !tc.evaluated && d.n != 0:
				t.Fatalf("asked the evaluator for %s GPU-equivalents; want it not asked", d.last.Demand.GPUs)
			case tc.evaluated && (d.n != 1 || !strings.Contains(a.Response.Status.Message, "would break a quota of tenant acme: tenant acme: concurrent_gpus would be 1.286, over the hard limit 1")):
				t.Fatalf("over quota: %s", out)
			}
		})
	}
}

// An API server that cannot answer, or a reviewer with no access to it,
// denies the Pod with the reason: never a 5xx, never admitted uncounted.
func TestReviewDeniesUnreadableClaims(t *testing.T) {
	cs := fake.NewClientset(claimObjects(t)...)
	cs.PrependReactor("get", "resourceclaimtemplates", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcdserver: request timed out")
	})
	d := newEvaluator(t, "10", "0")
	for name, w := range map[string]*Webhook{
		"API error": NewWebhook(d, claimsConfig()).WithClaims(NewAPIClaims(cs.ResourceV1())),
		"no reader": NewWebhook(d, claimsConfig()),
	} {
		out, err := w.Review(context.Background(), auth.Scope{Kind: auth.KindAdmin}, podReview(t, "pod-template.json"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		a := decodeAnswer(t, out)
		if a.Response.Allowed || a.Response.Status == nil || a.Response.Status.Code != 403 ||
			!strings.Contains(a.Response.Status.Message, map[string]string{"API error": "cannot be read, so its devices cannot be counted: etcdserver: request timed out",
				"no reader": "gpumeter cannot read here"}[name]) {
			t.Errorf("%s: %s", name, out)
		}
	}
	if d.n != 0 {
		t.Errorf("asked the evaluator %d times", d.n)
	}
}

func TestSelectedProfiles(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`device.attributes['gpu.nvidia.com'].profile == '1g.10gb'`, "1g.10gb"},
		{`device.attributes["gpu.nvidia.com"].profile=="3g.40gb"`, "3g.40gb"},
		{`'2g.20gb' == device.attributes['gpu.nvidia.com'].profile`, "2g.20gb"},
		{`device.attributes['gpu.nvidia.com'].type == 'mig' && device.attributes['gpu.nvidia.com'].profile == '1g.10gb+me'`, "1g.10gb+me"},
		{`device.attributes['gpu.nvidia.com'].profile in ['3g.40gb', "4g.40gb"]`, "3g.40gb 4g.40gb"},
		{`device.attributes['gpu.nvidia.com'].type == 'mig'`, ""},
		{`device.attributes['gpu.nvidia.com'].profile != '1g.10gb'`, ""},
		{`device.attributes['example.com'].profile == '1g.10gb'`, ""},
	} {
		got := strings.Join(selectedProfiles([]resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: tc.expr}}}), " ")
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	bad := DefaultConfig()
	bad.Namespaces = map[string]string{"team-x": ""}
	bad.DRA.UnknownDeviceClasses = "free"
	bad.DRA.LookupTimeout = 0
	bad.DRA.DeviceClasses = map[string]DeviceClass{"a.example.com": {Kind: "tpu"}, "b.example.com": {Kind: KindGPU, Profile: "1g.10gb"},
		"c.example.com": {Kind: KindMIG, Profile: "9g.99gb"}, "d.example.com": {Kind: KindGPU, AllCount: -1}}
	bad.HAMi = HAMiConfig{CoresResource: "gpucores", MemoryResource: "nvidia.com/gpu", MemoryPercentageResource: "nvidia.com/gpu"}
	err := bad.Validate()
	for _, want := range []string{`kubernetes.namespaces["team-x"]`, "kubernetes.dra.unknown_device_classes", "kubernetes.dra.lookup_timeout",
		`kubernetes.dra.device_classes["a.example.com"].kind "tpu"`, `kubernetes.dra.device_classes["b.example.com"].profile`,
		`kubernetes.dra.device_classes["c.example.com"].profile "9g.99gb"`, `kubernetes.dra.device_classes["d.example.com"].all_count -1`,
		"kubernetes.hami.cores_resource", `kubernetes.hami.memory_resource "nvidia.com/gpu": is a GPU resource`,
		"kubernetes.hami.memory_percentage_resource \"nvidia.com/gpu\": also kubernetes.hami.memory_resource"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to name %s", err, want)
		}
	}
}

// Whatever the API server sends, the webhook answers without panicking:
// an error for a body that is no review, else a review for its uid.
func FuzzReviewWithClaims(f *testing.F) {
	f.Add([]byte(review))
	for _, file := range []string{"pod-template.json", "pod-claim.json", "pod-hami.json"} {
		pod, err := os.ReadFile(filepath.Join("testdata", "dra", file))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(fmt.Appendf(nil, `{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "kind": {"kind": "Pod"},
			"namespace": "team-acme", "operation": "CREATE", "object": %s}}`, pod))
	}
	objs := claimObjects(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		d := &fakeDecider{allow: func(quota.Request) bool { return true }}
		w := NewWebhook(d, claimsConfig()).WithClaims(NewAPIClaims(fake.NewClientset(objs...).ResourceV1()))
		out, err := w.Review(context.Background(), auth.Scope{Kind: auth.KindAdmin}, body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v, want ErrMalformed", err)
			}
			return
		}
		var a reviewAnswer
		if err := json.Unmarshal(out, &a); err != nil || a.Response.UID == "" {
			t.Fatalf("answer %s: %v", out, err)
		}
		if !a.Response.Allowed && (a.Response.Status == nil || a.Response.Status.Code >= 500) {
			t.Fatalf("denial without a 4xx status: %s", out)
		}
	})
}

// BenchmarkReviewClaims decides a Pod with a MIG ResourceClaimTemplate
// through the real evaluator, the claim read from client-go's fake
// clientset (in memory: an API server round trip comes on top).
func BenchmarkReviewClaims(b *testing.B) {
	reader := NewAPIClaims(fake.NewClientset(claimObjects(b)...).ResourceV1())
	cfg := claimsConfig()
	body := podReview(b, "pod-template.json", `"double-gpu"`, `"mig-devices"`)
	dry := strings.Replace(string(body), `"operation": "CREATE",`, `"operation": "CREATE", "dryRun": true,`, 1)
	d := newEvaluator(b, "1000000", "0")
	w := NewWebhook(d, cfg).WithClaims(reader)
	b.ReportAllocs()
	for b.Loop() {
		out, err := w.Review(context.Background(), auth.Scope{Kind: auth.KindAdmin}, []byte(dry))
		if err != nil || !strings.Contains(string(out), `"allowed":true`) {
			b.Fatalf("%s %v", out, err)
		}
	}
}
