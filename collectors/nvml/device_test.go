package nvml

import "testing"

func TestModelFromName(t *testing.T) {
	cases := []struct{ name, want string }{
		{"NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"},
		{"NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"},
		{"NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"},
		{"NVIDIA H200", "H200-SXM5-141GB"},
		{"nvidia h200 141gb hbm3e", "H200-SXM5-141GB"},
		{"  NVIDIA H100 80GB HBM3 ", "H100-SXM5-80GB"},
		{"NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB"},
		{"NVIDIA H100 PCIe", "H100-PCIe"},
		{"Tesla T4", "Tesla-T4"},
		{"NVIDIA H200 NVL", "H200-NVL"},
		{"Weird/Name (rev 2)", "Weird-Name-rev-2"},
		{"Ünïcode GPU", "n-code-GPU"},
		{"", "unknown"},
		{"///", "unknown"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ModelFromName(tc.name); got != tc.want {
				t.Fatalf("ModelFromName(%q) = %q, want %q", tc.name, got, tc.want)
			}
		})
	}
}

func TestPercentRatio(t *testing.T) {
	cases := []struct {
		p    float64
		want uint32
	}{{0, 0}, {-3, 0}, {42.5, 425_000}, {100, 1_000_000}, {250, 1_000_000}}
	for _, tc := range cases {
		if got := percentRatio(tc.p); !got.OK || got.PPM != tc.want {
			t.Errorf("percentRatio(%v) = %+v, want %d", tc.p, got, tc.want)
		}
	}
}

func TestCString(t *testing.T) {
	b := [32]int8{}
	for i, c := range "00000000:07:00.0" {
		b[i] = int8(c)
	}
	if got := cString(b[:]); got != "00000000:07:00.0" {
		t.Fatalf("cString = %q", got)
	}
}
