package attribution

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

// Unused says where the time a best-effort vGPU GPU's instances did not
// use goes.
type Unused uint8

const (
	// UnusedIdle books it as idle capacity (the default): an instance
	// pays for what it ran.
	UnusedIdle Unused = iota
	// UnusedToHolders shares it over the instances present, by presence,
	// as idle time of a time-sliced bare-metal GPU goes to its holders.
	UnusedToHolders
)

// Options are the choices the apportioning rules leave to the operator.
type Options struct {
	BestEffortUnused Unused
	// Granted bills a GPU whose sharing layer granted shares (HAMi's
	// cores %, GPUReading.Grants) by the grants instead of measured use:
	// each holder its share × the interval, the rest idle (granted.go).
	Granted bool
}

// Apportion is the package's Apportion under these options.
func (o Options) Apportion(dst []collectors.Sample, host string, start, end time.Time, g *collectors.GPUReading) []collectors.Sample {
	if g == nil || g.Err != nil || !end.After(start) {
		return dst
	}
	if g.CheckVGPU() != nil {
		return dst // the source fails such a GPU; never guess its split
	}
	a := apportioner{opts: o}
	a.run(host, start.UTC(), end.UTC(), g)
	return a.emit(dst, host, start.UTC(), end.UTC(), g)
}

// vgpuShare is one vGPU instance's part of the interval.
type vgpuShare struct {
	inst     *collectors.VGPUInstance
	presence uint64 // µs it existed
	gpu      uint64 // µs of GPU time it is booked
}

// apportionVGPU makes the rows of a vGPU host's GPU: each instance's GPU
// time by the scheduler's rule (MIG-backed instances by their GPU
// instance's slices), the rest idle. Host processes, which a vGPU host
// does not normally run, keep their memory and get no GPU time.
func (a *apportioner) apportionVGPU(g *collectors.GPUReading, start, end time.Time) {
	insts := make([]vgpuShare, len(g.VGPUs))
	for i := range g.VGPUs {
		v := &g.VGPUs[i]
		insts[i] = vgpuShare{inst: v, presence: presenceSpan(v.ActiveFrom, v.ActiveTo, start, end)}
	}
	slices.SortFunc(insts, func(x, y vgpuShare) int { return cmp.Compare(x.inst.UUID, y.inst.UUID) })
	var idle uint64
	switch {
	case g.MIG:
		idle = a.vgpuBySlices(insts, g.TotalMilliSlices)
	case g.Scheduler == collectors.SchedulerFixedShare:
		idle = a.vgpuFixedShare(insts)
	case g.Scheduler == collectors.SchedulerEqualShare:
		idle = a.vgpuEqualShare(insts, start, end)
	default:
		idle = a.vgpuBestEffort(insts, start, end)
	}
	for _, s := range insts {
		v := s.inst
		sl := &slot{device: v.UUID, vgpu: v}
		claims := claimOwners(v.Claims)
		if len(claims) == 0 {
			claims = []collectors.Owner{vmOwner(v)}
		}
		parts := collectors.SplitEqual(nil, s.gpu, len(claims))
		for i, o := range claims {
			r := a.rowFor(sl, o)
			r.m.GPUMicroseconds += parts[i]
			if i == 0 {
				r.m.MemMiBSeconds += collectors.MulDiv(v.FBUsedBytes, s.presence, 1<<20*1_000_000)
				r.m.MemPeakBytes = max(r.m.MemPeakBytes, v.FBUsedBytes)
			}
			if v.SMActive.OK {
				// A MIG-backed instance's activity is of its GPU instance,
				// a time-sliced one's of the whole GPU while it existed.
				base := s.presence
				if v.MIGBacked() {
					base = s.gpu
				}
				active := collectors.MulDiv(base, uint64(v.SMActive.PPM), collectors.PPMScale)
				r.m.SMActiveMicroseconds += min(collectors.MulDiv(active, parts[i], max(s.gpu, 1)), r.m.GPUMicroseconds)
			}
		}
	}
	rest := &slot{device: g.GPU.UUID, restSlot: true}
	for i := range g.Processes {
		p := &g.Processes[i]
		r := a.rowFor(rest, processOwner(p))
		r.m.MemMiBSeconds += collectors.MulDiv(p.MemBytes, presenceMicros(p, start, end), 1<<20*1_000_000)
		r.m.MemPeakBytes = max(r.m.MemPeakBytes, p.MemPeakBytes)
	}
	if idle > 0 {
		r := a.rowFor(rest, collectors.Owner{})
		r.idle = true
		r.m.GPUMicroseconds += idle
	}
}

// vgpuFixedShare: each instance holds 1/(max instances of its type) of
// the GPU while it exists, used or not; the rest is idle. Shares that add
// up to more than the GPU (instances that replaced one another, a bad
// reading) are scaled down pro rata and nothing is idle.
func (a *apportioner) vgpuFixedShare(insts []vgpuShare) (idle uint64) {
	l := uint64(1)
	for _, s := range insts {
		l = lcm(l, uint64(max(s.inst.MaxInstances, 1)))
	}
	weights := make([]uint64, 0, len(insts)+1)
	var used uint64
	for _, s := range insts {
		w := satMul(s.presence, l/uint64(max(s.inst.MaxInstances, 1)))
		weights = append(weights, w)
		used += w
	}
	whole := satMul(a.interval, l)
	weights = append(weights, whole-min(used, whole))
	return a.assign(insts, weights)
}

