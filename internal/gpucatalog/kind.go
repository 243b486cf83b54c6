package gpucatalog

import (
	"fmt"
	"strings"
)

// Kind is what a SKU sells: a whole GPU, a MIG instance or a vGPU. Every
// consumer that treats the three differently asks here rather than reading
// the SKU's spelling itself.
type Kind int

const (
	KindGPU  Kind = iota // "<model>"
	KindMIG              // "<model>/<profile>", e.g. "H100-SXM5-80GB/3g.40gb"
	KindVGPU             // "<model>/vgpu:<type>", e.g. "A100-SXM4-40GB/vgpu:A100-4C"
)

func (k Kind) String() string {
	switch k {
	case KindMIG:
		return "mig"
	case KindVGPU:
		return "vgpu"
	}
	return "gpu"
}

// ProfileKind is the kind of a SKU's profile part: none is a whole GPU, a
// "vgpu:" type a vGPU, anything else a MIG profile.
func ProfileKind(profile string) Kind {
	switch {
	case profile == "":
		return KindGPU
	case strings.HasPrefix(profile, VGPUProfilePrefix):
		return KindVGPU
	}
	return KindMIG
}

// SKUKind is the kind of a SKU.
func SKUKind(sku string) Kind {
	_, profile := ParseSKU(sku)
	return ProfileKind(profile)
}

// VGPUProfile is the profile part of a vGPU type's SKU ("vgpu:A100-4C").
func VGPUProfile(typeName string) string { return VGPUProfilePrefix + typeName }

// MIGActivityMeasured reports whether a model's MIG instances report SM
// activity of their own (GPM, from Hopper on: H100, H200). On earlier
// GPUs a MIG instance has no activity counter, so energy is split over
// instances by compute slices instead.
func MIGActivityMeasured(model string) bool {
	return strings.HasPrefix(model, "H100") || strings.HasPrefix(model, "H200")
}

// MarshalText writes the kind as its name ("gpu", "mig", "vgpu").
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	for _, c := range []Kind{KindGPU, KindMIG, KindVGPU} {
		if c.String() == string(b) {
			*k = c
			return nil
		}
	}
	return fmt.Errorf("unknown SKU kind %q (want gpu, mig or vgpu)", b)
}
