package gpucatalog

import (
	"slices"
	"strings"
	"testing"
)

// The rows NVIDIA's MIG user guide prints (r580, "Supported MIG Profiles",
// Tables 6-8), pinned so a slip in the table is caught.
func TestProfilesMatchNVIDIAGuide(t *testing.T) {
	type row struct {
		model, profile        string
		compute, mem, gb, max int
		nvml                  int
		starts                []int
	}
	all7 := []int{0, 1, 2, 3, 4, 5, 6}
	for _, tc := range []row{
		{A100SXM4_40GB, "1g.5gb", 1, 1, 5, 7, 0, all7},
		{A100SXM4_40GB, "1g.5gb+me", 1, 1, 5, 1, 7, all7},
		{A100SXM4_40GB, "1g.10gb", 1, 2, 10, 4, 9, []int{0, 2, 4, 6}},
		{A100SXM4_40GB, "2g.10gb", 2, 2, 10, 3, 1, []int{0, 2, 4}},
		{A100SXM4_40GB, "3g.20gb", 3, 4, 20, 2, 2, []int{0, 4}},
		{A100SXM4_40GB, "4g.20gb", 4, 4, 20, 1, 3, []int{0}},
		{A100SXM4_40GB, "7g.40gb", 7, 8, 40, 1, 4, []int{0}},
		{A100SXM4_80GB, "1g.10gb", 1, 1, 10, 7, 0, all7},
		{A100SXM4_80GB, "1g.20gb", 1, 2, 20, 4, 9, []int{0, 2, 4, 6}},
		{A100SXM4_80GB, "7g.80gb", 7, 8, 80, 1, 4, []int{0}},
		{H100SXM5_80GB, "1g.10gb", 1, 1, 10, 7, 0, all7},
		{H100SXM5_80GB, "1g.10gb+me", 1, 1, 10, 1, 7, all7},
		{H100SXM5_80GB, "1g.20gb", 1, 2, 20, 4, 9, []int{0, 2, 4, 6}},
		{H100SXM5_80GB, "2g.20gb", 2, 2, 20, 3, 1, []int{0, 2, 4}},
		{H100SXM5_80GB, "3g.40gb", 3, 4, 40, 2, 2, []int{0, 4}},
		{H100SXM5_80GB, "4g.40gb", 4, 4, 40, 1, 3, []int{0}},
		{H100SXM5_80GB, "7g.80gb", 7, 8, 80, 1, 4, []int{0}},
		{H200SXM5_141GB, "1g.18gb", 1, 1, 18, 7, 0, all7},
		{H200SXM5_141GB, "1g.18gb+me", 1, 1, 18, 1, 7, all7},
		{H200SXM5_141GB, "1g.35gb", 1, 2, 35, 4, 9, []int{0, 2, 4, 6}},
		{H200SXM5_141GB, "2g.35gb", 2, 2, 35, 3, 1, []int{0, 2, 4}},
		{H200SXM5_141GB, "3g.71gb", 3, 4, 71, 2, 2, []int{0, 4}},
		{H200SXM5_141GB, "4g.71gb", 4, 4, 71, 1, 3, []int{0}},
		{H200SXM5_141GB, "7g.141gb", 7, 8, 141, 1, 4, []int{0}},
	} {
		t.Run(tc.model+"/"+tc.profile, func(t *testing.T) {
			p, ok := Lookup(tc.model, tc.profile)
			if !ok {
				t.Fatalf("Lookup(%s, %s) not found", tc.model, tc.profile)
			}
			if p.ComputeSlices != tc.compute || p.MemorySlices != tc.mem || p.MemoryGB != tc.gb || p.MaxInstances != tc.max || p.NVMLProfile != tc.nvml {
				t.Errorf("got compute %d mem %d gb %d max %d nvml %d, want %d %d %d %d %d",
					p.ComputeSlices, p.MemorySlices, p.MemoryGB, p.MaxInstances, p.NVMLProfile,
					tc.compute, tc.mem, tc.gb, tc.max, tc.nvml)
			}
			var starts []int
			for _, pl := range p.Placements {
				starts = append(starts, pl.Start)
				if pl.Size != tc.mem {
					t.Errorf("placement %v: size %d, want the profile's %d memory slices", pl, pl.Size, tc.mem)
				}
			}
			if !slices.Equal(starts, tc.starts) {
				t.Errorf("starts %v, want %v", starts, tc.starts)
			}
		})
	}
}

