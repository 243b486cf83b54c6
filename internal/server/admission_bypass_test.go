package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/quota"
)

// podReview is an AdmissionReview of a Pod in team-acme (tenant acme)
// with the given annotations, containers' limits and dryRun flag.
func podReview(annotations string, dryRun bool, containers ...string) string {
	var cs []string
	for i, limits := range containers {
		cs = append(cs, fmt.Sprintf(`{"name":"c%d","image":"x","resources":{"limits":{%s}}}`, i, limits))
	}
	return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","kind":{"group":"","version":"v1","kind":"Pod"},` +
		`"namespace":"team-acme","operation":"CREATE","dryRun":` + fmt.Sprint(dryRun) + `,"object":{"apiVersion":"v1","kind":"Pod",` +
		`"metadata":{"name":"p","namespace":"team-acme","annotations":{` + annotations + `}},` +
		`"spec":{"containers":[` + strings.Join(cs, ",") + `]}}}}`
}

// reviewed posts a review and returns whether it was allowed and the
// denial's message.
func reviewed(t *testing.T, url, token, body string) (bool, string) {
	t.Helper()
	code, d := post(t, url, token, body)
	resp, _ := d["response"].(map[string]any)
	if code != 200 || resp == nil {
		t.Fatalf("review: %d %v", code, d)
	}
	status, _ := resp["status"].(map[string]any)
	return resp["allowed"] == true, fmt.Sprint(status["message"])
}

// admitted is what pending admissions hold against acme's rule of model
// ("" for the tenant-wide rule) and concurrent GPUs.
func admitted(t *testing.T, q *quota.Service, model string) decimal.Decimal {
	t.Helper()
	states, _, err := q.State(context.Background(), auth.Scope{Kind: auth.KindAdmin})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.Tenant == "acme" && s.GPUModel == model && s.Metric == quota.ConcurrentGPUs {
			return s.Admitted
		}
	}
	t.Fatalf("no concurrent_gpus rule of acme on %q in %+v", model, states)
	return decimal.Zero
}

// A server-side dry run of a Pod and a denied Pod hold nothing; a dry run
// followed by the real Pod leaves exactly the real one held.
func TestKubernetesDryRunAndDenialHoldNothing(t *testing.T) {
	f, ts, q := quotaFixture(t, quota.Rule{Tenant: "acme", ConcurrentGPUs: lim("6")}) // 2 running: 4 left
	url, admin := ts.URL+"/v1/admission/k8s", f.tokens["admin"]

	// 3 GPUs fit, 7 x 3g.40gb (3 GPUs) with them do not: the Pod is
	// denied, and its 3 GPUs must not stay held.
	ok, msg := reviewed(t, url, admin, podReview("", false, `"nvidia.com/gpu":"3","nvidia.com/mig-3g.40gb":"7"`))
	if ok {
		t.Fatalf("3 GPUs + 7 x 3g.40gb allowed")
	}
	if a := admitted(t, q, ""); !a.IsZero() {
		t.Fatalf("a denied Pod holds %s GPUs", a)
	}
	if !strings.Contains(msg, "nvidia.com/gpu x 3, nvidia.com/mig-3g.40gb x 7 would break a quota of tenant acme") {
		t.Fatalf("3 GPUs + 7 x 3g.40gb: %s", msg)
	}
	if ok, msg := reviewed(t, url, admin, podReview("", true, `"nvidia.com/gpu":"3"`)); !ok {
		t.Fatalf("dry run of 3 GPUs: %s", msg)
	}
	if a := admitted(t, q, ""); !a.IsZero() {
		t.Fatalf("a dry run holds %s GPUs", a)
	}
	if ok, msg := reviewed(t, url, admin, podReview("", false, `"nvidia.com/gpu":"3"`)); !ok {
		t.Fatalf("3 GPUs after the dry run: %s", msg)
	}
	if a := admitted(t, q, ""); !a.Equal(decimal.NewFromInt(3)) {
		t.Fatalf("admitted %s after a dry run and the real Pod, want 3", a)
	}
}

