package partition

import (
	"reflect"
	"testing"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

func TestFleetFromSamples(t *testing.T) {
	h100, a100 := "H100-SXM5-80GB", "A100-SXM4-40GB"
	tests := []struct {
		name    string
		in      []DeviceSample
		want    Fleet
		skipped []Skipped
	}{
		{"nothing", nil, Fleet{}, nil},
		{"a whole GPU is MIG-disabled", []DeviceSample{{Host: "n1", GPUUUID: "GPU-b", GPUModel: a100, Tenant: "acme"}},
			Fleet{GPUs: []GPU{{Host: "n1", UUID: "GPU-b", Model: a100, MIGDisabled: true}}}, nil},
		{"held instances are busy, the first holder by name is kept, idle ones free, any order and duplicates", []DeviceSample{
			{Host: "n1", GPUUUID: "GPU-a", GPUModel: h100, MIGUUID: "MIG-a3", MIGProfile: "1g.10gb", Tenant: "globex"},
			{Host: "n1", GPUUUID: "GPU-a", GPUModel: h100},
			{Host: "n1", GPUUUID: "GPU-a", GPUModel: h100, MIGUUID: "MIG-a1", MIGProfile: "3g.40gb", Tenant: "acme"},
			{Host: "n1", GPUUUID: "GPU-a", GPUModel: h100, MIGUUID: "MIG-a3", MIGProfile: "1g.10gb", Tenant: "beta"},
			{Host: "n1", GPUUUID: "GPU-a", GPUModel: h100, MIGUUID: "MIG-a1", MIGProfile: "3g.40gb", Tenant: "acme"},
			{Host: "n1", GPUUUID: "GPU-a", GPUModel: h100, MIGUUID: "MIG-a4", MIGProfile: "1g.10gb"},
		}, Fleet{GPUs: []GPU{{Host: "n1", UUID: "GPU-a", Model: h100, Instances: []Instance{
			{Profile: "3g.40gb", UUID: "MIG-a1", Tenant: "acme", Busy: true},
			{Profile: "1g.10gb", UUID: "MIG-a3", Tenant: "beta", Busy: true},
			{Profile: "1g.10gb", UUID: "MIG-a4"},
		}}}}, nil},
		{"models without MIG tables are left out and counted", []DeviceSample{
			{Host: "n1", GPUUUID: "GPU-c", GPUModel: "L40S", Tenant: "acme"},
			{Host: "n1", GPUUUID: "GPU-d", GPUModel: "Tesla-T4"},
			{Host: "n1", GPUUUID: "GPU-b", GPUModel: a100},
		}, Fleet{GPUs: []GPU{{Host: "n1", UUID: "GPU-b", Model: a100, MIGDisabled: true}}}, []Skipped{
			{Host: "n1", UUID: "GPU-c", Model: "L40S", Reason: "model L40S has no MIG profile table"},
			{Host: "n1", UUID: "GPU-d", Model: "Tesla-T4", Reason: "model Tesla-T4 has no MIG profile table"},
		}},
		{"every SKU kind the collector writes: vGPU GPUs are listed as not MIG-plannable", skuKindSamples, skuKindFleet, skuKindSkipped},
		// Before, the fleet took the profile and the whole plan failed its
		// validation; now that GPU is left out, with the reason.
		{"a MIG profile the table lacks (a newer driver's) leaves that GPU out", []DeviceSample{
			{Host: "n1", GPUUUID: "GPU-e", GPUModel: a100, MIGUUID: "MIG-e1", MIGProfile: "1g.12gb", Tenant: "acme"},
			{Host: "n1", GPUUUID: "GPU-e", GPUModel: a100, MIGUUID: "MIG-e2", MIGProfile: "1g.10gb"},
			{Host: "n1", GPUUUID: "GPU-b", GPUModel: a100},
		}, Fleet{GPUs: []GPU{{Host: "n1", UUID: "GPU-b", Model: a100, MIGDisabled: true}}}, []Skipped{
			{Host: "n1", UUID: "GPU-e", Model: a100, Reason: "MIG profile 1g.12gb is not in " + a100 + "'s profile table"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]DeviceSample(nil), tt.in...)
			got, skipped := FleetFromSamples(tt.in)
			if !reflect.DeepEqual(got, tt.want) || !reflect.DeepEqual(skipped, tt.skipped) {
				t.Fatalf("got %+v\nskipped %+v\nwant %+v\nskipped %+v", got, skipped, tt.want, tt.skipped)
			}
			if !reflect.DeepEqual(in, tt.in) {
				t.Fatal("FleetFromSamples changed its input")
			}
		})
	}
}