// Every set of non-overlapping placements must stay within 7 compute
// slices: the placement table alone has to encode the compute limit, since
// the planner checks placements, not a separate sum.
func TestPlacementsNeverExceedSevenComputeSlices(t *testing.T) {
	for _, name := range Models() {
		m, _ := LookupModel(name)
		type pl struct {
			mask    uint8
			compute int
		}
		var all []pl
		for _, p := range m.Profiles {
			for _, x := range p.Placements {
				if x.Mask() == 0 {
					t.Fatalf("%s %s: placement %v outside the 8 slots", name, p.Name, x)
				}
				all = append(all, pl{x.Mask(), p.ComputeSlices})
			}
		}
		var rec func(i int, used uint8, compute int)
		worst := 0
		rec = func(i int, used uint8, compute int) {
			worst = max(worst, compute)
			for j := i; j < len(all); j++ {
				if used&all[j].mask == 0 {
					rec(j+1, used|all[j].mask, compute+all[j].compute)
				}
			}
		}
		rec(0, 0, 0)
		if worst != ComputeSlices {
			t.Errorf("%s: most compute in one layout is %d, want %d", name, worst, ComputeSlices)
		}
	}
}

func TestMaxInstancesNeverExceedPlacements(t *testing.T) {
	for _, name := range Models() {
		m, _ := LookupModel(name)
		for _, p := range m.Profiles {
			if p.MaxInstances < 1 || p.MaxInstances > len(p.Placements) {
				t.Errorf("%s %s: max %d with %d placements", name, p.Name, p.MaxInstances, len(p.Placements))
			}
		}
	}
}

func TestLookupReturnsCopies(t *testing.T) {
	p, _ := Lookup(H100SXM5_80GB, "3g.40gb")
	p.Placements[0].Start = 5
	m, _ := LookupModel(H100SXM5_80GB)
	m.Profiles[0].Placements[0].Start = 6
	m.Profiles[1].Name = "changed"
	again, _ := Lookup(H100SXM5_80GB, "3g.40gb")
	if again.Placements[0].Start != 0 {
		t.Errorf("3g.40gb placement changed through a lookup: %v", again.Placements)
	}
	if one, _ := Lookup(H100SXM5_80GB, "1g.10gb"); one.Placements[0].Start != 0 {
		t.Errorf("1g.10gb placement changed through LookupModel: %v", one.Placements)
	}
	if _, ok := Lookup(H100SXM5_80GB, "1g.10gb+me"); !ok {
		t.Error("profile renamed through LookupModel")
	}
}

func TestParseSKU(t *testing.T) {
	for _, tc := range []struct{ sku, model, profile string }{
		{"H100-SXM5-80GB/3g.40gb", "H100-SXM5-80GB", "3g.40gb"},
		{"H100-SXM5-80GB", "H100-SXM5-80GB", ""},
		{"", "", ""},
		{"A/b/c", "A", "b/c"},
	} {
		t.Run(tc.sku, func(t *testing.T) {
			m, p := ParseSKU(tc.sku)
			if m != tc.model || p != tc.profile {
				t.Errorf("ParseSKU(%q) = %q, %q; want %q, %q", tc.sku, m, p, tc.model, tc.profile)
			}
		})
	}
}

