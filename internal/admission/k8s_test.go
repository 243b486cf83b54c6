package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/quota"
)

type fakeDecider struct {
	got   []quota.Request
	calls int
	allow func(quota.Request) bool
}

// AdmitAll allows the requests when allow allows each of them.
func (f *fakeDecider) AdmitAll(_ context.Context, _ auth.Scope, rs []quota.Request) (quota.Decision, error) {
	f.calls++
	f.got = append(f.got, rs...)
	for _, r := range rs {
		if !f.allow(r) {
			return quota.Decision{Reason: "tenant acme: concurrent_gpus would be 9, over the hard limit 8"}, nil
		}
	}
	return quota.Decision{Allowed: true, Warnings: []string{"soft limit near"}}, nil
}

// A Pod as the API server sends it in an AdmissionReview: two containers
// and an init container asking for GPUs and MIG instances.
const review = `{
  "apiVersion": "admission.k8s.io/v1",
  "kind": "AdmissionReview",
  "request": {
    "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
    "kind": {"group": "", "version": "v1", "kind": "Pod"},
    "resource": {"group": "", "version": "v1", "resource": "pods"},
    "namespace": "team-acme",
    "operation": "CREATE",
    "userInfo": {"username": "alice"},
    "object": {
      "apiVersion": "v1",
      "kind": "Pod",
      "metadata": {"name": "train-0", "namespace": "team-acme",
        "annotations": {"gpumeter.io/gpu-model": "H100-SXM5-80GB", "gpumeter.io/expected-duration": "6h"}},
      "spec": {
        "initContainers": [{"name": "warmup", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "3"}}}],
        "containers": [
          {"name": "trainer", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "4"}, "limits": {"nvidia.com/gpu": "1"}}},
          {"name": "sidecar", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/mig-3g.40gb": "2"}}}
        ]
      }
    }
  }
}`

func TestReviewAllowsAndDenies(t *testing.T) {
	cfg := Config{Namespaces: map[string]string{"team-acme": "acme"}, DefaultDuration: time.Hour}
	d := &fakeDecider{allow: func(quota.Request) bool { return true }}
	out, err := Review(context.Background(), d, auth.Scope{Kind: auth.KindAdmin}, cfg, []byte(review))
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		APIVersion, Kind string
		Response         struct {
			UID      string
			Allowed  bool
			Warnings []string
			Status   *struct {
				Code    int
				Message string
			} `json:"status"`
		}
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.APIVersion != "admission.k8s.io/v1" || resp.Kind != "AdmissionReview" || resp.Response.UID != "705ab4f5-6393-11e8-b7cc-42010a800002" ||
		!resp.Response.Allowed || len(resp.Response.Warnings) != 1 {
		t.Fatalf("response %s", out)
	}
	// Effective requests, admitted together: GPUs max(1+1, init 3) = 3;
	// MIG 2 x 3g.40gb.
	if d.calls != 1 || len(d.got) != 2 || d.got[0].DryRun || d.got[0].Count != 3 || d.got[0].Profile != "" || d.got[1].Profile != "3g.40gb" || d.got[1].Count != 2 ||
		d.got[0].Tenant != "acme" || d.got[0].GPUModel != "H100-SXM5-80GB" || d.got[0].Duration != 6*time.Hour {
		t.Fatalf("asked %+v", d.got)
	}

	d = &fakeDecider{allow: func(r quota.Request) bool { return r.Profile == "" }}
	out, _ = Review(context.Background(), d, auth.Scope{Kind: auth.KindAdmin}, cfg, []byte(review))
	_ = json.Unmarshal(out, &resp)
	if resp.Response.Allowed || resp.Response.Status == nil || resp.Response.Status.Code != 403 ||
		!strings.Contains(resp.Response.Status.Message, "nvidia.com/gpu x 3, nvidia.com/mig-3g.40gb x 2 would break a quota of tenant acme") {
		t.Fatalf("denied: %s", out)
	}
}

// creditDecider refuses as the quota service refuses a credit_only
// customer whose balance cannot pay for the work.
type creditDecider struct{}

