package reports_test

import (
	"bytes"
	"testing"

	"github.com/gpumeter/gpumeter/internal/partition"
	"github.com/gpumeter/gpumeter/reports"
)

// A plan of a fleet read from usage samples names the GPUs it did not
// plan (vGPU hosts, models without MIG tables) and why.
func TestWritePlanListsSkippedGPUs(t *testing.T) {
	var buf bytes.Buffer
	plan := partition.Plan{Summary: partition.Summary{GPUs: 1}, Skipped: []partition.Skipped{
		{Host: "hv", UUID: "GPU-ts", Model: "A100-SXM4-40GB", Reason: "runs vGPU instances (vgpu:A100-8C): the hypervisor's vGPU manager owns its layout, not MIG-plannable"},
	}}
	if err := reports.WritePlan(&buf, plan); err != nil {
		t.Fatal(err)
	}
	want := "plan: 1 GPUs, 0 to change: 0 instances to create, 0 to destroy, 0 kept (0 change tenant)\n" +
		"demand met (compute slices, 7 = one GPU): reserved 0 of 0 (-), pending 0 of 0 (-)\n" +
		"\nnot planned (1 GPUs):\n" +
		"  hv GPU-ts (A100-SXM4-40GB): runs vGPU instances (vgpu:A100-8C): the hypervisor's vGPU manager owns its layout, not MIG-plannable\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
}