func TestGPUEquivalent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sku      string
		num, den int
		ok       bool
	}{
		{"whole GPU is one", "H100-SXM5-80GB", 1, 1, true},
		{"whole GPU of a model outside the tables is one", "L40S", 1, 1, true},
		{"3g is three sevenths", "H100-SXM5-80GB/3g.40gb", 3, 7, true},
		{"1g with two memory slices still weighs one compute slice", "A100-SXM4-80GB/1g.20gb", 1, 7, true},
		{"media extensions do not change the weight", "H200-SXM5-141GB/1g.18gb+me", 1, 7, true},
		{"4g is four sevenths", "A100-SXM4-40GB/4g.20gb", 4, 7, true},
		{"7g reduces to one", "H200-SXM5-141GB/7g.141gb", 1, 1, true},
		{"profile of another model is unknown", "A100-SXM4-40GB/3g.40gb", 0, 0, false},
		{"unknown model with a profile is unknown", "L40S/1g.12gb", 0, 0, false},
		{"empty SKU is unknown", "", 0, 0, false},
		{"trailing slash is malformed", "H100-SXM5-80GB/", 0, 0, false},
		{"model with a space is malformed", "H100 80GB", 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			num, den, ok := GPUEquivalent(tc.sku)
			if num != tc.num || den != tc.den || ok != tc.ok {
				t.Errorf("GPUEquivalent(%q) = %d/%d %t, want %d/%d %t", tc.sku, num, den, ok, tc.num, tc.den, tc.ok)
			}
		})
	}
}

func TestVGPUTypes(t *testing.T) {
	cases := []struct {
		sku      string
		num, den int
		ok       bool
	}{
		{"A100-SXM4-40GB/vgpu:A100-4C", 1, 10, true},
		{"A100-SXM4-40GB/vgpu:A100-40C", 1, 1, true},
		{"A100-SXM4-40GB/vgpu:A100-8C", 1, 5, true},
		{"A100-SXM4-40GB/vgpu:A100-3-20C", 3, 7, true}, // MIG-backed: 3g.20gb's weight
		{"A100-SXM4-40GB/vgpu:A100-7-40C", 1, 1, true},
		{"A100-SXM4-80GB/vgpu:A100D-2-20C", 2, 7, true},
		{"H100-SXM5-80GB/vgpu:H100XM-4C", 1, 20, true},
		{"H100-SXM5-80GB/vgpu:H100XM-1-10C", 1, 7, true},
		{"H200-SXM5-141GB/vgpu:H200X-141C", 1, 1, true},
		{"A100-SXM4-40GB/vgpu:A100-4Q", 1, 10, true},
		{"A100-SXM4-40GB/vgpu:H100XM-4C", 0, 0, false},  // another board
		{"A100-SXM4-40GB/vgpu:A100-3-40C", 0, 0, false}, // no 3g.40gb on 40 GB
		{"A100-SXM4-40GB/vgpu:A100-80C", 0, 0, false},   // more than the GPU
		{"A100-SXM4-40GB/vgpu:A100-04C", 0, 0, false},
		{"A100-SXM4-40GB/vgpu:A100-4X", 0, 0, false},
		{"A100-SXM4-40GB/vgpu:A100-3-20Q", 0, 0, false}, // MIG-backed types are C only
		{"A100-SXM4-40GB/vgpu:", 0, 0, false},
		{"Tesla-T4/vgpu:T4-4C", 0, 0, false}, // no vGPU table for the model
	}
	for _, tc := range cases {
		num, den, ok := GPUEquivalent(tc.sku)
		if num != tc.num || den != tc.den || ok != tc.ok {
			t.Errorf("GPUEquivalent(%q) = %d/%d %t, want %d/%d %t", tc.sku, num, den, ok, tc.num, tc.den, tc.ok)
		}
		if err := CheckSKU(tc.sku); (err == nil) != tc.ok && !strings.HasPrefix(tc.sku, "Tesla") {
			t.Errorf("CheckSKU(%q) = %v, want ok %t", tc.sku, err, tc.ok)
		}
	}
	// A time-sliced type's weight is the fixed share the scheduler gives
	// it: 1/(max instances), the count NVML reports for the type.
	if v, ok := LookupVGPU(A100SXM4_40GB, "A100-5C"); !ok || v.MaxInstances != 8 || v.MIGProfile != "" {
		t.Fatalf("A100-5C: %+v %t", v, ok)
	}
	if v, ok := LookupVGPU(H100SXM5_80GB, "H100XM-3-40C"); !ok || v.MIGProfile != "3g.40gb" {
		t.Fatalf("H100XM-3-40C: %+v %t", v, ok)
	}
}