func (creditDecider) AdmitAll(context.Context, auth.Scope, []quota.Request) (quota.Decision, error) {
	return quota.Decision{CreditRefused: true,
		Reason: "credit_only: balance 2.00 USD, held 0.00 USD by 0 admitted, needed 21.00 USD for 3 GPU-equivalents of H100-SXM5-80GB over the 1h horizon: the balance cannot cover it"}, nil
}

func TestReviewSaysCreditRefusals(t *testing.T) {
	cfg := Config{Namespaces: map[string]string{"team-acme": "acme"}, DefaultDuration: time.Hour}
	out, err := Review(context.Background(), creditDecider{}, auth.Scope{Kind: auth.KindAdmin}, cfg, []byte(review))
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Response struct {
			Allowed bool
			Status  *struct {
				Code    int
				Message string
			} `json:"status"`
		}
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Response.Allowed || resp.Response.Status == nil || resp.Response.Status.Code != 403 ||
		!strings.Contains(resp.Response.Status.Message, "nvidia.com/gpu x 3, nvidia.com/mig-3g.40gb x 2 is refused for tenant acme, whose credit cannot pay for it: credit_only: balance 2.00 USD") {
		t.Fatalf("refused: %s", out)
	}
}

func TestReviewLeavesOthersAlone(t *testing.T) {
	d := &fakeDecider{allow: func(quota.Request) bool { return false }}
	for name, c := range map[string]struct {
		cfg  Config
		body string
	}{
		"unmapped namespace": {Config{}, review},
		"no GPUs":            {Config{Namespaces: map[string]string{"team-acme": "acme"}}, strings.ReplaceAll(strings.ReplaceAll(review, `"nvidia.com/gpu": "1", `, ``), `nvidia.com`, `example.com`)},
		"a deletion":         {Config{Namespaces: map[string]string{"team-acme": "acme"}}, strings.Replace(review, `"CREATE"`, `"DELETE"`, 1)},
	} {
		out, err := Review(context.Background(), d, auth.Scope{Kind: auth.KindAdmin}, c.cfg, []byte(c.body))
		if err != nil || !strings.Contains(string(out), `"allowed":true`) {
			t.Errorf("%s: %s %v", name, out, err)
		}
	}
	if len(d.got) != 0 {
		t.Errorf("asked the evaluator %d times", len(d.got))
	}
}

