package gpucatalog

import (
	"strconv"
	"strings"
)

// VGPUProfilePrefix marks a vGPU type where a SKU holds a profile:
// "A100-SXM4-40GB/vgpu:A100-4C" (collectors.VGPUProfilePrefix).
const VGPUProfilePrefix = "vgpu:"

// VGPUType is one NVIDIA vGPU type of a GPU model.
type VGPUType struct {
	Name          string // e.g. "A100-4C", "A100-3-20C"
	Model         string
	FramebufferGB int
	// MaxInstances of a time-sliced type is how many fit on the GPU: the
	// model's memory over the type's framebuffer. A fixed-share instance
	// holds 1/MaxInstances of the GPU.
	MaxInstances int
	// MIGProfile is the GPU instance profile a MIG-backed type runs on,
	// empty for a time-sliced type; its weight is that profile's.
	MIGProfile string
}

// vgpuBoards are the board prefixes of NVIDIA's vGPU type names per
// model (NVIDIA Virtual GPU Software User Guide, "Virtual GPU Types for
// Supported GPUs": A100 40GB SXM4 "A100-…", A100 80GB SXM4 "A100D-…",
// H100 SXM5 80GB "H100XM-…", H200 SXM5 "H200X-…").
var vgpuBoards = map[string]string{
	A100SXM4_40GB:  "A100",
	A100SXM4_80GB:  "A100D",
	H100SXM5_80GB:  "H100XM",
	H200SXM5_141GB: "H200X",
}

// LookupVGPU reads a vGPU type name of a model: "<board>-<GB><series>"
// for a time-sliced type (series C, Q, B or A: compute, workstation,
// business, application) and "<board>-<slices>-<GB>C" for a MIG-backed
// one, which must name one of the model's GPU instance profiles
// ("A100-3-20C" runs on 3g.20gb).
func LookupVGPU(model, name string) (VGPUType, bool) {
	board, ok := vgpuBoards[model]
	m, known := LookupModel(model)
	if !ok || !known {
		return VGPUType{}, false
	}
	rest, ok := strings.CutPrefix(name, board+"-")
	if !ok || len(rest) < 2 {
		return VGPUType{}, false
	}
	series := rest[len(rest)-1]
	body := rest[:len(rest)-1]
	if slicesText, gbText, migBacked := strings.Cut(body, "-"); migBacked {
		slices, err1 := strconv.Atoi(slicesText)
		gb, err2 := strconv.Atoi(gbText)
		if err1 != nil || err2 != nil || series != 'C' || strconv.Itoa(slices) != slicesText || strconv.Itoa(gb) != gbText {
			return VGPUType{}, false
		}
		profile := strconv.Itoa(slices) + "g." + strconv.Itoa(gb) + "gb"
		p, ok := Lookup(model, profile)
		if !ok || p.ComputeSlices != slices {
			return VGPUType{}, false
		}
		return VGPUType{Name: name, Model: model, FramebufferGB: gb, MaxInstances: p.MaxInstances, MIGProfile: profile}, true
	}
	gb, err := strconv.Atoi(body)
	if err != nil || gb < 1 || gb > m.MemoryGB || strconv.Itoa(gb) != body || !strings.ContainsRune("CQBA", rune(series)) {
		return VGPUType{}, false
	}
	return VGPUType{Name: name, Model: model, FramebufferGB: gb, MaxInstances: m.MemoryGB / gb}, true
}

// vgpuWeight is a vGPU profile's GPU-equivalent weight: a MIG-backed
// type's GPU instance's slices of 7, a time-sliced type's 1/MaxInstances
// (the share fixed-share scheduling gives it).
func vgpuWeight(model, profile string) (num, den int, ok bool) {
	name, isVGPU := strings.CutPrefix(profile, VGPUProfilePrefix)
	if !isVGPU {
		return 0, 0, false
	}
	t, ok := LookupVGPU(model, name)
	if !ok {
		return 0, 0, false
	}
	if t.MIGProfile != "" {
		p, _ := Lookup(model, t.MIGProfile)
		num, den = p.ComputeSlices, ComputeSlices
	} else {
		num, den = 1, t.MaxInstances
	}
	g := gcd(num, den)
	return num / g, den / g, true
}