func TestModelFromDeviceName(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		ok          bool
	}{
		{"NVIDIA A100-SXM4-40GB", A100SXM4_40GB, true},
		{"NVIDIA A100-SXM4-80GB", A100SXM4_80GB, true},
		{"NVIDIA H100 80GB HBM3", H100SXM5_80GB, true},
		{"NVIDIA H200", H200SXM5_141GB, true},
		{"H200-SXM5-141GB", H200SXM5_141GB, true},
		{"nvidia h200 141gb hbm3e", H200SXM5_141GB, true},
		{"  NVIDIA H100 80GB HBM3 ", H100SXM5_80GB, true},
		{"NVIDIA H100 PCIe", "H100-PCIe", false},
		{"NVIDIA H200 NVL", "H200-NVL", false},
		{"NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB", false},
		{"Tesla T4", "Tesla-T4", false},
		{"Weird/Name (rev 2)", "Weird-Name-rev-2", false},
		{"Ünïcode GPU", "n-code-GPU", false},
		{"///", "unknown", false},
		{"", "unknown", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := ModelFromDeviceName(tc.name)
			if m != tc.model || ok != tc.ok {
				t.Errorf("ModelFromDeviceName(%q) = %q %t, want %q %t", tc.name, m, ok, tc.model, tc.ok)
			}
		})
	}
}

func TestCanonicalModel(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		ok          bool
	}{
		{"H100-SXM5-80GB", H100SXM5_80GB, true},
		{"h100-sxm5-80gb", H100SXM5_80GB, true},
		{"h100_sxm5_80gb", H100SXM5_80GB, true},
		{"NVIDIA H100 80GB HBM3", H100SXM5_80GB, true},
		{"NVIDIA-H100-80GB-HBM3", H100SXM5_80GB, true}, // nvidia.com/gpu.product
		{"NVIDIA-A100-SXM4-80GB", A100SXM4_80GB, true},
		{"nvidia-a100-sxm4-40gb", A100SXM4_40GB, true},
		{"NVIDIA-H200", H200SXM5_141GB, true},
		{"NVIDIA-H100-PCIe", "H100-PCIe", false}, // another SKU, as the collector names it
		{"A100-PCIE-40GB", "A100-PCIE-40GB", false},
		{"Tesla T4", "Tesla-T4", false},
		{"H100", "H100", false}, // PCIe, SXM5 or NVL: not guessed
		{"foo", "foo", false},
		{"", "unknown", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := CanonicalModel(tc.name)
			if m != tc.model || ok != tc.ok {
				t.Errorf("CanonicalModel(%q) = %q %t, want %q %t", tc.name, m, ok, tc.model, tc.ok)
			}
		})
	}
}

func TestModelsWithProfile(t *testing.T) {
	got := ModelsWithProfile("3g.40gb")
	if !slices.Equal(got, []string{A100SXM4_80GB, H100SXM5_80GB}) {
		t.Errorf("ModelsWithProfile(3g.40gb) = %v", got)
	}
	if got := ModelsWithProfile("9g.1tb"); got != nil {
		t.Errorf("ModelsWithProfile(9g.1tb) = %v, want none", got)
	}
}

func TestSKURoundTrip(t *testing.T) {
	for _, tc := range []struct{ model, profile, sku string }{
		{H100SXM5_80GB, "", "H100-SXM5-80GB"},
		{H100SXM5_80GB, "3g.40gb", "H100-SXM5-80GB/3g.40gb"},
	} {
		if got := SKU(tc.model, tc.profile); got != tc.sku {
			t.Errorf("SKU(%q, %q) = %q, want %q", tc.model, tc.profile, got, tc.sku)
		}
		if m, p := ParseSKU(tc.sku); m != tc.model || p != tc.profile {
			t.Errorf("ParseSKU(%q) = %q %q", tc.sku, m, p)
		}
	}
}

