// Package gpucatalog is the GPU catalogue: the GPU models gpumeter plans
// and prices, their MIG profiles and placements (NVIDIA's tables), their
// vGPU types, what kind of thing a SKU sells, and the one GPU-equivalent
// weight table that pricing, quotas, insights, the collectors and the
// partition planner share.
//
// It is a leaf package (standard library only, no clock, files or network)
// so that every layer, the GPU host included, reads the same numbers.
package gpucatalog

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// Canonical GPU model keys. They are fixed project-wide: the collector maps
// NVML device names onto them, price books and quotas use them in SKUs.
const (
	A100SXM4_40GB  = "A100-SXM4-40GB"
	A100SXM4_80GB  = "A100-SXM4-80GB"
	H100SXM5_80GB  = "H100-SXM5-80GB"
	H200SXM5_141GB = "H200-SXM5-141GB"
)

// Geometry shared by every model in the tables: a GPU has 7 compute (SM)
// slices and 8 memory slices; placements are positions on the memory axis.
const (
	ComputeSlices = 7
	MemorySlots   = 8
)

// Placement is where a GPU instance sits on the 8-slot memory axis, as NVML's
// nvmlGpuInstancePlacement_t and `nvidia-smi mig -lgipp` report it.
type Placement struct {
	Start int
	Size  int
}

// Mask is the set of memory slots the placement occupies (bit i = slot i).
func (p Placement) Mask() uint8 {
	if p.Size <= 0 || p.Start < 0 || p.Start+p.Size > MemorySlots {
		return 0
	}
	return uint8((1<<p.Size - 1) << p.Start)
}

func (p Placement) String() string { return fmt.Sprintf("%d:%d", p.Start, p.Size) }

// Profile is one GPU instance profile of one GPU model.
type Profile struct {
	Name string // e.g. "3g.40gb"
	// NVMLProfile is the GPU_INSTANCE_PROFILE_* constant passed to
	// nvmlDeviceGetGpuInstanceProfileInfo (not nvidia-smi's "Profile ID").
	NVMLProfile int
	// NVMLComputeProfile is the COMPUTE_INSTANCE_PROFILE_* constant of the one
	// compute instance that spans the whole GPU instance (what `-cgi … -C` and
	// mig-parted create).
	NVMLComputeProfile int
	ComputeSlices      int // of 7
	MemorySlices       int // of 8
	MemoryGB           int // nominal, as in the profile name; NVML reports the exact MiB
	MaxInstances       int
	Placements         []Placement
}

// Model is one GPU model's MIG table.
type Model struct {
	Name     string
	MemoryGB int
	Profiles []Profile // in the order of NVIDIA's table
}

// NVML enumeration values from nvml.h (go-nvml's nvml.GPU_INSTANCE_PROFILE_*
// and nvml.COMPUTE_INSTANCE_PROFILE_*), copied as plain ints to keep this
// package free of cgo.
const (
	giProfile1Slice     = 0 // GPU_INSTANCE_PROFILE_1_SLICE
	giProfile2Slice     = 1 // GPU_INSTANCE_PROFILE_2_SLICE
	giProfile3Slice     = 2 // GPU_INSTANCE_PROFILE_3_SLICE
	giProfile4Slice     = 3 // GPU_INSTANCE_PROFILE_4_SLICE
	giProfile7Slice     = 4 // GPU_INSTANCE_PROFILE_7_SLICE
	giProfile1SliceRev1 = 7 // GPU_INSTANCE_PROFILE_1_SLICE_REV1: 1g with media extensions (+me)
	giProfile1SliceRev2 = 9 // GPU_INSTANCE_PROFILE_1_SLICE_REV2: 1g with two memory slices

	ciProfile1Slice = 0 // COMPUTE_INSTANCE_PROFILE_1_SLICE
	ciProfile2Slice = 1 // COMPUTE_INSTANCE_PROFILE_2_SLICE
	ciProfile3Slice = 2 // COMPUTE_INSTANCE_PROFILE_3_SLICE
	ciProfile4Slice = 3 // COMPUTE_INSTANCE_PROFILE_4_SLICE
	ciProfile7Slice = 4 // COMPUTE_INSTANCE_PROFILE_7_SLICE
)