// The quota service (POST /v1/admission's) holds nothing for a dry run
// or a denial either.
func TestQuotaServiceDryRunAndDenialHoldNothing(t *testing.T) {
	_, _, q := quotaFixture(t, quota.Rule{Tenant: "acme", ConcurrentGPUs: lim("6")})
	ctx, admin := context.Background(), auth.Scope{Kind: auth.KindAdmin}
	req := quota.Request{Tenant: "acme", GPUModel: "H100-SXM5-80GB", Count: 3, Duration: time.Hour, DryRun: true}
	if d, err := q.Admit(ctx, admin, req); err != nil || !d.Allowed || d.ID != "" {
		t.Fatalf("dry run: %+v %v", d, err)
	}
	req.DryRun = false
	if d, err := q.Admit(ctx, admin, req); err != nil || !d.Allowed || d.ID == "" {
		t.Fatalf("real request: %+v %v", d, err)
	}
	if d, err := q.Admit(ctx, admin, req); err != nil || d.Allowed { // 2 + 3 + 3 > 6
		t.Fatalf("over the limit: %+v %v", d, err)
	}
	if a := admitted(t, q, ""); !a.Equal(decimal.NewFromInt(3)) {
		t.Fatalf("admitted %s, want exactly the real request's 3", a)
	}
}

// A model rule is not bypassed by another spelling of the model, an
// unknown model, the time-slicing resource name or counts that overflow.
func TestKubernetesModelRuleBypasses(t *testing.T) {
	f, ts, q := quotaFixture(t, quota.Rule{Tenant: "acme", GPUModel: "H100-SXM5-80GB", ConcurrentGPUs: lim("4")}) // 2 H100s running
	url, admin := ts.URL+"/v1/admission/k8s", f.tokens["admin"]
	const model = `"gpumeter.io/gpu-model":`
	for _, tc := range []struct {
		name, annotations string
		limits            []string
		want              string
	}{
		{"lower-case model", model + `"h100-sxm5-80gb"`, []string{`"nvidia.com/gpu":"5"`}, "tenant acme on H100-SXM5-80GB: concurrent_gpus would be 7"},
		{"NVML device name", model + `"NVIDIA H100 80GB HBM3"`, []string{`"nvidia.com/gpu":"5"`}, "over the hard limit 4"},
		{"unknown model", model + `"foo"`, []string{`"nvidia.com/gpu":"5"`}, `gpu_model "foo": unknown GPU model (the catalogue's: A100-SXM4-40GB`},
		{"time-sliced resource", "", []string{`"nvidia.com/gpu.shared":"5"`}, "nvidia.com/gpu.shared x 5 would break a quota"},
		{"time-sliced MIG resource", "", []string{`"nvidia.com/mig-3g.40gb.shared":"14"`}, "concurrent_gpus would be 8"},
		{"two containers of MaxInt64", "", []string{`"nvidia.com/gpu":"9223372036854775807"`, `"nvidia.com/gpu":"9223372036854775807"`},
			"container c0: 9223372036854775807 is more than 100000 devices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if ok, msg := reviewed(t, url, admin, podReview(tc.annotations, false, tc.limits...)); ok || !strings.Contains(msg, tc.want) {
				t.Fatalf("allowed=%v %q, want a denial with %q", ok, msg, tc.want)
			}
		})
	}
	if a := admitted(t, q, "H100-SXM5-80GB"); !a.IsZero() {
		t.Fatalf("denied Pods hold %s", a)
	}
	// Under another spelling, what fits is held against the rule.
	if ok, msg := reviewed(t, url, admin, podReview(model+`"nvidia h100 80gb hbm3"`, false, `"nvidia.com/gpu":"2"`)); !ok {
		t.Fatalf("2 GPUs: %s", msg)
	}
	if a := admitted(t, q, "H100-SXM5-80GB"); !a.Equal(decimal.NewFromInt(2)) {
		t.Fatalf("admitted %s on the H100 rule, want 2", a)
	}
}

