package attribution

import (
	"cmp"
	"math/bits"
	"slices"
	"strconv"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// Apportion turns one GPU's attributed reading for [start, end) into
// samples, appended to dst. It is pure: the same reading gives the same
// samples, whatever the order of its instances, processes and claims.
//
// The rules (docs/collector.md has the reasoning):
//
//   - Slots. A whole GPU is one slot holding the interval. A MIG GPU is one
//     slot per MIG device, holding interval × its compute slices / the GPU's
//     slices, plus the unpartitioned slices as an idle slot; the interval is
//     split over the slots by largest remainder, MIG devices in UUID order,
//     the unpartitioned rest last.
//   - Within a slot, the time any process existed (the union of their
//     presence) is split over the processes by presence × SM utilization;
//     where no utilization was read or all of it was zero, by presence ×
//     memory held; where no memory either, by presence. Processes are
//     ordered by PID for the split. So idle time while a GPU is shared goes
//     to its holders pro rata.
//   - The slot's remaining time goes to its claimants (a pod allocated the
//     device, a static map entry), split equally in tenant/workload order,
//     or, unclaimed, to an idle row (empty tenant and workload).
//   - Rows of the same device, tenant and workload are merged. Process
//     usage nothing attributed gets collectors.UnattributedTenant and keeps
//     its workload ("pid/<pid>" when nothing named it).
//   - SM-active time: per process, presence × its SM utilization (capped at
//     its row's GPU time); without per-process utilization, the slot's
//     measured activity (device utilization, or GPM for a MIG device) ×
//     slot time, shared over the slot's rows by their GPU time.
//   - Memory: MiB-seconds are each process's memory × presence; the peak
//     is the largest process peak in the row.
//   - Energy: the GPU's delta is split over all rows, idle included, by
//     GPU time + SM-active time (a busy slot draws up to twice an idle one
//     of the same size). Traffic counters likewise, over the rows that
//     are not idle (idle rows only when there are no others). Counters the
//     GPU did not report stay zero.
//
// Per GPU and interval, GPU-microseconds of all rows add up to the interval
// exactly, and energy rows to the energy delta.
//
// A vGPU host's GPU (docs/collector.md, "vGPU hosts") is split by its
// scheduler's policy over its vGPU instances instead: see apportionVGPU.
// Apportion uses the default Options.
func Apportion(dst []collectors.Sample, host string, start, end time.Time, g *collectors.GPUReading) []collectors.Sample {
	return Options{}.Apportion(dst, host, start, end, g)
}

// row is one consumer of one slot before it becomes a sample.
type row struct {
	device string // MIG UUID, vGPU UUID or GPU UUID: the sample id's device
	mig    *collectors.MIGInstance
	vgpu   *collectors.VGPUInstance
	owner  collectors.Owner
	idle   bool
	m      meter.Values
}

type slot struct {
	device   string
	mig      *collectors.MIGInstance // nil for the whole GPU or the unpartitioned rest
	vgpu     *collectors.VGPUInstance
	weight   uint64
	capacity uint64
	claims   []collectors.Owner
	smActive collectors.Ratio
	perProc  bool // per-process SM utilization applies
	procs    []*collectors.Process
	restSlot bool // the unpartitioned slices of a MIG GPU
}

type apportioner struct {
	opts     Options
	interval uint64 // µs
	slots    []slot
	rows     []row
	procPtrs []*collectors.Process
	// scratch, reused slot after slot
	scratchW []uint64
	scratchP []uint64
	pres     []uint64
	weights  []uint64
	shares   []uint64
	spans    []span
}

type span struct{ from, to time.Time }

// grown returns buf resized to n, zeroed, reusing its storage.
func grown(buf []uint64, n int) []uint64 {
	if cap(buf) < n {
		return make([]uint64, n)
	}
	buf = buf[:n]
	clear(buf)
	return buf
}

func (a *apportioner) run(host string, start, end time.Time, g *collectors.GPUReading) {
	a.interval = uint64(end.Sub(start) / time.Microsecond)
	if a.interval == 0 {
		return
	}
	a.rows = make([]row, 0, len(g.Processes)+len(g.Instances)+len(g.Claims)+2)
	a.slots = make([]slot, 0, len(g.Instances)+1)
	a.procPtrs = make([]*collectors.Process, len(g.Processes))
	for i := range g.Processes {
		a.procPtrs[i] = &g.Processes[i]
	}
	switch {
	case g.Virtualization == collectors.VirtHostVGPU:
		a.apportionVGPU(g, start, end)
	case a.opts.Granted && !g.MIG && len(g.Grants) > 0:
		a.apportionGranted(g, start, end)
	default:
		a.buildSlots(g)
		for i := range a.slots {
			a.fillSlot(&a.slots[i], start, end)
		}
	}
	a.splitCounters(g)
}

// buildSlots lays the GPU out in slots with their capacities.
func (a *apportioner) buildSlots(g *collectors.GPUReading) {
	if !g.MIG {
		a.slots = append(a.slots, slot{device: g.GPU.UUID, capacity: a.interval, claims: g.Claims, smActive: g.SMActive, perProc: g.ProcessUtilization, procs: a.procPtrs})
		return
	}
	insts := make([]*collectors.MIGInstance, len(g.Instances))
	for i := range g.Instances {
		insts[i] = &g.Instances[i]
	}
	slices.SortFunc(insts, func(x, y *collectors.MIGInstance) int { return cmp.Compare(x.UUID, y.UUID) })
	var used uint64
	for _, in := range insts {
		a.slots = append(a.slots, slot{device: in.UUID, mig: in, weight: in.MilliSlices, claims: in.Claims, smActive: in.SMActive})
		used += in.MilliSlices
	}
	total := max(g.TotalMilliSlices, used)
	rest := slot{device: g.GPU.UUID, weight: total - used, restSlot: true}
	for i := range g.Processes {
		p := &g.Processes[i]
		placed := false
		for k := range a.slots {
			if p.MIGUUID != "" && a.slots[k].device == p.MIGUUID {
				a.slots[k].procs = append(a.slots[k].procs, p)
				placed = true
				break
			}
		}
		if !placed {
			// A process on no known MIG device keeps its memory and its
			// row; it gets no GPU time (the source could not place it).
			rest.procs = append(rest.procs, p)
		}
	}
	if rest.weight > 0 || len(rest.procs) > 0 {
		a.slots = append(a.slots, rest)
	}
	a.scratchW = a.scratchW[:0]
	for i := range a.slots {
		a.scratchW = append(a.scratchW, a.slots[i].weight)
	}
	if total == 0 {
		// No slice information at all: every slot weighs the same.
		for i := range a.scratchW {
			a.scratchW[i] = 1
		}
	}
	a.scratchP = collectors.Split(a.scratchP, a.interval, a.scratchW)
	for i := range a.slots {
		a.slots[i].capacity = a.scratchP[i]
	}
}

// fillSlot makes the rows of one slot.
func (a *apportioner) fillSlot(s *slot, start, end time.Time) {
	first := len(a.rows)
	procs := s.procs
	slices.SortFunc(procs, func(x, y *collectors.Process) int { return cmp.Compare(x.PID, y.PID) })

	// Presence of each process and the union of them.
	a.pres = grown(a.pres, len(procs))
	pres := a.pres
	for i, p := range procs {
		pres[i] = presenceMicros(p, start, end)
	}
	occupied := a.unionMicros(procs, start, end)
	var occ, unocc uint64
	if len(procs) == 0 {
		unocc = s.capacity
	} else {
		a.scratchW = append(a.scratchW[:0], occupied, a.interval-occupied)
		parts := collectors.Split(a.scratchP[:0], s.capacity, a.scratchW)
		occ, unocc = parts[0], parts[1]
	}
	if s.restSlot {
		// The unpartitioned slices are nobody's: processes placed here get
		// no time.
		unocc += occ
		occ = 0
	}

	// Split the occupied time over the processes.
	a.weights = grown(a.weights, len(procs))
	weights := a.weights
	var sum uint64
	if s.perProc {
		for i, p := range procs {
			if p.SMUtil.OK {
				weights[i] = satMul(pres[i], uint64(p.SMUtil.PPM))
				sum += weights[i]
			}
		}
	}
	if sum == 0 {
		for i, p := range procs {
			weights[i] = satMul(pres[i], p.MemBytes>>10)
			sum += weights[i]
		}
	}
	if sum == 0 {
		copy(weights, pres)
	}
	a.shares = collectors.Split(a.shares[:0], occ, weights)
	shares := a.shares
	for i, p := range procs {
		r := a.rowFor(s, processOwner(p))
		r.m.GPUMicroseconds += shares[i]
		if s.perProc && p.SMUtil.OK {
			r.m.SMActiveMicroseconds += collectors.MulDiv(pres[i], uint64(p.SMUtil.PPM), collectors.PPMScale)
		}
		r.m.MemMiBSeconds += collectors.MulDiv(p.MemBytes, pres[i], 1<<20*1_000_000)
		r.m.MemPeakBytes = max(r.m.MemPeakBytes, p.MemPeakBytes)
	}

	// The rest of the slot: claimants, or idle.
	claims := claimOwners(s.claims)
	if unocc > 0 {
		if len(claims) == 0 || s.restSlot {
			r := a.rowFor(s, collectors.Owner{})
			r.idle = true
			r.m.GPUMicroseconds += unocc
		} else {
			parts := collectors.SplitEqual(nil, unocc, len(claims))
			for i, o := range claims {
				a.rowFor(s, o).m.GPUMicroseconds += parts[i]
			}
		}
	}

	rows := a.rows[first:]
	for i := range rows {
		rows[i].m.SMActiveMicroseconds = min(rows[i].m.SMActiveMicroseconds, rows[i].m.GPUMicroseconds)
	}
	// Slot-level activity where per-process utilization does not apply.
	if !s.perProc && s.smActive.OK && s.capacity > 0 {
		active := collectors.MulDiv(s.capacity, uint64(s.smActive.PPM), collectors.PPMScale)
		a.weights = grown(a.weights, len(rows))
		w := a.weights
		for i := range rows {
			w[i] = rows[i].m.GPUMicroseconds
		}
		a.shares = collectors.Split(a.shares[:0], active, w)
		parts := a.shares
		for i := range rows {
			rows[i].m.SMActiveMicroseconds = parts[i]
		}
	}
}

// rowFor finds or adds the slot's row of an owner.
func (a *apportioner) rowFor(s *slot, o collectors.Owner) *row {
	for i := len(a.rows) - 1; i >= 0; i-- {
		r := &a.rows[i]
		if r.device != s.device {
			break
		}
		if r.owner.Tenant == o.Tenant && r.owner.Workload == o.Workload {
			if r.owner.Department == "" {
				r.owner.Department = o.Department
			}
			return r
		}
	}
	a.rows = append(a.rows, row{device: s.device, mig: s.mig, vgpu: s.vgpu, owner: o})
	return &a.rows[len(a.rows)-1]
}

// splitCounters shares the GPU-level counters over the rows.
func (a *apportioner) splitCounters(g *collectors.GPUReading) {
	if len(a.rows) == 0 {
		return
	}
	// Rows in a stable order first, so the splits do not depend on input
	// order.
	slices.SortFunc(a.rows, func(x, y row) int {
		if c := cmp.Compare(x.device, y.device); c != 0 {
			return c
		}
		if c := cmp.Compare(x.owner.Tenant, y.owner.Tenant); c != 0 {
			return c
		}
		return cmp.Compare(x.owner.Workload, y.owner.Workload)
	})
	a.weights = grown(a.weights, len(a.rows))
	a.pres = grown(a.pres, len(a.rows))
	all, busy := a.weights, a.pres
	var busySum uint64
	for i := range a.rows {
		all[i] = a.rows[i].m.GPUMicroseconds + a.rows[i].m.SMActiveMicroseconds
		if !a.rows[i].idle {
			busy[i] = all[i]
			busySum += busy[i]
		}
	}
	if busySum == 0 {
		busy = all
	}
	put := func(d collectors.Delta, weights []uint64, m meter.ID) {
		if !d.OK || d.Value == 0 {
			return
		}
		a.shares = collectors.Split(a.shares[:0], d.Value, weights)
		parts := a.shares
		for i := range a.rows {
			*a.rows[i].m.Ptr(m) = parts[i]
		}
	}
	// Each device counter is shared by GPU time held: energy with idle
	// included (an idle GPU draws power), traffic only among the rows that
	// ran something (the meter table's IdleShares).
	for id, spec := range meter.Specs {
		if spec.Source != meter.DeviceCounter {
			continue
		}
		if spec.IdleShares {
			put(g.Counters[id], all, meter.ID(id))
		} else {
			put(g.Counters[id], busy, meter.ID(id))
		}
	}
}

func (a *apportioner) emit(dst []collectors.Sample, host string, start, end time.Time, g *collectors.GPUReading) []collectors.Sample {
	for i := range a.rows {
		r := &a.rows[i]
		s := collectors.Sample{
			Host:       host,
			GPUUUID:    g.GPU.UUID,
			GPUModel:   g.GPU.Model,
			Tenant:     r.owner.Tenant,
			Department: r.owner.Department,
			Workload:   r.owner.Workload,
			Start:      start,
			End:        end,
			Values:     r.m,
		}
		switch {
		case r.vgpu != nil:
			// A vGPU instance takes the sub-device columns a MIG
			// instance does: its UUID and its profile, "vgpu:<type>".
			s.MIGUUID = r.vgpu.UUID
			s.MIGProfile = r.vgpu.Profile()
			if !r.vgpu.SMActive.OK {
				s.Unmeasured |= meter.UnmeasuredSMActive
			}
		case r.mig != nil:
			s.MIGUUID = r.mig.UUID
			s.MIGProfile = r.mig.Profile
			if !r.mig.SMActive.OK {
				s.Unmeasured |= meter.UnmeasuredSMActive
			}
		case !g.ProcessUtilization && !g.SMActive.OK:
			s.Unmeasured |= meter.UnmeasuredSMActive
		}
		s.Unmeasured |= gpuUnmeasured(g)
		s.SKU = gpucatalog.SKU(s.GPUModel, s.MIGProfile)
		s.ID = collectors.SampleID(host, r.device, s.Tenant, s.Workload, start)
		dst = append(dst, s)
	}
	return dst
}

// processOwner is a process's owner with the unattributed defaults.
func processOwner(p *collectors.Process) collectors.Owner {
	o := p.Owner
	if o.Tenant == "" {
		o.Tenant = collectors.UnattributedTenant
		o.Department = ""
	}
	if o.Workload == "" {
		o.Workload = "pid/" + strconv.FormatUint(uint64(p.PID), 10)
	}
	return o
}

// claimOwners dedupes and orders claims; a claim without a tenant is
// unattributed usage of its workload.
func claimOwners(in []collectors.Owner) []collectors.Owner {
	if len(in) == 0 {
		return nil
	}
	out := make([]collectors.Owner, 0, len(in))
	for _, o := range in {
		if o.Tenant == "" {
			if o.Workload == "" {
				continue
			}
			o.Tenant = collectors.UnattributedTenant
			o.Department = ""
		}
		dup := false
		for _, e := range out {
			if e.Tenant == o.Tenant && e.Workload == o.Workload {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(x, y collectors.Owner) int {
		if c := cmp.Compare(x.Tenant, y.Tenant); c != 0 {
			return c
		}
		return cmp.Compare(x.Workload, y.Workload)
	})
	return out
}

// satMul multiplies, saturating instead of wrapping (only absurdly long
// intervals come near; Split scales large weights down itself).
func satMul(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return ^uint64(0)
	}
	return lo
}

// presenceMicros is the part of [start, end) the process existed in.
func presenceMicros(p *collectors.Process, start, end time.Time) uint64 {
	from, to := clampTime(p.ActiveFrom, start, end, start), clampTime(p.ActiveTo, start, end, end)
	if !to.After(from) {
		return 0
	}
	return uint64(to.Sub(from) / time.Microsecond)
}

func clampTime(t, lo, hi, zero time.Time) time.Time {
	switch {
	case t.IsZero():
		return zero
	case t.Before(lo):
		return lo
	case t.After(hi):
		return hi
	}
	return t
}

// unionMicros is the time at least one of the processes existed.
func (a *apportioner) unionMicros(procs []*collectors.Process, start, end time.Time) uint64 {
	interval := a.interval
	spans := a.spans[:0]
	defer func() { a.spans = spans[:0] }()
	for _, p := range procs {
		from, to := clampTime(p.ActiveFrom, start, end, start), clampTime(p.ActiveTo, start, end, end)
		if to.After(from) {
			if from.Equal(start) && to.Equal(end) {
				return interval
			}
			spans = append(spans, span{from, to})
		}
	}
	slices.SortFunc(spans, func(x, y span) int { return x.from.Compare(y.from) })
	var total time.Duration
	var curFrom, curTo time.Time
	for i, s := range spans {
		if i == 0 || s.from.After(curTo) {
			total += curTo.Sub(curFrom)
			curFrom, curTo = s.from, s.to
			continue
		}
		if s.to.After(curTo) {
			curTo = s.to
		}
	}
	total += curTo.Sub(curFrom)
	return min(uint64(total/time.Microsecond), interval)
}

// gpuUnmeasured is what the GPU-level counters did not report this interval.
func gpuUnmeasured(g *collectors.GPUReading) meter.Unmeasured {
	var u meter.Unmeasured
	for id, spec := range meter.Specs {
		if spec.Source == meter.DeviceCounter && !g.Counters[id].OK {
			u |= spec.Unmeasured
		}
	}
	return u
}
