package insights

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/partition"
	"github.com/gpumeter/gpumeter/pricing"
)

// RightSizeParams decide how much of a profile a tenant needs.
type RightSizeParams struct {
	// Percentile of the intervals (weighted by duration) whose memory peak
	// and SM activity must fit. Default 0.99; 1 is the observed maximum.
	Percentile float64 `json:"percentile"`
	// MemHeadroom and SMHeadroom are added on top of the percentile before
	// comparing with a profile (0.1 = 10 %). Default 0.10 each.
	MemHeadroom float64 `json:"mem_headroom"`
	SMHeadroom  float64 `json:"sm_headroom"`
}

// DefaultRightSizeParams are the defaults documented on RightSizeParams.
func DefaultRightSizeParams() RightSizeParams {
	return RightSizeParams{Percentile: 0.99, MemHeadroom: 0.10, SMHeadroom: 0.10}
}

// Validate reports every out-of-range parameter.
func (p RightSizeParams) Validate() error {
	var errs []error
	if math.IsNaN(p.Percentile) || p.Percentile <= 0 || p.Percentile > 1 {
		errs = append(errs, fmt.Errorf("percentile %v is not within (0, 1]", p.Percentile))
	}
	for _, h := range []struct {
		name string
		v    float64
	}{{"mem headroom", p.MemHeadroom}, {"sm headroom", p.SMHeadroom}} {
		if math.IsNaN(h.v) || h.v < 0 || h.v > 10 {
			errs = append(errs, fmt.Errorf("%s %v is not within [0, 10]", h.name, h.v))
		}
	}
	return errors.Join(errs...)
}

// DefaultVGPUDivisors give the default time-sliced vGPU types offered on a
// model: framebuffers of memory/n GB for these n ("A100-4C" … "A100-40C" on
// a 40 GB A100, NVIDIA's C-series sizes).
var defaultVGPUDivisors = []int{1, 2, 4, 5, 8, 10}

// RightSizeInput is everything RightSize needs.
type RightSizeInput struct {
	From, To time.Time // whole UTC hours; intervals start inside
	Params   RightSizeParams
	Holdings []Holding
	// Pricing prices the savings per tenant; a tenant missing here gets
	// GPU-equivalents saved but no money.
	Pricing map[string]TenantPricing
	// VGPUTypes lists, per model, the time-sliced vGPU type names the fleet
	// offers ("A100-4C"); a model missing here offers memory/n GB for n in
	// 1, 2, 4, 5, 8, 10 in the current type's series.
	VGPUTypes map[string][]string
	// Fleet, when given, is planned from scratch for the right-sized MIG
	// demand (see RightSize).
	Fleet *partition.Fleet
}

