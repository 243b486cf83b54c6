package partition

import (
	"cmp"
	"slices"
	"strings"
)

// canonical returns the fleet and demand in one fixed order, so that the
// plan depends on what they say, not on how they are listed: GPUs by UUID
// (unique after Validate), each GPU's instances by known start, then
// profile, tenant, busy and UUID (unknown starts are inferred in that
// order), tenants by name and each tenant's requests by model and profile.
// order[i] is the input position of the canonical fleet's GPU i.
func canonical(f Fleet, d Demand) (Fleet, Demand, []int) {
	order := make([]int, len(f.GPUs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(f.GPUs[a].UUID, f.GPUs[b].UUID) })
	cf := Fleet{GPUs: make([]GPU, len(f.GPUs))}
	for i, j := range order {
		g := f.GPUs[j]
		g.Instances = slices.Clone(g.Instances)
		slices.SortStableFunc(g.Instances, compareInstances)
		cf.GPUs[i] = g
	}
	cd := Demand{Tenants: slices.Clone(d.Tenants)}
	slices.SortStableFunc(cd.Tenants, func(a, b TenantDemand) int { return strings.Compare(a.Tenant, b.Tenant) })
	for i := range cd.Tenants {
		t := &cd.Tenants[i]
		t.Reserved, t.Pending = sortedRequests(t.Reserved), sortedRequests(t.Pending)
	}
	return cf, cd, order
}

func compareInstances(a, b Instance) int {
	// Known starts first, in slot order; unknown ones after them.
	switch {
	case a.Start != nil && b.Start != nil:
		if c := cmp.Compare(*a.Start, *b.Start); c != 0 {
			return c
		}
	case a.Start != nil:
		return -1
	case b.Start != nil:
		return 1
	}
	busy := func(in Instance) int {
		if in.Busy {
			return 0
		}
		return 1
	}
	return cmp.Or(strings.Compare(a.Profile, b.Profile), strings.Compare(a.Tenant, b.Tenant),
		cmp.Compare(busy(a), busy(b)), strings.Compare(a.UUID, b.UUID))
}

func sortedRequests(rs []Request) []Request {
	out := slices.Clone(rs)
	slices.SortStableFunc(out, func(a, b Request) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), strings.Compare(a.Profile, b.Profile))
	})
	return out
}

// inInputOrder puts a plan of the canonical fleet back in the order of the
// input fleet (order from canonical).
func inInputOrder(p Plan, order []int) Plan {
	gpus := make([]GPUPlan, len(p.GPUs))
	for i, j := range order {
		gpus[j] = p.GPUs[i]
	}
	p.GPUs = gpus
	return p
}
