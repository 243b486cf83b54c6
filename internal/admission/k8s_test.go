package admission

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/quota"
)

type fakeDecider struct {
	got   []quota.Request
	allow func(quota.Request) bool
}

func (f *fakeDecider) Admit(_ context.Context, _ auth.Scope, r quota.Request) (quota.Decision, error) {
	f.got = append(f.got, r)
	if f.allow(r) {
		return quota.Decision{Allowed: true, Warnings: []string{"soft limit near"}}, nil
	}
	return quota.Decision{Reason: "tenant acme: concurrent_gpus would be 9, over the hard limit 8"}, nil
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
		!resp.Response.Allowed || len(resp.Response.Warnings) != 2 {
		t.Fatalf("response %s", out)
	}
	// Effective requests: GPUs max(1+1, init 3) = 3; MIG 2 x 3g.40gb.
	if len(d.got) != 2 || d.got[0].Count != 3 || d.got[0].Profile != "" || d.got[1].Profile != "3g.40gb" || d.got[1].Count != 2 ||
		d.got[0].Tenant != "acme" || d.got[0].GPUModel != "H100-SXM5-80GB" || d.got[0].Duration != 6*time.Hour {
		t.Fatalf("asked %+v", d.got)
	}

	d = &fakeDecider{allow: func(r quota.Request) bool { return r.Profile == "" }}
	out, _ = Review(context.Background(), d, auth.Scope{Kind: auth.KindAdmin}, cfg, []byte(review))
	_ = json.Unmarshal(out, &resp)
	if resp.Response.Allowed || resp.Response.Status == nil || resp.Response.Status.Code != 403 ||
		!strings.Contains(resp.Response.Status.Message, "nvidia.com/mig-3g.40gb x 2 would break a quota of tenant acme") {
		t.Fatalf("denied: %s", out)
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
