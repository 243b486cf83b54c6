package attribution

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

// apportionGranted makes the rows of a whole GPU billed by its grants
// (Options.Granted, HAMi's cores %): each holder gets interval × its
// share, the rest of the GPU is idle, so holders + idle = the interval.
// Grants adding up to more than the whole GPU (HAMi over-subscribed, or
// "no limit" holders) are scaled down to it, in proportion. Processes keep
// their memory and SM activity in their owner's row and add no GPU time:
// on a granted GPU, time is what was granted, not what ran.
func (a *apportioner) apportionGranted(g *collectors.GPUReading, start, end time.Time) {
	s := slot{device: g.GPU.UUID, capacity: a.interval, smActive: g.SMActive, perProc: g.ProcessUtilization}
	grants := grantOwners(g.Grants)
	a.scratchW = a.scratchW[:0]
	var sum uint64
	for _, gr := range grants {
		a.scratchW = append(a.scratchW, uint64(gr.SharePPM))
		sum += uint64(gr.SharePPM)
	}
	a.scratchW = append(a.scratchW, uint64(collectors.PPMScale)-min(sum, collectors.PPMScale))
	parts := collectors.Split(a.scratchP[:0], a.interval, a.scratchW)
	for i, gr := range grants {
		a.rowFor(&s, gr.Owner).m.GPUMicroseconds += parts[i]
	}
	if idle := parts[len(grants)]; idle > 0 {
		r := a.rowFor(&s, collectors.Owner{})
		r.idle = true
		r.m.GPUMicroseconds += idle
	}

	procs := slices.Clone(a.procPtrs)
	slices.SortFunc(procs, func(x, y *collectors.Process) int { return cmp.Compare(x.PID, y.PID) })
	for _, p := range procs {
		pres := presenceMicros(p, start, end)
		r := a.rowFor(&s, processOwner(p))
		if s.perProc && p.SMUtil.OK {
			r.m.SMActiveMicroseconds += collectors.MulDiv(pres, uint64(p.SMUtil.PPM), collectors.PPMScale)
		}
		r.m.MemMiBSeconds += collectors.MulDiv(p.MemBytes, pres, 1<<20*1_000_000)
		r.m.MemPeakBytes = max(r.m.MemPeakBytes, p.MemPeakBytes)
	}
	rows := a.rows
	for i := range rows {
		rows[i].m.SMActiveMicroseconds = min(rows[i].m.SMActiveMicroseconds, rows[i].m.GPUMicroseconds)
	}
	if !s.perProc && s.smActive.OK {
		active := collectors.MulDiv(a.interval, uint64(s.smActive.PPM), collectors.PPMScale)
		a.weights = grown(a.weights, len(rows))
		for i := range rows {
			a.weights[i] = rows[i].m.GPUMicroseconds
		}
		a.shares = collectors.Split(a.shares[:0], active, a.weights)
		for i := range rows {
			rows[i].m.SMActiveMicroseconds = a.shares[i]
		}
	}
}

// grantOwners merges grants of the same holder (capped at the whole GPU),
// names an unattributed holder as claims are named, and orders them by
// tenant and workload, so the split does not depend on input order.
func grantOwners(in []collectors.Grant) []collectors.Grant {
	out := make([]collectors.Grant, 0, len(in))
	for _, gr := range in {
		o := gr.Owner
		if o.Tenant == "" {
			if o.Workload == "" {
				continue
			}
			o.Tenant, o.Department = collectors.UnattributedTenant, ""
		}
		merged := false
		for i := range out {
			if out[i].Owner.Tenant == o.Tenant && out[i].Owner.Workload == o.Workload {
				out[i].SharePPM = min(out[i].SharePPM+gr.SharePPM, collectors.PPMScale)
				merged = true
				break
			}
		}
		if !merged {
			out = append(out, collectors.Grant{Owner: o, SharePPM: min(gr.SharePPM, collectors.PPMScale)})
		}
	}
	slices.SortFunc(out, func(x, y collectors.Grant) int {
		return cmp.Or(cmp.Compare(x.Owner.Tenant, y.Owner.Tenant), cmp.Compare(x.Owner.Workload, y.Owner.Workload))
	})
	return out
}
