package reports_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/partition"
	"github.com/gpumeter/gpumeter/internal/partition/nvmlapply"
	"github.com/gpumeter/gpumeter/reports"
)

// plan.yaml is a plan mig plan wrote; plan.golden is what it printed for
// it before the renderer moved here.
func TestWritePlan(t *testing.T) {
	var plan partition.Plan
	if err := yaml.Unmarshal(readTestdata(t, "plan.yaml"), &plan); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := reports.WritePlan(&buf, plan); err != nil {
		t.Fatal(err)
	}
	golden(t, "plan.golden", buf.Bytes())
	if err := reports.WritePlan(&failingWriter{n: 10}, plan); !errors.Is(err, errFull) {
		t.Errorf("a failing writer: error %v", err)
	}
}

func TestWritePlanWithoutDemandOrChanges(t *testing.T) {
	plan := partition.Plan{Summary: partition.Summary{GPUs: 2, Kept: 3, ReservedSlices: 3, ReservedMetSlices: 1},
		GPUs: []partition.GPUPlan{{Host: "n", UUID: "GPU-1", Instances: []partition.PlannedInstance{{Profile: "7g.80gb", Action: partition.Keep}}}}}
	assertWrites(t, func(w io.Writer) error { return reports.WritePlan(w, plan) },
		"plan: 2 GPUs, 0 to change: 0 instances to create, 0 to destroy, 3 kept (0 change tenant)\n"+
			"demand met (compute slices, 7 = one GPU): reserved 1 of 3 (33.3%), pending 0 of 0 (-)\n")
}

// A plan of a fleet read from usage samples names the GPUs it did not
// plan (vGPU hosts, models without MIG tables) and why.
func TestWritePlanListsSkippedGPUs(t *testing.T) {
	plan := partition.Plan{Summary: partition.Summary{GPUs: 1}, Skipped: []partition.Skipped{
		{Host: "hv", UUID: "GPU-ts", Model: "A100-SXM4-40GB", Reason: "runs vGPU instances (vgpu:A100-8C): the hypervisor's vGPU manager owns its layout, not MIG-plannable"},
	}}
	assertWrites(t, func(w io.Writer) error { return reports.WritePlan(w, plan) },
		"plan: 1 GPUs, 0 to change: 0 instances to create, 0 to destroy, 0 kept (0 change tenant)\n"+
			"demand met (compute slices, 7 = one GPU): reserved 0 of 0 (-), pending 0 of 0 (-)\n"+
			"\nnot planned (1 GPUs):\n"+
			"  hv GPU-ts (A100-SXM4-40GB): runs vGPU instances (vgpu:A100-8C): the hypervisor's vGPU manager owns its layout, not MIG-plannable\n")
}

func TestWriteApply(t *testing.T) {
	steps := []nvmlapply.Step{
		{GPU: "GPU-1", Action: partition.Destroy, Profile: "1g.10gb", Start: 0, GPUInstanceID: 13},
		{GPU: "GPU-1", Action: partition.Create, Profile: "3g.40gb", Start: 0},
	}
	done := []nvmlapply.Step{steps[0], steps[1]}
	done[0].Done, done[1].Done, done[1].GPUInstanceID = true, true, 2
	cases := []struct {
		name string
		rep  nvmlapply.ApplyReport
		ok   bool
		want string
	}{
		{"a dry run says what it would do", nvmlapply.ApplyReport{DryRun: true, Steps: steps, NotOnHost: []string{"GPU-9"}, Unchanged: []string{"GPU-2", "GPU-3"}}, true,
			"would    destroy GPU-1 1g.10gb     @0 (GPU instance 13)\n" +
				"would    create  GPU-1 3g.40gb     @0\n" +
				"1 GPUs of the plan are on other hosts\n" +
				"2 GPUs already match the plan\n" +
				"dry run: nothing changed; add --yes to apply\n"},
		{"a failed dry run does not claim success", nvmlapply.ApplyReport{DryRun: true, Steps: steps[:1]}, false,
			"would    destroy GPU-1 1g.10gb     @0 (GPU instance 13)\n"},
		{"applied: the created instance's id", nvmlapply.ApplyReport{Steps: done}, true,
			"done     destroy GPU-1 1g.10gb     @0 (GPU instance 13)\n" +
				"done     create  GPU-1 3g.40gb     @0 (GPU instance 2)\n"},
		{"stopped half way", nvmlapply.ApplyReport{Steps: []nvmlapply.Step{done[0], steps[1]}}, false,
			"done     destroy GPU-1 1g.10gb     @0 (GPU instance 13)\n" +
				"not done create  GPU-1 3g.40gb     @0\n"},
		{"nothing to do", nvmlapply.ApplyReport{Unchanged: []string{"GPU-1"}}, true, "1 GPUs already match the plan\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assertWrites(t, func(w io.Writer) error { return reports.WriteApply(w, tc.rep, tc.ok) }, tc.want)
		})
	}
	if err := reports.WriteApply(&failingWriter{n: 3}, cases[0].rep, true); !errors.Is(err, errFull) {
		t.Errorf("a failing writer: error %v", err)
	}
}