func TestProfileIndexAndMaskAt(t *testing.T) {
	m, _ := LookupModel(H100SXM5_80GB)
	i, ok := m.ProfileIndex("3g.40gb")
	if !ok || m.Profiles[i].Name != "3g.40gb" {
		t.Fatalf("ProfileIndex(3g.40gb) = %d %t", i, ok)
	}
	if _, ok := m.ProfileIndex("9g.99gb"); ok {
		t.Fatal("ProfileIndex found 9g.99gb")
	}
	p := m.Profiles[i]
	if got := p.MaskAt(4); got != 0xf0 {
		t.Errorf("3g at 4: mask %#x, want 0xf0", got)
	}
	if got := p.MaskAt(2); got != 0 {
		t.Errorf("3g at 2: mask %#x, want 0 (not a placement)", got)
	}
}

func TestLookupAnyModel(t *testing.T) {
	for _, tc := range []struct {
		model, profile  string
		compute, memory int
		ok              bool
	}{
		{"", "3g.40gb", 3, 4, true},
		{"", "1g.5gb", 1, 1, true},
		{"H100-SXM5-80GB", "1g.10gb", 1, 1, true},
		{"A100-SXM4-40GB", "1g.10gb", 1, 2, true},
		{"A100-SXM4-40GB", "1g.20gb", 0, 0, false},
		{"", "9g.1tb", 0, 0, false},
	} {
		p, ok := LookupAnyModel(tc.model, tc.profile)
		if ok != tc.ok || p.ComputeSlices != tc.compute || p.MemorySlices != tc.memory {
			t.Errorf("LookupAnyModel(%q, %q) = %d/%d, %v; want %d/%d, %v", tc.model, tc.profile, p.ComputeSlices, p.MemorySlices, ok, tc.compute, tc.memory, tc.ok)
		}
	}
}

func TestCheckSKU(t *testing.T) {
	for _, tc := range []struct {
		sku, want string // want: "" for fine, else part of the error
	}{
		{"H100-SXM5-80GB", ""},
		{"H100-SXM5-80GB/3g.40gb", ""},
		{"T4", ""},            // a model the table does not know
		{"L40S/vgpu-48q", ""}, // nor its profiles
		{"h100-sxm5-80gb", `"H100-SXM5-80GB"`},
		{"H100-SXM5-80GB/3G.40GB", `"H100-SXM5-80GB/3g.40gb"`},
		{"H100-SXM5-80GB/9g.99gb", `no MIG profile "9g.99gb"`},
		{"A100-SXM4-40GB/1g.10gb", ""},
		{"A100-SXM4-40GB/3g.40gb", `no MIG profile "3g.40gb"`},
	} {
		err := CheckSKU(tc.sku)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckSKU(%q) = %v, want %q", tc.sku, err, tc.want)
		}
	}
}

func TestKinds(t *testing.T) {
	for _, tc := range []struct {
		sku  string
		want Kind
	}{
		{"H100-SXM5-80GB", KindGPU},
		{"H100-SXM5-80GB/3g.40gb", KindMIG},
		{"A100-SXM4-40GB/vgpu:A100-4C", KindVGPU},
		{"Tesla-T4", KindGPU},
	} {
		if got := SKUKind(tc.sku); got != tc.want {
			t.Errorf("SKUKind(%q) = %v, want %v", tc.sku, got, tc.want)
		}
	}
	if p := VGPUProfile("A100-4C"); ProfileKind(p) != KindVGPU || p != "vgpu:A100-4C" {
		t.Errorf("VGPUProfile = %q", p)
	}
	if !MIGActivityMeasured(H100SXM5_80GB) || MIGActivityMeasured(A100SXM4_40GB) {
		t.Error("GPM: H100 measures MIG activity, A100 does not")
	}
}
