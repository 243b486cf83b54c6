package nvml

import (
	"testing"

	"github.com/gpumeter/gpumeter/collectors"
)

func TestProfileFromName(t *testing.T) {
	cases := []struct{ name, want string }{
		{"NVIDIA A100-SXM4-40GB MIG 3g.20gb", "3g.20gb"},
		{"NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb"},
		{"NVIDIA H200 MIG 1g.18gb+me", "1g.18gb+me"},
		{"NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", "3g.20gb"},
		{"NVIDIA A100-SXM4-40GB", ""},
		{"MIG ", ""},
		{"NVIDIA X MIG 3g/evil", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := profileFromName(tc.name); got != tc.want {
				t.Fatalf("profileFromName(%q) = %q, want %q", tc.name, got, tc.want)
			}
		})
	}
}

func TestMIGMemoryGB(t *testing.T) {
	// NVIDIA's naming: the instance's share of the board rounded up to
	// eighths, times the board's GB.
	cases := []struct {
		name       string
		totalBytes uint64
		migMB      uint64
		want       uint64
	}{
		{"A100 40GB 1g", 40960 << 20, 4864, 5},
		{"A100 40GB 3g", 40960 << 20, 19968, 20},
		{"A100 80GB 1g", 81920 << 20, 9856, 10},
		{"H100 80GB 3g", 81559 << 20, 40192, 40},
		{"unknown board memory", 0, 9856, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := migMemoryGB(tc.totalBytes, tc.migMB); got != tc.want {
				t.Fatalf("migMemoryGB = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestAssignMilliSlices(t *testing.T) {
	// A 3g GPU instance split into 1c + 2c compute instances, and a 2g
	// instance on its own.
	insts := []collectors.MIGInstance{{UUID: "a", GPUInstanceID: 1}, {UUID: "b", GPUInstanceID: 1}, {UUID: "c", GPUInstanceID: 2}}
	infos := map[string]*migInfo{
		"a": {gi: 1, giSlices: 3, ciSlices: 1},
		"b": {gi: 1, giSlices: 3, ciSlices: 2},
		"c": {gi: 2, giSlices: 2, ciSlices: 2},
	}
	assignMilliSlices(insts, infos)
	if insts[0].MilliSlices != 1000 || insts[1].MilliSlices != 2000 || insts[2].MilliSlices != 2000 {
		t.Fatalf("milli-slices %d %d %d, want 1000 2000 2000", insts[0].MilliSlices, insts[1].MilliSlices, insts[2].MilliSlices)
	}
}
