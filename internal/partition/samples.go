package partition

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// DeviceSample is what one usage sample of a GPU's newest interval says
// about the fleet: which GPU, which MIG instance (empty for a whole GPU or
// a MIG GPU's unpartitioned slices) and who held it (empty when idle).
type DeviceSample struct {
	Host, GPUUUID, GPUModel string
	MIGUUID, MIGProfile     string
	Tenant                  string
}

// Skipped is a GPU of the samples that the planner does not plan, and why.
type Skipped struct {
	Host   string `yaml:"host" json:"host"`
	UUID   string `yaml:"uuid" json:"uuid"`
	Model  string `yaml:"model" json:"model"`
	Reason string `yaml:"reason" json:"reason"`
}

// FleetFromSamples builds the fleet from the samples of each GPU's newest
// interval, in any order, duplicates allowed. Samples carry no placements,
// so every instance comes back with an unknown start for the planner to
// infer. An instance any tenant holds is busy: a pod or job has it, so the
// planner must not take it away; of several holders the first by name is
// kept. A MIG GPU with no instances at all reports like a whole GPU and
// comes back MIG-disabled, as does a passthrough GPU (its SKU is the
// model's). It leaves out, and lists with the reason, GPUs the planner
// cannot plan: models outside the MIG tables, and GPUs that run vGPU
// instances (time-sliced or MIG-backed; their profile is "vgpu:<type>"),
// whose layout the hypervisor's vGPU manager owns.
func FleetFromSamples(samples []DeviceSample) (Fleet, []Skipped) {
	rows := slices.Clone(samples)
	slices.SortFunc(rows, func(a, b DeviceSample) int {
		return cmp.Or(cmp.Compare(a.GPUUUID, b.GPUUUID), cmp.Compare(a.MIGUUID, b.MIGUUID), cmp.Compare(a.Tenant, b.Tenant))
	})
	var (
		fleet   Fleet
		skipped []Skipped
	)
	for i := 0; i < len(rows); {
		j := i
		for j < len(rows) && rows[j].GPUUUID == rows[i].GPUUUID {
			j++
		}
		group := rows[i:j]
		i = j
		first := group[0]
		model, ok := gpucatalog.LookupModel(first.GPUModel)
		if !ok {
			skipped = append(skipped, Skipped{Host: first.Host, UUID: first.GPUUUID, Model: first.GPUModel,
				Reason: fmt.Sprintf("model %s has no MIG profile table", first.GPUModel)})
			continue
		}
		if types := vgpuTypes(group); len(types) > 0 {
			skipped = append(skipped, Skipped{Host: first.Host, UUID: first.GPUUUID, Model: first.GPUModel,
				Reason: fmt.Sprintf("runs vGPU instances (%s): the hypervisor's vGPU manager owns its layout, not MIG-plannable", strings.Join(types, ", "))})
			continue
		}
		if unknown := unknownProfiles(model, group); len(unknown) > 0 {
			// A profile the table lacks (a newer driver's) would fail the
			// whole plan: this GPU is left as it is instead.
			skipped = append(skipped, Skipped{Host: first.Host, UUID: first.GPUUUID, Model: first.GPUModel,
				Reason: fmt.Sprintf("MIG profile %s is not in %s's profile table", strings.Join(unknown, ", "), first.GPUModel)})
			continue
		}
		g := GPU{Host: first.Host, UUID: first.GPUUUID, Model: first.GPUModel, MIGDisabled: true}
		for _, r := range group {
			if r.MIGUUID == "" {
				continue // the whole GPU, or a MIG GPU's unpartitioned slices
			}
			g.MIGDisabled = false
			n := len(g.Instances)
			if n == 0 || g.Instances[n-1].UUID != r.MIGUUID {
				g.Instances = append(g.Instances, Instance{Profile: r.MIGProfile, UUID: r.MIGUUID})
				n++
			}
			in := &g.Instances[n-1]
			if r.Tenant != "" {
				if in.Tenant == "" {
					in.Tenant = r.Tenant
				}
				in.Busy = true
			}
		}
		fleet.GPUs = append(fleet.GPUs, g)
	}
	return fleet, skipped
}

// unknownProfiles lists the distinct MIG profiles of one GPU's samples
// that model's table lacks, sorted.
func unknownProfiles(model gpucatalog.Model, group []DeviceSample) []string {
	var out []string
	for _, r := range group {
		if r.MIGUUID == "" || slices.Contains(out, r.MIGProfile) {
			continue
		}
		if _, ok := model.ProfileIndex(r.MIGProfile); !ok {
			out = append(out, r.MIGProfile)
		}
	}
	slices.Sort(out)
	return out
}

// vgpuTypes lists the distinct vGPU profiles ("vgpu:A100-4C") of one GPU's
// samples, sorted.
func vgpuTypes(group []DeviceSample) []string {
	var out []string
	for _, r := range group {
		if gpucatalog.ProfileKind(r.MIGProfile) == gpucatalog.KindVGPU && !slices.Contains(out, r.MIGProfile) {
			out = append(out, r.MIGProfile)
		}
	}
	slices.Sort(out)
	return out
}
