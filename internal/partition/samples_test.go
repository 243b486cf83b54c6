package partition

import (
	"reflect"
	"testing"
)

func TestFleetFromSamples(t *testing.T) {
	h100, a100 := "H100-SXM5-80GB", "A100-SXM4-40GB"
	tests := []struct {
		name    string
		in      []DeviceSample
		want    Fleet
		skipped int
	}{
		{"nothing", nil, Fleet{}, 0},
		{"a whole GPU is MIG-disabled", []DeviceSample{{Host: "n1", GPUUUID: "GPU-b", GPUModel: a100, Tenant: "acme"}},
			Fleet{GPUs: []GPU{{Host: "n1", UUID: "GPU-b", Model: a100, MIGDisabled: true}}}, 0},
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
		}}}}, 0},
		{"models without MIG tables are left out and counted", []DeviceSample{
			{Host: "n1", GPUUUID: "GPU-c", GPUModel: "L40S", Tenant: "acme"},
			{Host: "n1", GPUUUID: "GPU-d", GPUModel: "Tesla-T4"},
			{Host: "n1", GPUUUID: "GPU-b", GPUModel: a100},
		}, Fleet{GPUs: []GPU{{Host: "n1", UUID: "GPU-b", Model: a100, MIGDisabled: true}}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]DeviceSample(nil), tt.in...)
			got, skipped := FleetFromSamples(tt.in)
			if !reflect.DeepEqual(got, tt.want) || skipped != tt.skipped {
				t.Fatalf("got %+v (skipped %d)\nwant %+v (skipped %d)", got, skipped, tt.want, tt.skipped)
			}
			if !reflect.DeepEqual(in, tt.in) {
				t.Fatal("FleetFromSamples changed its input")
			}
		})
	}
}