// vgpuBySlices: a MIG-backed instance holds its GPU instance's compute
// slices of the GPU while it exists; unused slices are idle.
func (a *apportioner) vgpuBySlices(insts []vgpuShare, totalMilli uint64) (idle uint64) {
	var used uint64
	weights := make([]uint64, 0, len(insts)+1)
	for _, s := range insts {
		w := satMul(s.presence, s.inst.MilliSlices)
		weights = append(weights, w)
		used += w
	}
	if totalMilli == 0 {
		totalMilli = 7000
	}
	whole := satMul(a.interval, totalMilli)
	weights = append(weights, whole-min(used, whole))
	return a.assign(insts, weights)
}

// assign splits the interval by weights, one per instance and the idle
// rest last, and returns the idle part.
func (a *apportioner) assign(insts []vgpuShare, weights []uint64) uint64 {
	parts := collectors.Split(nil, a.interval, weights)
	for i := range insts {
		insts[i].gpu = parts[i]
	}
	return parts[len(insts)]
}

// vgpuEqualShare: at every moment the instances present share the GPU
// equally; moments without one are idle. The interval is cut where an
// instance starts or ends and each piece split equally, in UUID order.
func (a *apportioner) vgpuEqualShare(insts []vgpuShare, start, end time.Time) (idle uint64) {
	cuts := []time.Time{start, end}
	for _, s := range insts {
		from, to := spanOf(s.inst.ActiveFrom, s.inst.ActiveTo, start, end)
		cuts = append(cuts, from, to)
	}
	slices.SortFunc(cuts, func(x, y time.Time) int { return x.Compare(y) })
	cuts = slices.CompactFunc(cuts, func(x, y time.Time) bool { return x.Equal(y) })
	active := make([]int, 0, len(insts))
	for k := 0; k+1 < len(cuts); k++ {
		from, to := cuts[k], cuts[k+1]
		length := uint64(to.Sub(from) / time.Microsecond)
		active = active[:0]
		for i, s := range insts {
			f, t := spanOf(s.inst.ActiveFrom, s.inst.ActiveTo, start, end)
			if !f.After(from) && !t.Before(to) && t.After(f) {
				active = append(active, i)
			}
		}
		if len(active) == 0 {
			continue // nobody there: idle
		}
		parts := collectors.SplitEqual(nil, length, len(active))
		for j, i := range active {
			insts[i].gpu += parts[j]
		}
	}
	// Idle is what the pieces did not book: pieces without an instance,
	// and any rounding of bounds finer than a microsecond.
	var booked uint64
	for _, s := range insts {
		booked += s.gpu
	}
	return a.interval - min(booked, a.interval)
}

// vgpuBestEffort: an instance may use the whole GPU, so it is booked the
// time it was measured busy (its SM utilization over its presence); what
// nobody used is idle, or shared over the instances present by presence
// (Options.BestEffortUnused). Measured use above the interval is scaled
// down pro rata. Without any utilization the instances' presence is
// split by framebuffer held × presence (by presence when none is known).
func (a *apportioner) vgpuBestEffort(insts []vgpuShare, start, end time.Time) (idle uint64) {
	measured := false
	busy := make([]uint64, len(insts))
	var sum uint64
	for i, s := range insts {
		if s.inst.SMActive.OK {
			measured = true
			busy[i] = collectors.MulDiv(s.presence, uint64(s.inst.SMActive.PPM), collectors.PPMScale)
			sum += busy[i]
		}
	}
	if !measured {
		occupied := a.vgpuUnion(insts, start, end)
		weights := make([]uint64, len(insts))
		var wsum uint64
		for i, s := range insts {
			weights[i] = satMul(s.presence, s.inst.FBUsedBytes>>10)
			wsum += weights[i]
		}
		if wsum == 0 {
			for i, s := range insts {
				weights[i] = s.presence
			}
		}
		parts := collectors.Split(nil, occupied, weights)
		for i := range insts {
			insts[i].gpu = parts[i]
		}
		return a.interval - occupied
	}
	if sum > a.interval {
		parts := collectors.Split(nil, a.interval, busy)
		for i := range insts {
			insts[i].gpu = parts[i]
		}
		return 0
	}
	for i := range insts {
		insts[i].gpu = busy[i]
	}
	unused := a.interval - sum
	if a.opts.BestEffortUnused != UnusedToHolders || unused == 0 {
		return unused
	}
	pres := make([]uint64, len(insts))
	var psum uint64
	for i, s := range insts {
		pres[i] = s.presence
		psum += s.presence
	}
	if psum == 0 {
		return unused
	}
	parts := collectors.Split(nil, unused, pres)
	for i := range insts {
		insts[i].gpu += parts[i]
	}
	return 0
}

// vgpuUnion is the time at least one instance existed.
func (a *apportioner) vgpuUnion(insts []vgpuShare, start, end time.Time) uint64 {
	procs := make([]*collectors.Process, len(insts))
	for i, s := range insts {
		procs[i] = &collectors.Process{ActiveFrom: s.inst.ActiveFrom, ActiveTo: s.inst.ActiveTo}
	}
	return a.unionMicros(procs, start, end)
}

// vmOwner is the owner of an instance nothing attributed: its VM's usage,
// unattributed.
func vmOwner(v *collectors.VGPUInstance) collectors.Owner {
	id := v.VMID
	if id == "" {
		id = v.UUID
	}
	return collectors.Owner{Tenant: collectors.UnattributedTenant, Workload: "vm/" + id}
}

// presenceSpan is the µs of [from, to) inside [start, end); zero bounds
// are the interval's.
func presenceSpan(from, to, start, end time.Time) uint64 {
	f, t := spanOf(from, to, start, end)
	if !t.After(f) {
		return 0
	}
	return uint64(t.Sub(f) / time.Microsecond)
}

func spanOf(from, to, start, end time.Time) (time.Time, time.Time) {
	return clampTime(from, start, end, start), clampTime(to, start, end, end)
}

func lcm(a, b uint64) uint64 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	if x == 0 {
		return max(a, b)
	}
	return satMul(a/x, b)
}