func TestReviewRejectsMalformedInput(t *testing.T) {
	d := &fakeDecider{allow: func(quota.Request) bool { return true }}
	cfg := Config{Namespaces: map[string]string{"team-acme": "acme"}}
	for name, body := range map[string]string{
		"not json":      "hello",
		"no request":    `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`,
		"wrong version": strings.Replace(review, "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1),
		"no uid":        strings.Replace(review, `"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",`, "", 1),
	} {
		if _, err := Review(context.Background(), d, auth.Scope{Kind: auth.KindAdmin}, cfg, []byte(body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	// A review with a uid but a Pod that cannot be admitted as it stands
	// gets a denying response with the reason, not an error.
	for name, body := range map[string]string{
		"no model":     strings.Replace(review, `"gpumeter.io/gpu-model": "H100-SXM5-80GB", `, "", 1),
		"bad duration": strings.Replace(review, `"6h"`, `"soon"`, 1),
		"bad pod":      strings.Replace(review, `"containers": [`, `"containers": {"x": [`, 1),
	} {
		out, err := Review(context.Background(), d, auth.Scope{Kind: auth.KindAdmin}, cfg, []byte(body))
		if name == "bad pod" && errors.Is(err, ErrMalformed) {
			continue // the whole review no longer decodes
		}
		if err != nil || !strings.Contains(string(out), `"allowed":false`) || !strings.Contains(string(out), "gpumeter:") {
			t.Errorf("%s: %s %v", name, out, err)
		}
	}
}

// A server-side dry run (kubectl apply --dry-run=server) is decided but
// must hold nothing: the evaluator is told so.
func TestReviewPassesDryRun(t *testing.T) {
	cfg := Config{Namespaces: map[string]string{"team-acme": "acme"}, DefaultDuration: time.Hour}
	d := &fakeDecider{allow: func(quota.Request) bool { return true }}
	body := strings.Replace(review, `"operation": "CREATE",`, `"operation": "CREATE", "dryRun": true,`, 1)
	if out, err := Review(context.Background(), d, auth.Scope{Kind: auth.KindAdmin}, cfg, []byte(body)); err != nil || !strings.Contains(string(out), `"allowed":true`) {
		t.Fatalf("dry run: %s %v", out, err)
	}
	if len(d.got) != 2 || !d.got[0].DryRun || !d.got[1].DryRun {
		t.Fatalf("asked %+v, want both parts as a dry run", d.got)
	}
}

// extraGPUResources are names a cluster configured itself
// (kubernetes.gpu_resources): a time-slicing rename and a KubeVirt
// passthrough name, which the device plugin's own names do not cover.
var extraGPUResources = map[string]string{"nvidia.com/gpu-shared": "", "nvidia.com/GH100_H100_SXM5_80GB": "", "nvidia.com/a100-slice": "3g.40gb"}

func TestParseResource(t *testing.T) {
	for _, tc := range []struct {
		name, profile string
		ok, err       bool
	}{
		{"nvidia.com/gpu", "", true, false},
		{"nvidia.com/gpu.shared", "", true, false}, // time-slicing, renameByDefault
		{"nvidia.com/mig-1g.10gb", "1g.10gb", true, false},
		{"nvidia.com/mig-3g.40gb", "3g.40gb", true, false},
		{"nvidia.com/mig-1g.10gb+me", "1g.10gb+me", true, false},
		{"nvidia.com/mig-1g.10gb.shared", "1g.10gb", true, false},
		{"nvidia.com/mig-1g.10gb+me.shared", "1g.10gb+me", true, false},
		{"nvidia.com/mig-", "", true, true},
		{"nvidia.com/mig-.shared", "", true, true},
		{"cpu", "", false, false},
		{"example.com/gpu", "", false, false},
		{"nvidia.com/gpus", "", false, false},
		{"nvidia.com/gpu-shared", "", true, false},           // rename: in a time-slicing config
		{"nvidia.com/GH100_H100_SXM5_80GB", "", true, false}, // KubeVirt passthrough
		{"nvidia.com/a100-slice", "3g.40gb", true, false},
		{"nvidia.com/hostdev", "", false, false}, // the network operator's, not a GPU
	} {
		t.Run(tc.name, func(t *testing.T) {
			profile, ok, err := parseResource(tc.name, extraGPUResources)
			if profile != tc.profile || ok != tc.ok || (err != nil) != tc.err {
				t.Errorf("parseResource(%q) = %q %v %v, want %q %v error=%v", tc.name, profile, ok, err, tc.profile, tc.ok, tc.err)
			}
		})
	}
}

// limitsContainer is a container with the given limits (resource name to
// quantity).
func limitsContainer(name string, res map[string]string) corev1.Container {
	c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}
	for n, q := range res {
		c.Resources.Limits[corev1.ResourceName(n)] = resource.MustParse(q)
	}
	return c
}

// sidecarContainer is limitsContainer as a sidecar: an init container
// that keeps running beside the others.
func sidecarContainer(name string, res map[string]string) corev1.Container {
	c := limitsContainer(name, res)
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

// Kubernetes' effective request per profile, and counts that are refused
// rather than wrapped around.
func TestEffectiveCounts(t *testing.T) {
	ctr, sidecar := limitsContainer, sidecarContainer
	const maxInt64 = "9223372036854775807"
	for _, tc := range []struct {
		name  string
		spec  corev1.PodSpec
		want  string // profile=count ..., or the error's text
		isErr bool
	}{
		{"containers sum", corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu": "2"}), ctr("b", map[string]string{"nvidia.com/gpu": "3"})}}, "=5", false},
		{"init container larger", corev1.PodSpec{InitContainers: []corev1.Container{ctr("i", map[string]string{"nvidia.com/gpu": "4"})},
			Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu": "1"})}}, "=4", false},
		{"sidecar runs beside the containers", corev1.PodSpec{InitContainers: []corev1.Container{sidecar("s", map[string]string{"nvidia.com/gpu": "4"})},
			Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu": "4"})}}, "=8", false},
		{"init container after a sidecar", corev1.PodSpec{InitContainers: []corev1.Container{sidecar("s", map[string]string{"nvidia.com/gpu": "2"}), ctr("i", map[string]string{"nvidia.com/gpu": "5"})},
			Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu": "1"})}}, "=7", false},
		{"time-sliced shares count as GPUs", corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu.shared": "2", "nvidia.com/gpu": "1"})}}, "=3", false},
		{"MIG, mixed strategy, shared and +me", corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{
			"nvidia.com/mig-1g.10gb": "1", "nvidia.com/mig-1g.10gb.shared": "2", "nvidia.com/mig-1g.10gb+me": "1", "nvidia.com/mig-3g.40gb": "1"})}},
			"1g.10gb=3 1g.10gb+me=1 3g.40gb=1", false},
		{"other resources", corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"cpu": "4", "example.com/gpu": "2"})}}, "", false},
		{"two containers of MaxInt64", corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu": maxInt64}), ctr("b", map[string]string{"nvidia.com/gpu": maxInt64})}},
			"container a: 9223372036854775807 is more than 100000 devices", true},
		{"beyond int64", corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu": "18446744073709551617"})}}, "more than 100000", true},
		{"1e30", corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu": "1e30"})}}, "more than 100000", true},
		{"negative", corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu": "-1"})}}, "is negative", true},
		{"sum over MaxCount", corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu": "60000"}), ctr("b", map[string]string{"nvidia.com/gpu": "60000"})}},
			"containers in all: 60000 + 60000 devices is more than 100000", true},
		{"sum over MaxCount across names", corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu": "60000", "nvidia.com/gpu.shared": "60000"})}},
			"is more than 100000", true},
		{"sidecars over MaxCount", corev1.PodSpec{InitContainers: []corev1.Container{sidecar("s", map[string]string{"nvidia.com/gpu": "100000"})},
			Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu": "1"})}}, "is more than 100000", true},
		{"MIG resource without a profile", corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/mig-": "1"})}}, "names no MIG profile", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wants, err := effective(tc.spec, Config{}, 0)
			if tc.isErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %+v, %v; want an error with %q", wants, err, tc.want)
				}
				return
			}
			var got []string
			for _, w := range wants {
				got = append(got, fmt.Sprintf("%s=%d", w.profile, w.count))
			}
			if err != nil || strings.Join(got, " ") != tc.want {
				t.Fatalf("got %q, %v; want %q", strings.Join(got, " "), err, tc.want)
			}
		})
	}
}

// HAMi's grants: each share of nvidia.com/gpu counts by Kubernetes' rule
// on its own; a container without a share is whole GPUs.
func TestEffectiveHAMiShares(t *testing.T) {
	ctr := limitsContainer
	cfg := DefaultConfig()
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{"two quarters and a whole GPU", corev1.PodSpec{Containers: []corev1.Container{
			ctr("a", map[string]string{"nvidia.com/gpu": "2", "nvidia.com/gpucores": "25"}),
			ctr("b", map[string]string{"nvidia.com/gpu": "1"})}}, "@0.25=2 =1"},
		{"an init container's share is its own resource", corev1.PodSpec{
			InitContainers: []corev1.Container{ctr("i", map[string]string{"nvidia.com/gpu": "3", "nvidia.com/gpucores": "50"})},
			Containers:     []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"})}}, "@0.5=3"},
		{"a sidecar's share runs beside the containers'", corev1.PodSpec{
			InitContainers: []corev1.Container{sidecarContainer("s", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "10"})},
			Containers:     []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpucores": "10"})}}, "@0.1=2"},
		{"memory percentage above cores", corev1.PodSpec{Containers: []corev1.Container{
			ctr("a", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "10", "nvidia.com/gpumem-percentage": "40"})}}, "@0.4=1"},
		{"memory in MiB of an 80 GB GPU", corev1.PodSpec{Containers: []corev1.Container{
			ctr("a", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "10", "nvidia.com/gpumem": "20480"})}}, "@0.25=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wants, err := effective(tc.spec, cfg, 81920)
			var got []string
			for _, w := range wants {
				s := w.profile
				if !w.share.IsZero() {
					s += "@" + w.share.String()
				}
				got = append(got, fmt.Sprintf("%s=%d", s, w.count))
			}
			if err != nil || strings.Join(got, " ") != tc.want {
				t.Fatalf("got %q, %v; want %q", strings.Join(got, " "), err, tc.want)
			}
		})
	}
}