// skuKindSamples is one interval of a fleet with every SKU kind the
// collector writes, as the demo's simulated DGX and vGPU hosts write them
// (collectors/attribution: a vGPU instance takes the MIG columns, its
// profile "vgpu:<type>"): a whole GPU, a MIG GPU, time-sliced vGPU, MIG-
// backed vGPU, a passthrough GPU (the model's SKU, held by its VM) and a
// model outside the tables.
var skuKindSamples = []DeviceSample{
	{Host: "dgx", GPUUUID: "GPU-whole", GPUModel: gpucatalog.H100SXM5_80GB, Tenant: "acme"},
	{Host: "dgx", GPUUUID: "GPU-mig", GPUModel: gpucatalog.H100SXM5_80GB, MIGUUID: "MIG-1", MIGProfile: "3g.40gb", Tenant: "acme"},
	{Host: "dgx", GPUUUID: "GPU-mig", GPUModel: gpucatalog.H100SXM5_80GB, MIGUUID: "MIG-2", MIGProfile: "1g.10gb"},
	{Host: "dgx", GPUUUID: "GPU-mig", GPUModel: gpucatalog.H100SXM5_80GB},
	{Host: "hv", GPUUUID: "GPU-ts", GPUModel: gpucatalog.A100SXM4_40GB, MIGUUID: "vgpu-1", MIGProfile: "vgpu:A100-10C", Tenant: "acme"},
	{Host: "hv", GPUUUID: "GPU-ts", GPUModel: gpucatalog.A100SXM4_40GB, MIGUUID: "vgpu-2", MIGProfile: "vgpu:A100-4C", Tenant: "beta"},
	{Host: "hv", GPUUUID: "GPU-ts", GPUModel: gpucatalog.A100SXM4_40GB},
	{Host: "hv", GPUUUID: "GPU-mb", GPUModel: gpucatalog.A100SXM4_40GB, MIGUUID: "vgpu-3", MIGProfile: "vgpu:A100-3-20C", Tenant: "beta"},
	{Host: "hv", GPUUUID: "GPU-mb", GPUModel: gpucatalog.A100SXM4_40GB},
	{Host: "hv", GPUUUID: "GPU-pt", GPUModel: gpucatalog.A100SXM4_40GB, Tenant: "beta"},
	{Host: "hv", GPUUUID: "GPU-t4", GPUModel: "Tesla-T4", Tenant: "acme"},
}

var (
	skuKindFleet = Fleet{GPUs: []GPU{
		{Host: "dgx", UUID: "GPU-mig", Model: gpucatalog.H100SXM5_80GB, Instances: []Instance{
			{Profile: "3g.40gb", UUID: "MIG-1", Tenant: "acme", Busy: true},
			{Profile: "1g.10gb", UUID: "MIG-2"},
		}},
		{Host: "hv", UUID: "GPU-pt", Model: gpucatalog.A100SXM4_40GB, MIGDisabled: true},
		{Host: "dgx", UUID: "GPU-whole", Model: gpucatalog.H100SXM5_80GB, MIGDisabled: true},
	}}
	skuKindSkipped = []Skipped{
		{Host: "hv", UUID: "GPU-mb", Model: gpucatalog.A100SXM4_40GB,
			Reason: "runs vGPU instances (vgpu:A100-3-20C): the hypervisor's vGPU manager owns its layout, not MIG-plannable"},
		{Host: "hv", UUID: "GPU-t4", Model: "Tesla-T4", Reason: "model Tesla-T4 has no MIG profile table"},
		{Host: "hv", UUID: "GPU-ts", Model: gpucatalog.A100SXM4_40GB,
			Reason: "runs vGPU instances (vgpu:A100-10C, vgpu:A100-4C): the hypervisor's vGPU manager owns its layout, not MIG-plannable"},
	}
)

// Issue 31: a vGPU host's samples made the fleet invalid ("model
// A100-SXM4-40GB has no profile \"vgpu:A100-8C\""), so no plan was made.
// The fleet of every SKU kind validates and plans; the vGPU GPUs are not
// in it.
func TestSolveOnFleetOfEverySKUKind(t *testing.T) {
	fleet, skipped := FleetFromSamples(skuKindSamples)
	if len(skipped) != 3 {
		t.Fatalf("skipped %+v", skipped)
	}
	demand := Demand{Tenants: []TenantDemand{{Tenant: "beta", Reserved: []Request{{Profile: "3g.40gb", Count: 1}, {Model: gpucatalog.A100SXM4_40GB, Profile: "2g.10gb", Count: 1}}}}}
	plan, err := Solve(fleet, demand)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, fleet, demand, plan)
	if plan.Summary.ReservedMetSlices != 3 || len(plan.Unmet) != 1 || plan.Unmet[0].Reason != "every A100-SXM4-40GB GPU has MIG mode disabled" {
		t.Errorf("summary %+v, unmet %+v", plan.Summary, plan.Unmet)
	}
}