// The same bypasses through the quota service and POST /v1/admission.
func TestQuotaServiceModelRuleBypasses(t *testing.T) {
	f, ts, q := quotaFixture(t, quota.Rule{Tenant: "acme", GPUModel: "H100-SXM5-80GB", ConcurrentGPUs: lim("4")})
	ctx, admin := context.Background(), auth.Scope{Kind: auth.KindAdmin}
	for _, name := range []string{"h100-sxm5-80gb", "NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"} {
		d, err := q.Admit(ctx, admin, quota.Request{Tenant: "acme", GPUModel: name, Count: 5, Duration: time.Hour})
		if err != nil || d.Allowed || !strings.Contains(d.Reason, "tenant acme on H100-SXM5-80GB") {
			t.Errorf("5 x %s: %+v %v", name, d, err)
		}
	}
	if _, err := q.Admit(ctx, admin, quota.Request{Tenant: "acme", GPUModel: "foo", Count: 5, Duration: time.Hour}); !errors.Is(err, quota.ErrInvalid) ||
		!strings.Contains(err.Error(), "H100-SXM5-80GB") {
		t.Errorf("unknown model: %v, want ErrInvalid naming the known models", err)
	}
	if a := admitted(t, q, "H100-SXM5-80GB"); !a.IsZero() {
		t.Fatalf("refused requests hold %s", a)
	}
	url, acme := ts.URL+"/v1/admission", f.tokens["acme"]
	for name, c := range map[string]struct {
		body    string
		code    int
		allowed any
		text    string
	}{
		"lower-case model": {`{"gpu_model":"h100-sxm5-80gb","count":5,"expected_duration":"1h"}`, 200, false, "tenant acme on H100-SXM5-80GB"},
		"unknown model":    {`{"gpu_model":"foo","count":5,"expected_duration":"1h"}`, 400, nil, "unknown GPU model"},
		"shared profile":   {`{"gpu_model":"H100-SXM5-80GB","profile":"1g.10gb.shared","count":5,"expected_duration":"1h"}`, 400, nil, "1g.10gb.shared"},
		"MaxInt64 count":   {`{"gpu_model":"H100-SXM5-80GB","count":9223372036854775807,"expected_duration":"1h"}`, 400, nil, "want 1 to 100000"},
		"count over int64": {`{"gpu_model":"H100-SXM5-80GB","count":18446744073709551617,"expected_duration":"1h"}`, 400, nil, "count"},
	} {
		code, d := post(t, url, acme, c.body)
		if code != c.code || (c.allowed != nil && d["allowed"] != c.allowed) || !strings.Contains(fmt.Sprint(d), c.text) {
			t.Errorf("%s: %d %v, want %d with %q", name, code, d, c.code, c.text)
		}
	}
	if a := admitted(t, q, "H100-SXM5-80GB"); !a.IsZero() {
		t.Fatalf("refused API requests hold %s", a)
	}
}

// POST /v1/admission takes dry_run and several parts (a Slurm job asking
// for two GPU types) decided as one: before, each type was its own
// request, and a job whose second type was denied kept the first held.
func TestAPIAdmissionPartsAndDryRunHoldNothingWhenRefused(t *testing.T) {
	f, ts, q := quotaFixture(t, quota.Rule{Tenant: "acme", ConcurrentGPUs: lim("6")}, quota.Rule{Tenant: "acme", GPUModel: "A100-SXM4-80GB", ConcurrentGPUs: lim("1")})
	url, acme := ts.URL+"/v1/admission", f.tokens["acme"]
	two := `"parts":[{"gpu_model":"H100-SXM5-80GB","count":2},{"gpu_model":"A100-SXM4-80GB","count":2}],"expected_duration":"1h"`
	if code, d := post(t, url, acme, `{`+two+`}`); code != 200 || d["allowed"] != false {
		t.Fatalf("two types, the second over its rule: %d %v", code, d)
	}
	if code, d := post(t, url, acme, `{"dry_run":true,"gpu_model":"H100-SXM5-80GB","count":2,"expected_duration":"1h"}`); code != 200 || d["allowed"] != true || d["admission_id"] != "" {
		t.Fatalf("dry run: %d %v", code, d)
	}
	if a := admitted(t, q, ""); !a.IsZero() {
		t.Fatalf("a denied job and a dry run hold %s GPUs, want 0", a)
	}
	fits := `{"parts":[{"gpu_model":"H100-SXM5-80GB","count":2},{"gpu_model":"A100-SXM4-80GB","count":1}],"expected_duration":"1h"}`
	if code, d := post(t, url, acme, fits); code != 200 || d["allowed"] != true || d["admission_id"] == "" {
		t.Fatalf("two types that fit: %d %v", code, d)
	}
	if a := admitted(t, q, ""); !a.Equal(decimal.NewFromInt(3)) {
		t.Fatalf("admitted %s, want the job's 3 GPUs", a)
	}
	for name, body := range map[string]string{
		"parts and a model": `{"gpu_model":"H100-SXM5-80GB","count":1,` + two + `}`,
		"a bad part":        `{"parts":[{"gpu_model":"H100-SXM5-80GB","count":-1}],"expected_duration":"1h"}`,
	} {
		if code, d := post(t, url, acme, body); code != 400 {
			t.Errorf("%s: %d %v, want 400", name, code, d)
		}
	}
}