// Validate reports every problem of the input.
func (in RightSizeInput) Validate() error {
	errs := []error{validatePeriod(in.From, in.To)}
	if err := in.Params.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("params: %w", err))
	}
	errs = append(errs, validateHoldings("holdings", in.Holdings), validatePricing(in.Pricing),
		intervalsInside("holdings", in.Holdings, in.From, in.To))
	models := slices.Sorted(maps.Keys(in.VGPUTypes))
	for _, m := range models {
		for _, name := range in.VGPUTypes[m] {
			if t, ok := gpucatalog.LookupVGPU(m, name); !ok || t.MIGProfile != "" {
				errs = append(errs, fmt.Errorf("vgpu types[%s]: %q is no time-sliced vGPU type of the model", m, name))
			}
		}
	}
	if in.Fleet != nil {
		if err := in.Fleet.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("fleet: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Action is a right-sizing verdict.
type Action string

const (
	// Downsize: a profile of fewer GPU-equivalents would have held the
	// tenant's percentile demand.
	Downsize Action = "downsize"
	// Keep: nothing smaller fits, or there is nothing to compare with.
	Keep Action = "keep"
)

// ProfileSize is one SKU's size: its GPU-equivalent weight (exact fraction)
// and its nominal framebuffer in bytes (the profile name's GB × 10^9).
type ProfileSize struct {
	SKU            string          `json:"sku"`
	GPUEquivalents decimal.Decimal `json:"gpu_equivalents"`
	MemoryBytes    int64           `json:"memory_bytes"`
	num, den       int64
}

func (p ProfileSize) weight() float64 { return float64(p.num) / float64(p.den) }

// RightSizing is the verdict for one tenant's use of one SKU.
type RightSizing struct {
	Tenant     string          `json:"tenant"`
	Department string          `json:"department"`
	Model      string          `json:"model"`
	Kind       gpucatalog.Kind `json:"kind"`
	// Instances is how many devices or instances of the SKU it held;
	// Concurrent the most it held at one time.
	Instances  int `json:"instances"`
	Concurrent int `json:"concurrent"`
	// MemBytes is the percentile of interval memory peaks; SMGPUs the
	// percentile of SM activity in GPU-equivalents (SM-active time over
	// wall time). SMMeasured is false when no interval had an SM reading:
	// compute demand is then taken as the whole current profile.
	MemBytes   int64   `json:"mem_bytes"`
	SMGPUs     float64 `json:"sm_gpus"`
	SMMeasured bool    `json:"sm_measured"`

	Current     ProfileSize `json:"current"`
	Recommended ProfileSize `json:"recommended"`
	Action      Action      `json:"action"`
	Reason      string      `json:"reason,omitempty"`

	// HeldGPUMicros is what the tenant held of the SKU; RecommendedGPUMicros
	// what an instance of the recommended SKU would have held over the same
	// time (the wall time it held anything × the recommended weight, per
	// hour); SavedGPUMicros the difference. For exclusive holdings (MIG
	// instances, whole GPUs) that is the held time scaled by the weights; a
	// time-sliced share is recommended a profile only when that holds less.
	HeldGPUMicros        int64 `json:"held_gpu_microseconds"`
	RecommendedGPUMicros int64 `json:"recommended_gpu_microseconds"`
	SavedGPUMicros       int64 `json:"saved_gpu_microseconds"`
	// Saving is the money saved under the tenant's pricing: its priced
	// period minus the same period with this SKU's gpu_hours moved to the
	// recommended SKU. Nil without pricing, or when either SKU is unpriced
	// (listed in Unpriced).
	Saving   *Money   `json:"saving,omitempty"`
	Unpriced []string `json:"unpriced,omitempty"`
}

// RightSizeReport is every tenant's verdicts and the layout of the
// right-sized demand.
type RightSizeReport struct {
	From    time.Time        `json:"from"`
	To      time.Time        `json:"to"`
	Params  RightSizeParams  `json:"params"`
	Tenants []RightSizing    `json:"tenants"`
	Demand  partition.Demand `json:"demand"`
	// Plan is the partition planner's layout of Demand on Fleet, nil
	// without a fleet. GPUsUsed counts its GPUs with an instance that serves
	// a tenant: the MIG GPUs the right-sized demand needs.
	Plan     *partition.Plan `json:"plan,omitempty"`
	GPUsUsed int             `json:"gpus_used"`
}

// RightSize finds, for each tenant and SKU it held (whole GPUs, MIG and
// vGPU instances), the smallest profile of the same model that would have
// held the Params.Percentile of its interval memory peaks and SM activity
// plus headroom, and what that would have saved.
//
// Candidates come from the one profile table (gpucatalog): a whole GPU or
// MIG instance may become any MIG profile of its model (media-extension
// profiles aside); a MIG-backed vGPU any MIG-backed type of its board; a
// time-sliced vGPU any offered time-sliced type of its series. A candidate
// fits when its weight (GPU-equivalents) is at least the SM percentile ×
// (1 + SMHeadroom) and its nominal memory at least the memory percentile ×
// (1 + MemHeadroom). Of the candidates that fit, the fewest GPU-equivalents
// win, then the least memory, then table order; it is recommended only
// when it weighs less than the current SKU and, held for all the wall time
// the tenant held anything, holds less GPU time than the tenant did (a
// third of a time-sliced GPU is no saving as a 3g instance); else the
// verdict is Keep.
//
// Demand is the right-sized MIG demand: per tenant, model and profile the
// most instances it held at once, of every MIG SKU (kept or right-sized)
// and of every whole GPU right-sized to a MIG profile; whole GPUs kept
// whole and vGPU (hypervisors lay it out) stay out. With Fleet, Plan is
// partition.Solve of that demand on the fleet with its MIG GPUs emptied
// and the whole GPUs of right-sized holdings turned into empty MIG GPUs,
// other whole GPUs left whole: the MIG layout the planner would choose
// from scratch.
func RightSize(in RightSizeInput) (RightSizeReport, error) {
	if err := in.Validate(); err != nil {
		return RightSizeReport{}, fmt.Errorf("right-size: %w", err)
	}
	type group struct {
		tenant, dept, sku string
		holdings          []Holding
	}
	groups := map[[2]string]*group{}
	tenantHours := map[string]gpuHours{}
	for _, h := range in.Holdings {
		k := [2]string{h.Tenant, h.SKU}
		g := groups[k]
		if g == nil {
			g = &group{tenant: h.Tenant, dept: h.Department, sku: h.SKU}
			groups[k] = g
		}
		g.holdings = append(g.holdings, h)
		th := tenantHours[h.Tenant]
		if th == nil {
			th = gpuHours{}
			tenantHours[h.Tenant] = th
		}
		for _, iv := range h.Intervals {
			th.add(iv.Start, h.SKU, iv.GPUMicros)
		}
	}
	keys := sortedPairs(groups)
	rep := RightSizeReport{From: in.From, To: in.To, Params: in.Params}
	demand := map[string]map[[2]string]int{} // tenant → (model, profile) → count
	partitioned := map[string]bool{}         // whole GPUs the demand would partition
	for _, k := range keys {
		g := groups[k]
		r := RightSizing{Tenant: g.tenant, Department: g.dept, Instances: len(g.holdings), Concurrent: concurrency(g.holdings)}
		model, profile := gpucatalog.ParseSKU(g.sku)
		r.Model = model
		cur, cands, kind, reason := candidates(model, profile, in.VGPUTypes[model])
		r.Kind = kind
		memVals, smVals := demandSamples(g.holdings)
		r.MemBytes = int64(weightedPercentile(memVals, in.Params.Percentile))
		if len(smVals) > 0 {
			r.SMGPUs, r.SMMeasured = weightedPercentile(smVals, in.Params.Percentile), true
		}
		// heldWall is the wall time per hour in which the tenant held the
		// SKU: what an instance of the recommended profile would be held.
		heldWall := gpuHours{}
		for _, h := range g.holdings {
			for _, iv := range h.Intervals {
				r.HeldGPUMicros += iv.GPUMicros
				if iv.GPUMicros > 0 {
					heldWall.add(iv.Start, g.sku, iv.DurationMicros)
				}
			}
		}
		r.Current, r.Recommended, r.Action, r.Reason = cur, cur, Keep, reason
		var scaled gpuHours
		if reason == "" {
			needSM := r.SMGPUs * (1 + in.Params.SMHeadroom)
			if !r.SMMeasured {
				needSM = cur.weight()
			}
			needMem := float64(r.MemBytes) * (1 + in.Params.MemHeadroom)
			best, ok := smallestFit(cands, needSM, needMem)
			switch {
			case !ok || best.num*cur.den >= cur.num*best.den:
				r.Reason = "no smaller profile holds the demand"
			default:
				scaled = gpuHours{}
				var total int64
				for hk, v := range heldWall {
					x := mulDiv(v, best.num, best.den)
					scaled[hourKey{hk.hour, best.SKU}] = x
					total += x
				}
				if total >= r.HeldGPUMicros {
					// A time-sliced share can hold less than the smaller
					// profile would, held the whole time.
					r.Reason = fmt.Sprintf("%s held all the time would hold more than the share used", best.SKU)
					scaled = nil
				} else {
					r.Recommended, r.Action, r.RecommendedGPUMicros = best, Downsize, total
				}
			}
		}
		if r.Action != Downsize {
			r.RecommendedGPUMicros = r.HeldGPUMicros
		}
		if r.Action == Downsize {
			if tp, ok := in.Pricing[g.tenant]; ok {
				var unpriced []string
				for _, s := range []string{g.sku, r.Recommended.SKU} {
					if !tp.Book.Prices(s, pricing.GPUHours) {
						unpriced = append(unpriced, s)
					}
				}
				if len(unpriced) > 0 {
					r.Unpriced = unpriced
				} else {
					actual := tenantHours[g.tenant]
					cf := gpuHours{}
					for hk, v := range actual {
						if hk.sku != g.sku {
							cf[hk] += v
						}
					}
					for hk, v := range scaled {
						cf[hk] += v
					}
					m, _, err := saving(g.tenant, tp, in.From, in.To, actual, cf)
					if err != nil {
						return RightSizeReport{}, fmt.Errorf("right-size: saving: %w", err)
					}
					r.Saving = &m
				}
			}
		}
		r.SavedGPUMicros = r.HeldGPUMicros - r.RecommendedGPUMicros
		// MIG demand: MIG instances (kept or right-sized) and whole GPUs
		// that would become MIG instances.
		if kind == gpucatalog.KindMIG || (kind == gpucatalog.KindGPU && r.Action == Downsize) {
			_, prof := gpucatalog.ParseSKU(r.Recommended.SKU)
			if demand[g.tenant] == nil {
				demand[g.tenant] = map[[2]string]int{}
			}
			demand[g.tenant][[2]string{model, prof}] += max(r.Concurrent, 1)
			if kind == gpucatalog.KindGPU {
				for _, h := range g.holdings {
					partitioned[h.GPUUUID] = true
				}
			}
		}
		rep.Tenants = append(rep.Tenants, r)
	}
	rep.Demand = buildDemand(demand)
	if in.Fleet != nil {
		fleet := emptyFleet(*in.Fleet, partitioned)
		plan, err := partition.Solve(fleet, rep.Demand)
		if err != nil {
			return RightSizeReport{}, fmt.Errorf("right-size: layout: %w", err)
		}
		rep.Plan = &plan
		for _, g := range plan.GPUs {
			for _, inst := range g.Instances {
				if inst.Tenant != "" {
					rep.GPUsUsed++
					break
				}
			}
		}
	}
	return rep, nil
}

// candidates returns the current SKU's size, the sizes it may become, its
// kind, and a reason when it cannot be right-sized.
func candidates(model, profile string, offered []string) (ProfileSize, []ProfileSize, gpucatalog.Kind, string) {
	sku := gpucatalog.SKU(model, profile)
	m, known := gpucatalog.LookupModel(model)
	kind := gpucatalog.ProfileKind(profile)
	if !known {
		return ProfileSize{SKU: sku, GPUEquivalents: decimal.NewFromInt(1), num: 1, den: 1}, nil, kind, "model has no profile table"
	}
	size := func(sku string, memGB int) (ProfileSize, bool) {
		n, d, ok := gpucatalog.GPUEquivalent(sku)
		if !ok {
			return ProfileSize{}, false
		}
		return ProfileSize{SKU: sku, GPUEquivalents: decimal.NewFromInt(int64(n)).DivRound(decimal.NewFromInt(int64(d)), 18),
			MemoryBytes: int64(memGB) * 1_000_000_000, num: int64(n), den: int64(d)}, true
	}
	migCands := func() []ProfileSize {
		var out []ProfileSize
		for _, p := range m.Profiles {
			if strings.Contains(p.Name, "+") {
				continue // media extensions: a special-purpose 1g
			}
			if s, ok := size(gpucatalog.SKU(model, p.Name), p.MemoryGB); ok {
				out = append(out, s)
			}
		}
		return out
	}
	switch kind {
	case gpucatalog.KindGPU:
		cur, _ := size(sku, m.MemoryGB)
		return cur, migCands(), kind, ""
	case gpucatalog.KindMIG:
		p, ok := gpucatalog.Lookup(model, profile)
		if !ok {
			return ProfileSize{SKU: sku, GPUEquivalents: decimal.NewFromInt(1), num: 1, den: 1}, nil, kind, "profile not in the model's table"
		}
		cur, _ := size(sku, p.MemoryGB)
		return cur, migCands(), kind, ""
	}
	name := strings.TrimPrefix(profile, gpucatalog.VGPUProfilePrefix)
	t, ok := gpucatalog.LookupVGPU(model, name)
	if !ok {
		return ProfileSize{SKU: sku, GPUEquivalents: decimal.NewFromInt(1), num: 1, den: 1}, nil, kind, "unknown vGPU type"
	}
	cur, _ := size(sku, t.FramebufferGB)
	board, _, _ := strings.Cut(name, "-")
	var names []string
	if t.MIGProfile != "" {
		for _, p := range m.Profiles {
			if !strings.Contains(p.Name, "+") {
				names = append(names, board+"-"+strconv.Itoa(p.ComputeSlices)+"-"+strconv.Itoa(p.MemoryGB)+"C")
			}
		}
	} else if offered != nil {
		names = offered
	} else {
		series := name[len(name)-1:]
		for _, n := range defaultVGPUDivisors {
			names = append(names, board+"-"+strconv.Itoa(m.MemoryGB/n)+series)
		}
	}
	var out []ProfileSize
	seen := map[string]bool{}
	for _, n := range names {
		ct, ok := gpucatalog.LookupVGPU(model, n)
		if !ok || seen[n] || (ct.MIGProfile == "") != (t.MIGProfile == "") {
			continue
		}
		seen[n] = true
		if s, ok := size(gpucatalog.SKU(model, gpucatalog.VGPUProfilePrefix+n), ct.FramebufferGB); ok {
			out = append(out, s)
		}
	}
	return cur, out, kind, ""
}

// smallestFit picks the candidate of fewest GPU-equivalents, then least
// memory, that holds the demand.
func smallestFit(cands []ProfileSize, needSM, needMem float64) (ProfileSize, bool) {
	var best ProfileSize
	found := false
	for _, c := range cands {
		if c.weight() < needSM || float64(c.MemoryBytes) < needMem {
			continue
		}
		if !found || c.num*best.den < best.num*c.den || (c.num*best.den == best.num*c.den && c.MemoryBytes < best.MemoryBytes) {
			best, found = c, true
		}
	}
	return best, found
}

type weighted struct {
	v float64
	w int64
}

// demandSamples lists, per interval held, its memory peak and (when
// measured) its SM activity in GPU-equivalents, each weighted by duration.
func demandSamples(hs []Holding) (mem, sm []weighted) {
	for _, h := range hs {
		for _, iv := range h.Intervals {
			if iv.GPUMicros == 0 {
				continue
			}
			mem = append(mem, weighted{float64(iv.MemPeakBytes), iv.DurationMicros})
			if !iv.SMUnmeasured {
				sm = append(sm, weighted{float64(iv.SMActiveMicros) / float64(iv.DurationMicros), iv.DurationMicros})
			}
		}
	}
	return mem, sm
}

// weightedPercentile is the smallest value whose cumulative weight reaches
// p of the total (the weighted nearest-rank percentile); 0 for no values.
func weightedPercentile(vals []weighted, p float64) float64 {
	if len(vals) == 0 {
		return 0
	}
	s := make([]weighted, len(vals))
	copy(s, vals)
	sort.Slice(s, func(i, j int) bool { return s[i].v < s[j].v })
	var total float64
	for _, x := range s {
		total += float64(x.w)
	}
	target := p * total
	var cum float64
	for _, x := range s {
		cum += float64(x.w)
		if cum >= target*(1-1e-12) {
			return x.v
		}
	}
	return s[len(s)-1].v
}

// concurrency is the most holdings with an interval covering one instant.
func concurrency(hs []Holding) int {
	type ev struct {
		at    time.Time
		delta int
	}
	var evs []ev
	for _, h := range hs {
		// contiguous intervals form one block
		var bs, be time.Time
		open := false
		for _, iv := range h.Intervals {
			if iv.GPUMicros == 0 {
				continue
			}
			if open && iv.Start.Equal(be) {
				be = iv.End()
				continue
			}
			if open {
				evs = append(evs, ev{bs, 1}, ev{be, -1})
			}
			bs, be, open = iv.Start, iv.End(), true
		}
		if open {
			evs = append(evs, ev{bs, 1}, ev{be, -1})
		}
	}
	sort.Slice(evs, func(i, j int) bool {
		if !evs[i].at.Equal(evs[j].at) {
			return evs[i].at.Before(evs[j].at)
		}
		return evs[i].delta < evs[j].delta // ends before starts
	})
	n, most := 0, 0
	for _, e := range evs {
		n += e.delta
		most = max(most, n)
	}
	return most
}

// mulDiv is v × num / den rounded half up, exact for any int64 inputs.
func mulDiv(v, num, den int64) int64 {
	x := new(big.Int).Mul(big.NewInt(v), big.NewInt(num))
	d := big.NewInt(den)
	q, r := new(big.Int).QuoRem(x, d, new(big.Int))
	if r.Mul(r, big.NewInt(2)).Cmp(d) >= 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// sortedPairs is m's keys, pairs such as (model, profile), in order.
func sortedPairs[V any](m map[[2]string]V) [][2]string {
	return slices.SortedFunc(maps.Keys(m), func(a, b [2]string) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
}

func buildDemand(d map[string]map[[2]string]int) partition.Demand {
	tenants := slices.Sorted(maps.Keys(d))
	var out partition.Demand
	for _, t := range tenants {
		td := partition.TenantDemand{Tenant: t}
		for _, k := range sortedPairs(d[t]) {
			td.Pending = append(td.Pending, partition.Request{Model: k[0], Profile: k[1], Count: min(d[t][k], partition.MaxCount)})
		}
		out.Tenants = append(out.Tenants, td)
	}
	return out
}

// emptyFleet is the fleet with its MIG GPUs emptied and the whole GPUs
// in partition MIG-enabled and empty; other whole GPUs stay whole (the
// planner leaves them alone).
func emptyFleet(f partition.Fleet, toMIG map[string]bool) partition.Fleet {
	out := partition.Fleet{GPUs: make([]partition.GPU, 0, len(f.GPUs))}
	for _, g := range f.GPUs {
		whole := g.MIGDisabled && !toMIG[g.UUID]
		out.GPUs = append(out.GPUs, partition.GPU{Host: g.Host, UUID: g.UUID, Model: g.Model, Index: g.Index, MIGDisabled: whole})
	}
	return out
}