// Placements from `nvidia-smi mig -lgipp` as printed in NVIDIA's MIG user
// guide (r580, "Getting Started with MIG" → "List GPU Instance Profiles",
// A100-SXM4-40GB) and drawn in its Figure 8 "Profile Placements on A100":
//
//	Profile ID 19 (1g, 1 memory slice)  Placements: {0,1,2,3,4,5,6}:1
//	Profile ID 20 (1g+me)               Placements: {0,1,2,3,4,5,6}:1
//	Profile ID 15 (1g, 2 memory slices) Placements: {0,2,4,6}:2
//	Profile ID 14 (2g)                  Placements: {0,2,4}:2
//	Profile ID  9 (3g)                  Placements: {0,4}:4
//	Profile ID  5 (4g)                  Placement : {0}:4
//	Profile ID  0 (7g)                  Placement : {0}:8
//
// Hopper (GH100) uses the same 7 compute / 8 memory slice geometry: the
// guide's H100 and H200 tables give the same memory and SM fractions row for
// row, and NVIDIA's published -lgipp output for H100 prints the identical
// list. go-nvml's mock servers are not a source: their H100/H200 tables put
// 1g.20gb on single slots and 3g on three slots, which real hardware rejects.
var (
	place1  = []Placement{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}
	place1w = []Placement{{0, 2}, {2, 2}, {4, 2}, {6, 2}}
	place2  = []Placement{{0, 2}, {2, 2}, {4, 2}}
	place3  = []Placement{{0, 4}, {4, 4}}
	place4  = []Placement{{0, 4}}
	place7  = []Placement{{0, 8}}
)

// geometry builds one model's table from the seven profile names of NVIDIA's
// table, in the guide's row order (1g, 1g+me, 1g wide, 2g, 3g, 4g, 7g).
func geometry(name string, memGB int, n [7]string, gb [7]int) Model {
	row := func(i, gi, ci, compute, mem, max int, pl []Placement) Profile {
		return Profile{
			Name: n[i], NVMLProfile: gi, NVMLComputeProfile: ci,
			ComputeSlices: compute, MemorySlices: mem, MemoryGB: gb[i],
			MaxInstances: max, Placements: pl,
		}
	}
	return Model{Name: name, MemoryGB: memGB, Profiles: []Profile{
		row(0, giProfile1Slice, ciProfile1Slice, 1, 1, 7, place1),
		row(1, giProfile1SliceRev1, ciProfile1Slice, 1, 1, 1, place1),
		row(2, giProfile1SliceRev2, ciProfile1Slice, 1, 2, 4, place1w),
		row(3, giProfile2Slice, ciProfile2Slice, 2, 2, 3, place2),
		row(4, giProfile3Slice, ciProfile3Slice, 3, 4, 2, place3),
		row(5, giProfile4Slice, ciProfile4Slice, 4, 4, 1, place4),
		row(6, giProfile7Slice, ciProfile7Slice, 7, 8, 1, place7),
	}}
}

