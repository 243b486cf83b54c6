package partition

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

func ptr(i int) *int { return &i }

// genConfig shapes a random fleet and demand.
type genConfig struct {
	gpus, tenants   int
	models          []string
	busyPct         int // of existing instances
	unknownStartPct int // existing instances whose start is not given
	maxExisting     int // instances tried per GPU
	maxRequests     int // per tenant and class
	maxCount        int
	anyModelPct     int // requests without a model
	disabledPct     int // GPUs with MIG off
}

// genFleet builds a random valid fleet: instances are added at random valid
// placements and kept only when they fit.
func genFleet(r *rand.Rand, c genConfig) Fleet {
	var f Fleet
	for i := range c.gpus {
		model := c.models[r.Intn(len(c.models))]
		m, _ := gpucatalog.LookupModel(model)
		g := GPU{Host: fmt.Sprintf("host-%d", i/8), UUID: fmt.Sprintf("GPU-%04d", i), Model: model, Index: ptr(i % 8)}
		if r.Intn(100) < c.disabledPct {
			g.MIGDisabled = true
			f.GPUs = append(f.GPUs, g)
			continue
		}
		var used uint8
		n := map[string]int{}
		for k := range r.Intn(c.maxExisting + 1) {
			p := m.Profiles[r.Intn(len(m.Profiles))]
			pl := p.Placements[r.Intn(len(p.Placements))]
			if used&pl.Mask() != 0 || n[p.Name] >= p.MaxInstances {
				continue
			}
			used |= pl.Mask()
			n[p.Name]++
			in := Instance{Profile: p.Name, Start: ptr(pl.Start), UUID: fmt.Sprintf("MIG-%04d-%d", i, k)}
			if r.Intn(100) < c.unknownStartPct {
				in.Start = nil
			}
			if r.Intn(3) > 0 {
				in.Tenant = fmt.Sprintf("t%02d", r.Intn(c.tenants))
			}
			in.Busy = r.Intn(100) < c.busyPct
			g.Instances = append(g.Instances, in)
		}
		f.GPUs = append(f.GPUs, g)
	}
	return f
}

func genDemand(r *rand.Rand, c genConfig) Demand {
	var d Demand
	for t := range c.tenants {
		td := TenantDemand{Tenant: fmt.Sprintf("t%02d", t)}
		for _, class := range []*[]Request{&td.Reserved, &td.Pending} {
			seen := map[[2]string]bool{}
			for range r.Intn(c.maxRequests + 1) {
				model := c.models[r.Intn(len(c.models))]
				m, _ := gpucatalog.LookupModel(model)
				p := m.Profiles[r.Intn(len(m.Profiles))]
				req := Request{Model: model, Profile: p.Name, Count: 1 + r.Intn(c.maxCount)}
				if r.Intn(100) < c.anyModelPct {
					req.Model = ""
				}
				k := [2]string{req.Model, req.Profile}
				if seen[k] {
					continue
				}
				seen[k] = true
				*class = append(*class, req)
			}
		}
		d.Tenants = append(d.Tenants, td)
	}
	return d
}

// checkLayouts verifies every target layout against the gpucatalog table
// directly (not through the planner's own index): known profile, valid
// start, no overlap, instance limits.
func checkLayouts(t *testing.T, plan Plan) {
	t.Helper()
	for _, g := range plan.GPUs {
		var used uint8
		n := map[string]int{}
		for _, in := range g.Instances {
			p, ok := gpucatalog.Lookup(g.Model, in.Profile)
			if !ok {
				t.Errorf("gpu %s: unknown profile %s", g.UUID, in.Profile)
				continue
			}
			if !p.ValidPlacement(in.Start) {
				t.Errorf("gpu %s: %s at invalid slot %d", g.UUID, in.Profile, in.Start)
				continue
			}
			mask := gpucatalog.Placement{Start: in.Start, Size: p.MemorySlices}.Mask()
			if used&mask != 0 {
				t.Errorf("gpu %s: %s at %d overlaps", g.UUID, in.Profile, in.Start)
			}
			used |= mask
			n[in.Profile]++
			if n[in.Profile] > p.MaxInstances {
				t.Errorf("gpu %s: %d instances of %s, max %d", g.UUID, n[in.Profile], in.Profile, p.MaxInstances)
			}
		}
	}
}
