package sim

import (
	"cmp"
	"slices"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// vgpuRows books one step of a vGPU host's GPU or a passthrough GPU: a
// row per present vGPU instance under its VM's tenant and workload, and
// the idle rest. SM-active time (for the energy weights) is the
// instance's measured use, capped at its GPU time.
func vgpuRows(g *GPU, stepUs uint64) []ledgerRow {
	if g.vmode == Passthrough {
		if g.passVM == nil {
			return []ledgerRow{{gpu: float64(stepUs)}}
		}
		return []ledgerRow{{tenant: g.passVM.bookedTenant(), workload: g.passVM.Workload(), gpu: float64(stepUs)}}
	}
	insts := slices.Clone(g.vstep)
	slices.SortFunc(insts, func(a, b vgpuPresence) int { return cmp.Compare(a.v.uuid, b.v.uuid) })
	measured := !g.vcfg.NoUtilization
	shares, idle := vgpuShares(g.mig, g.vcfg.Scheduler, measured, stepUs, insts)
	rows := make([]ledgerRow, 0, len(insts)+1)
	for i, p := range insts {
		r := ledgerRow{tenant: p.v.vm.bookedTenant(), workload: p.v.vm.Workload(), gpu: float64(shares[i])}
		if measured {
			base := p.micros()
			if g.mig {
				base = shares[i]
			}
			r.sm = float64(min(collectors.MulDiv(base, uint64(p.util)*10_000, collectors.PPMScale), shares[i]))
		}
		rows = append(rows, r)
	}
	if idle > 0 || len(rows) == 0 {
		rows = append(rows, ledgerRow{gpu: float64(idle)})
	}
	return rows
}

// vgpuShares splits one step of stepUs µs of a vGPU host's GPU over its
// instances (in UUID order, each present from..to within the step) and
// returns each instance's µs and the idle rest; they add up to stepUs.
// The rules, in integers with collectors.Split (largest remainder, ties to
// the earlier part), p_i being instance i's µs in the step:
//
//   - MIG-backed (the GPU in MIG mode): weights p_i × milli-slices of its
//     GPU instance, and 7000 × stepUs − their sum for idle.
//   - Fixed share: with L the lcm of the instances' max instances,
//     weights p_i × L/max_i, and stepUs × L − their sum (0 if negative)
//     for idle: each holds 1/max of the GPU while it exists.
//   - Equal share: the step is cut at every creation and destruction; a
//     piece is split equally over the instances present in it, or idle.
//   - Best effort, measured: instance i used busy_i = p_i × util_i %;
//     when the sum is above stepUs it is split by busy, else each gets
//     busy_i and the rest is idle.
//   - Best effort, no utilization: the time at least one instance
//     existed is split by p_i × framebuffer used in KiB (by p_i when
//     none is known); the rest is idle.
func vgpuShares(mig bool, policy collectors.VGPUScheduler, measured bool, stepUs uint64, insts []vgpuPresence) (shares []uint64, idle uint64) {
	n := len(insts)
	weights := make([]uint64, n, n+1)
	var sum uint64
	split := func(idleWeight uint64) ([]uint64, uint64) {
		parts := collectors.Split(nil, stepUs, append(weights, idleWeight))
		return parts[:n], parts[n]
	}
	switch {
	case mig:
		for i, p := range insts {
			weights[i] = p.micros() * uint64(p.v.gi.profile.ComputeSlices) * 1000
			sum += weights[i]
		}
		whole := stepUs * gpucatalog.ComputeSlices * 1000
		return split(whole - min(sum, whole))
	case policy == collectors.SchedulerFixedShare:
		l := uint64(1)
		for _, p := range insts {
			l = lcm(l, uint64(max(p.v.typ.MaxInstances, 1)))
		}
		for i, p := range insts {
			weights[i] = p.micros() * (l / uint64(max(p.v.typ.MaxInstances, 1)))
			sum += weights[i]
		}
		whole := stepUs * l
		return split(whole - min(sum, whole))
	case policy == collectors.SchedulerEqualShare:
		return equalShares(stepUs, insts)
	case !measured:
		occupied := unionMicros(insts)
		for i, p := range insts {
			weights[i] = p.micros() * (p.v.fbUsed >> 10)
			sum += weights[i]
		}
		if sum == 0 {
			for i, p := range insts {
				weights[i] = p.micros()
			}
		}
		return collectors.Split(nil, occupied, weights), stepUs - occupied
	}
	for i, p := range insts {
		weights[i] = collectors.MulDiv(p.micros(), uint64(p.util)*10_000, collectors.PPMScale)
		sum += weights[i]
	}
	if sum > stepUs {
		return collectors.Split(nil, stepUs, weights), 0
	}
	return weights, stepUs - sum
}

// equalShares cuts the step at every instance's bounds and splits each
// piece equally over the instances present throughout it.
func equalShares(stepUs uint64, insts []vgpuPresence) ([]uint64, uint64) {
	shares := make([]uint64, len(insts))
	if len(insts) == 0 {
		return shares, stepUs
	}
	// What no instance covers is idle.
	cuts := make([]uint64, 0, 2*len(insts))
	for _, p := range insts {
		cuts = append(cuts, p.from, p.to)
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var idx []int
	var booked uint64
	for k := 0; k+1 < len(cuts); k++ {
		from, to := cuts[k], cuts[k+1]
		idx = idx[:0]
		for i, p := range insts {
			if p.from <= from && p.to >= to {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			continue
		}
		ones := make([]uint64, len(idx))
		for j := range ones {
			ones[j] = 1
		}
		parts := collectors.Split(nil, to-from, ones)
		for j, i := range idx {
			shares[i] += parts[j]
			booked += parts[j]
		}
	}
	return shares, stepUs - booked
}

// unionMicros is the time at least one instance existed.
func unionMicros(insts []vgpuPresence) uint64 {
	spans := make([][2]uint64, len(insts))
	for i, p := range insts {
		spans[i] = [2]uint64{p.from, p.to}
	}
	slices.SortFunc(spans, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	var total, end uint64
	for _, s := range spans {
		if s[1] <= end {
			continue
		}
		total += s[1] - max(s[0], end)
		end = s[1]
	}
	return total
}

func lcm(a, b uint64) uint64 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	if x == 0 {
		return max(a, b)
	}
	return a / x * b
}