// tables returns the four models. Profile names, fractions and instance
// counts come from NVIDIA's MIG user guide, r580, "Supported MIG Profiles"
// (docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html):
//   - Table 6 "GPU Instance Profiles on A100" (A100-SXM4-40GB); the note above
//     it renames them for A100-SXM4-80GB (1g.10gb, 1g.10gb+me, 1g.20gb,
//     2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb). Table 6 prints 1g.10gb's memory
//     fraction as 1/8; its -lgipp listing (profile 15 at {0,2,4,6}:2) and its
//     name (10 GB of 40 GB) show two slices, which is what we use.
//   - Table 7 "GPU Instance Profiles on H100" (H100 80GB, PCIe and SXM5).
//   - Table 8 "GPU Instance Profiles on H200" (H200 141GB).
func tables() []Model {
	// The 80 GB A100 and the H100 name and size their profiles alike.
	names80 := [7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
	memory80 := [7]int{10, 10, 20, 20, 40, 40, 80}
	return []Model{
		geometry(A100SXM4_40GB, 40,
			[7]string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
			[7]int{5, 5, 10, 10, 20, 20, 40}),
		geometry(A100SXM4_80GB, 80, names80, memory80),
		geometry(H100SXM5_80GB, 80, names80, memory80),
		geometry(H200SXM5_141GB, 141,
			[7]string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
			[7]int{18, 18, 35, 35, 71, 71, 141}),
	}
}

// table is built once; lookups hand out copies so no caller can change it.
var table = tables()

// Models lists the model keys in a stable order.
func Models() []string {
	out := make([]string, len(table))
	for i, m := range table {
		out[i] = m.Name
	}
	return out
}

// LookupModel returns a copy of a model's table.
func LookupModel(name string) (Model, bool) {
	for _, m := range table {
		if m.Name == name {
			c := m
			c.Profiles = make([]Profile, len(m.Profiles))
			for i, p := range m.Profiles {
				c.Profiles[i] = p.clone()
			}
			return c, true
		}
	}
	return Model{}, false
}

// Lookup returns one profile of one model.
func Lookup(model, profile string) (Profile, bool) {
	for _, m := range table {
		if m.Name != model {
			continue
		}
		for _, p := range m.Profiles {
			if p.Name == profile {
				return p.clone(), true
			}
		}
	}
	return Profile{}, false
}

// LookupAnyModel is Lookup for a demand that names a profile but no model:
// the first model in the table offering it. Profiles of one name have the
// same slices on every model that offers them (3g.40gb is 3 compute and 4
// memory slices on both A100-SXM4-80GB and H100-SXM5-80GB).
func LookupAnyModel(model, profile string) (Profile, bool) {
	if model != "" {
		return Lookup(model, profile)
	}
	if models := ModelsWithProfile(profile); len(models) > 0 {
		return Lookup(models[0], profile)
	}
	return Profile{}, false
}

// ModelsWithProfile lists the models that offer a profile name (3g.40gb
// exists on both A100-SXM4-80GB and H100-SXM5-80GB).
func ModelsWithProfile(profile string) []string {
	var out []string
	for _, m := range table {
		for _, p := range m.Profiles {
			if p.Name == profile {
				out = append(out, m.Name)
				break
			}
		}
	}
	return out
}

func (p Profile) clone() Profile {
	p.Placements = slices.Clone(p.Placements)
	return p
}

// ProfileIndex returns the position of a profile in the model's table.
func (m Model) ProfileIndex(profile string) (int, bool) {
	i := slices.IndexFunc(m.Profiles, func(p Profile) bool { return p.Name == profile })
	return i, i >= 0
}

// MaskAt is the occupancy mask of the profile placed at start, 0 when
// NVIDIA allows no placement there.
func (p Profile) MaskAt(start int) uint8 {
	for _, pl := range p.Placements {
		if pl.Start == start {
			return pl.Mask()
		}
	}
	return 0
}

// ValidPlacement reports whether the profile may start at slot start.
func (p Profile) ValidPlacement(start int) bool {
	for _, pl := range p.Placements {
		if pl.Start == start {
			return true
		}
	}
	return false
}

// SKU names the price-book SKU of a GPU model and an optional MIG
// profile: "<model>" or "<model>/<profile>". ParseSKU is its inverse.
func SKU(model, profile string) string {
	if profile == "" {
		return model
	}
	return model + "/" + profile
}

// ParseSKU splits a price-book SKU, "<model>" or "<model>/<profile>"
// (e.g. "H100-SXM5-80GB/3g.40gb"), at its first slash. It does not check
// that the parts exist; Lookup and GPUEquivalent do.
func ParseSKU(sku string) (model, profile string) {
	model, profile, _ = strings.Cut(sku, "/")
	return model, profile
}

// GPUEquivalent is the weight of a SKU in GPU-equivalents, as a fraction: a
// whole GPU is 1/1 and a MIG instance is its compute slices / 7, reduced
// (so 7g is 1/1). Compute slices, not memory, because the 1g profiles with
// one or two memory slices hold the same SMs and 3g and 4g hold the same
// memory. A whole-GPU SKU of a model outside these tables is still one GPU;
// a MIG SKU must name a known model and profile, else ok is false. A
// vGPU SKU ("<model>/vgpu:<type>") weighs its type's share: a MIG-backed
// type its GPU instance profile's, a time-sliced one 1/(max instances).
func GPUEquivalent(sku string) (num, den int, ok bool) {
	model, profile := ParseSKU(sku)
	if model == "" || strings.ContainsAny(model, " \t\n") {
		return 0, 0, false
	}
	if profile == "" {
		if strings.HasSuffix(sku, "/") {
			return 0, 0, false
		}
		return 1, 1, true
	}
	if strings.HasPrefix(profile, VGPUProfilePrefix) {
		return vgpuWeight(model, profile)
	}
	p, found := Lookup(model, profile)
	if !found {
		return 0, 0, false
	}
	num, den = p.ComputeSlices, ComputeSlices
	g := gcd(num, den)
	return num / g, den / g, true
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ModelFromDeviceName maps an NVML device name (nvmlDeviceGetName) onto
// the model key samples, price books and plans use. The SXM products of
// the tables map to their keys (known true); PCIe and NVL boards have
// other power and memory and are other SKUs. Any other name becomes a
// sanitized form of itself, known false ("NVIDIA A100-PCIE-40GB" →
// "A100-PCIE-40GB", "Tesla T4" → "Tesla-T4"): letters, digits, '.' and '-'
// only, never '/' (the SKU separator), never empty. The canonical key
// itself maps to itself.
func ModelFromDeviceName(name string) (model string, known bool) {
	n := strings.TrimSpace(name)
	if len(n) >= 7 && strings.EqualFold(n[:7], "NVIDIA ") {
		n = strings.TrimSpace(n[7:])
	}
	switch strings.ToUpper(n) {
	case A100SXM4_40GB, "A100 SXM4 40GB":
		return A100SXM4_40GB, true
	case A100SXM4_80GB, "A100 SXM4 80GB":
		return A100SXM4_80GB, true
	case H100SXM5_80GB, "H100 80GB HBM3", "H100 SXM5 80GB":
		return H100SXM5_80GB, true
	case H200SXM5_141GB, "H200", "H200 141GB HBM3E", "H200 SXM5 141GB":
		return H200SXM5_141GB, true
	}
	return sanitizeModel(n), false
}

// CanonicalModel is ModelFromDeviceName for a model as people write it in
// quota rules, Pod annotations and admission requests: besides the key in
// any case and NVML's device names, it reads the form GPU feature discovery
// puts in the node label nvidia.com/gpu.product, and underscores, where
// dashes or underscores stand for spaces ("NVIDIA-H100-80GB-HBM3",
// "h100_sxm5_80gb"). A name outside the catalogue comes back sanitized
// as the collector records it ("NVIDIA-H100-PCIe" → "H100-PCIe"), known
// false.
func CanonicalModel(name string) (model string, known bool) {
	if m, ok := ModelFromDeviceName(name); ok {
		return m, true
	}
	// Sanitizing turns spaces back into dashes, so only the "NVIDIA "
	// prefix and the aliases differ from reading the name as it is.
	return ModelFromDeviceName(strings.NewReplacer("-", " ", "_", " ").Replace(name))
}

func sanitizeModel(n string) string {
	var b strings.Builder
	dash := false
	for _, r := range n {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	s := strings.Trim(b.String(), "-.")
	if s == "" {
		return "unknown"
	}
	return s
}

// ProfileNames lists the model's profile names in table order.
func (m Model) ProfileNames() []string {
	names := make([]string, len(m.Profiles))
	for i, p := range m.Profiles {
		names[i] = p.Name
	}
	return names
}

// CheckSKU reports a SKU that names a known GPU model or MIG profile in a
// form other than the canonical one ("h100-sxm5-80gb/3G.40GB", a profile
// the model does not have): usage always carries the canonical SKU, so
// such a price-book entry would never match and its weight would be
// guessed. SKUs of models the table does not know are not judged.
func CheckSKU(sku string) error {
	model, profile := ParseSKU(sku)
	m, known := LookupModel(model)
	if !known {
		for _, name := range Models() {
			if strings.EqualFold(strings.TrimSpace(model), name) {
				return fmt.Errorf("write the model as %q, the name usage carries", SKU(name, strings.TrimSpace(profile)))
			}
		}
		return nil
	}
	if profile == "" {
		return nil
	}
	if name, isVGPU := strings.CutPrefix(profile, VGPUProfilePrefix); isVGPU {
		if _, ok := LookupVGPU(model, name); !ok {
			return fmt.Errorf("%s has no vGPU type %q (want <board>-<GB>C such as %s-4C, or <board>-<slices>-<GB>C for a MIG-backed type)", model, name, vgpuBoards[model])
		}
		return nil
	}
	if _, ok := m.ProfileIndex(profile); ok {
		return nil
	}
	for _, p := range m.Profiles {
		if strings.EqualFold(strings.TrimSpace(profile), p.Name) {
			return fmt.Errorf("write the profile as %q, the name usage carries", SKU(model, p.Name))
		}
	}
	return fmt.Errorf("%s has no MIG profile %q (it has %s)", model, profile, strings.Join(m.ProfileNames(), ", "))
}
