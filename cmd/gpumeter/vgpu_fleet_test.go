package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/insights"
)

// Issue 31: on a database with a simulated vGPU host (as make demo builds
// it), mig plan --from-clickhouse and insights rightsize failed with
// `model A100-SXM4-40GB has no profile "vgpu:A100-8C"`: vGPU instances,
// which the collector writes in the MIG columns, were read as MIG
// instances. The fixture is what the collector writes for a DGX host
// (whole GPUs and MIG) and a vGPU host (time-sliced and MIG-backed vGPU,
// passthrough, bare metal). The planner lists the vGPU GPUs as not
// planned, and rightsize judges every SKU kind.
func TestFleetCommandsAcceptEverySKUKind(t *testing.T) {
	dsn := testDSN(t)
	d := 10 * time.Minute
	code, _, stderr := gpumeter(t, "--clickhouse", dsn, "collect", "--simulate", "--vgpu", "--hosts", "1", "--seed", "3",
		"--spool", t.TempDir(), "--start", collectStart.Format(time.RFC3339), "--duration", d.String(), "--listen", "")
	if code != 0 {
		t.Fatalf("collect exit %d\n%s", code, stderr)
	}

	demand := writeTemp(t, "demand.yaml", "tenants:\n  - {tenant: beta, pending: [{profile: 1g.10gb, count: 1}]}\n")
	code, stdout, stderr := gpumeter(t, "--clickhouse", dsn, "mig", "plan", "--from-clickhouse", "--demand", demand)
	if code != 0 {
		t.Fatalf("mig plan: exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stdout, "not planned (") || !strings.Contains(stdout, "runs vGPU instances (vgpu:") {
		t.Errorf("mig plan does not list the vGPU GPUs it left out:\n%s", stdout)
	}

	from, to := collectStart.Format(time.RFC3339), collectStart.Add(time.Hour).Format(time.RFC3339)
	code, stdout, stderr = gpumeter(t, "--clickhouse", dsn, "insights", "rightsize", "--from", from, "--to", to, "--json")
	if code != 0 {
		t.Fatalf("insights rightsize: exit %d\n%s", code, stderr)
	}
	var rep insights.RightSizeReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("rightsize JSON: %v\n%s", err, stdout)
	}
	kinds := map[gpucatalog.Kind]bool{}
	vgpu := map[string]bool{} // time-sliced and MIG-backed vGPU SKUs judged
	for _, r := range rep.Tenants {
		kinds[r.Kind] = true
		if r.Kind == gpucatalog.KindVGPU {
			vgpu[r.Current.SKU] = true
			if r.Action == insights.Keep && r.Reason == "" {
				t.Errorf("%s %s kept without a reason", r.Tenant, r.Current.SKU)
			}
		}
	}
	for _, k := range []gpucatalog.Kind{gpucatalog.KindGPU, gpucatalog.KindMIG, gpucatalog.KindVGPU} {
		if !kinds[k] {
			t.Errorf("rightsize has no %s holding: %+v", k, kinds)
		}
	}
	migBacked, timeSliced := false, false
	for sku := range vgpu {
		name := sku[strings.Index(sku, "vgpu:"):]
		if strings.Count(name, "-") == 2 {
			migBacked = true
		} else {
			timeSliced = true
		}
	}
	if !migBacked || !timeSliced {
		t.Errorf("rightsize judged vGPU SKUs %v, want time-sliced and MIG-backed ones", vgpu)
	}
	if rep.Plan == nil {
		t.Error("rightsize over the whole fleet has no layout")
	}
}
