package partition

import (
	"cmp"
	"slices"

	"github.com/gpumeter/gpumeter/collectors/migprofile"
)

// DeviceSample is what one usage sample of a GPU's newest interval says
// about the fleet: which GPU, which MIG instance (empty for a whole GPU or
// a MIG GPU's unpartitioned slices) and who held it (empty when idle).
type DeviceSample struct {
	Host, GPUUUID, GPUModel string
	MIGUUID, MIGProfile     string
	Tenant                  string
}

// FleetFromSamples builds the fleet from the samples of each GPU's newest
// interval, in any order, duplicates allowed. Samples carry no placements,
// so every instance comes back with an unknown start for the planner to
// infer. An instance any tenant holds is busy: a pod or job has it, so the
// planner must not take it away; of several holders the first by name is
// kept. A MIG GPU with no instances at all reports like a whole GPU and
// comes back MIG-disabled. GPUs of models outside the MIG tables are left
// out; it returns how many.
func FleetFromSamples(samples []DeviceSample) (Fleet, int) {
	rows := slices.Clone(samples)
	slices.SortFunc(rows, func(a, b DeviceSample) int {
		return cmp.Or(cmp.Compare(a.GPUUUID, b.GPUUUID), cmp.Compare(a.MIGUUID, b.MIGUUID), cmp.Compare(a.Tenant, b.Tenant))
	})
	var (
		fleet   Fleet
		skipped int
	)
	for i := 0; i < len(rows); {
		j := i
		for j < len(rows) && rows[j].GPUUUID == rows[i].GPUUUID {
			j++
		}
		group := rows[i:j]
		i = j
		if _, ok := migprofile.LookupModel(group[0].GPUModel); !ok {
			skipped++
			continue
		}
		g := GPU{Host: group[0].Host, UUID: group[0].GPUUUID, Model: group[0].GPUModel, MIGDisabled: true}
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
