package partition

import (
	"maps"
	"math/rand"
	"slices"
	"testing"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// bruteFits places profiles (any order) beside the occupied slots by trying
// every placement: an independent check that shares no code with the planner.
func bruteFits(model string, used uint8, profiles []string) bool {
	if len(profiles) == 0 {
		return true
	}
	p, _ := gpucatalog.Lookup(model, profiles[0])
	for _, pl := range p.Placements {
		if used&pl.Mask() == 0 && bruteFits(model, used|pl.Mask(), profiles[1:]) {
			return true
		}
	}
	return false
}

type dkey struct{ tenant, model, profile string }

type option struct {
	supply  map[[2]string]int // model/profile → idle or new instances
	changed bool
}

// gpuOptions lists every layout a GPU can take that matters for the demand:
// busy instances stay, any multiset of demanded profiles may join them, and
// keeping the current layout untouched is one more option.
func gpuOptions(g GPU, demanded map[string][]string) []option {
	if g.MIGDisabled {
		return []option{{supply: map[[2]string]int{}}}
	}
	var used uint8
	var busy, current []string
	for _, in := range g.Instances {
		current = append(current, in.Profile)
		if in.Busy {
			p, _ := gpucatalog.Lookup(g.Model, in.Profile)
			used |= gpucatalog.Placement{Start: *in.Start, Size: p.MemorySlices}.Mask()
			busy = append(busy, in.Profile)
		}
	}
	slices.Sort(current)
	keep := option{supply: map[[2]string]int{}}
	for _, in := range g.Instances {
		if !in.Busy {
			keep.supply[[2]string{g.Model, in.Profile}]++
		}
	}
	out := []option{keep}
	profs := demanded[g.Model]
	var rec func(i int, chosen []string)
	rec = func(i int, chosen []string) {
		if i == len(profs) {
			all := append(slices.Clone(busy), chosen...)
			slices.Sort(all)
			o := option{supply: map[[2]string]int{}, changed: !slices.Equal(all, current)}
			for _, c := range chosen {
				o.supply[[2]string{g.Model, c}]++
			}
			out = append(out, o)
			return
		}
		p, _ := gpucatalog.Lookup(g.Model, profs[i])
		for n := 0; ; n++ {
			next := slices.Clone(chosen)
			for range n {
				next = append(next, profs[i])
			}
			count := n
			for _, b := range busy {
				if b == profs[i] {
					count++
				}
			}
			if count > p.MaxInstances || !bruteFits(g.Model, used, next) {
				break
			}
			rec(i+1, next)
		}
	}
	rec(0, nil)
	return out
}

// served is what one tenant's instances of one profile name meet of its
// wants, in compute slices: explicit-model wants from their model's
// instances, any-model wants from what is left on any model; reserved
// first. held maps model → instances; er, ep the explicit reserved and
// pending per model; ar, ap the any-model ones.
func served(w int, held, er, ep map[string]int, ar, ap int) (res, tot int) {
	slackR, slackT := 0, 0
	for m, h := range held {
		res += min(h, er[m])
		tot += min(h, er[m]+ep[m])
		slackR += max(0, h-er[m])
		slackT += max(0, h-er[m]-ep[m])
	}
	return w * (res + min(slackR, ar)), w * (tot + min(slackT, ar+ap))
}

// optimum is the best demand any combination of layouts meets, as
// (reserved, total) compute slices, and the fewest GPUs changed to meet it.
// Any-model requests (no model) may be served on every model that has the
// profile name.
func optimum(fleet Fleet, demand Demand) (bestRes, bestTot, fewest int) {
	reserved, pending := map[dkey]int{}, map[dkey]int{}
	demanded := map[string][]string{}
	names := map[string]bool{}
	for _, td := range demand.Tenants {
		for _, r := range td.Reserved {
			reserved[dkey{td.Tenant, r.Model, r.Profile}] += r.Count
		}
		for _, r := range td.Pending {
			pending[dkey{td.Tenant, r.Model, r.Profile}] += r.Count
		}
		for _, r := range append(slices.Clone(td.Reserved), td.Pending...) {
			names[r.Profile] = true
			models := []string{r.Model}
			if r.Model == "" {
				models = gpucatalog.ModelsWithProfile(r.Profile)
			}
			for _, m := range models {
				if !slices.Contains(demanded[m], r.Profile) {
					demanded[m] = append(demanded[m], r.Profile)
				}
			}
		}
	}
	// Busy instances serve their tenant as the planner counts them:
	// explicit reserved, any-model reserved, explicit pending, any-model
	// pending. What they leave is demand on the idle and new instances,
	// summed over tenants per profile name (tenants do not matter for what
	// a supply can serve).
	type term struct {
		w, fixedR, fixedT int
		er, ep            map[string]int
		ar, ap            int
	}
	terms := map[string]*term{}
	for n := range names {
		terms[n] = &term{w: profileSlices("", n), er: map[string]int{}, ep: map[string]int{}}
	}
	left := func(m map[dkey]int) map[dkey]int { return maps.Clone(m) }
	resLeft, pendLeft := left(reserved), left(pending)
	for _, g := range fleet.GPUs {
		for _, in := range g.Instances {
			if !in.Busy || in.Tenant == "" || !names[in.Profile] {
				continue
			}
			tm := terms[in.Profile]
			for _, k := range []struct {
				m     map[dkey]int
				key   dkey
				class Class
			}{
				{resLeft, dkey{in.Tenant, g.Model, in.Profile}, Reserved},
				{resLeft, dkey{in.Tenant, "", in.Profile}, Reserved},
				{pendLeft, dkey{in.Tenant, g.Model, in.Profile}, Pending},
				{pendLeft, dkey{in.Tenant, "", in.Profile}, Pending},
			} {
				if k.m[k.key] > 0 {
					k.m[k.key]--
					if k.class == Reserved {
						tm.fixedR += tm.w
					}
					tm.fixedT += tm.w
					break
				}
			}
		}
	}
	for k, n := range resLeft {
		if k.model == "" {
			terms[k.profile].ar += n
		} else {
			terms[k.profile].er[k.model] += n
		}
	}
	for k, n := range pendLeft {
		if k.model == "" {
			terms[k.profile].ap += n
		} else {
			terms[k.profile].ep[k.model] += n
		}
	}
	supply := map[string]map[string]int{} // profile name → model → idle or new instances
	for n := range names {
		supply[n] = map[string]int{}
	}
	score := func() (res, tot int) {
		for n, tm := range terms {
			r, t := served(tm.w, supply[n], tm.er, tm.ep, tm.ar, tm.ap)
			res += tm.fixedR + r
			tot += tm.fixedT + t
		}
		return res, tot
	}
	opts := make([][]option, len(fleet.GPUs))
	for i, g := range fleet.GPUs {
		opts[i] = gpuOptions(g, demanded)
	}
	apply := func(o option, sign int) {
		for mp, n := range o.supply {
			if sup, ok := supply[mp[1]]; ok {
				sup[mp[0]] += sign * n
			}
		}
	}
	bestRes, bestTot, fewest = -1, -1, 0
	var rec func(i, changed int)
	rec = func(i, changed int) {
		if i == len(opts) {
			res, tot := score()
			switch {
			case res > bestRes || (res == bestRes && tot > bestTot):
				bestRes, bestTot, fewest = res, tot, changed
			case res == bestRes && tot == bestTot && changed < fewest:
				fewest = changed
			}
			return
		}
		for _, o := range opts[i] {
			apply(o, 1)
			c := changed
			if o.changed {
				c++
			}
			rec(i+1, c)
			apply(o, -1)
		}
	}
	rec(0, 0)
	return bestRes, bestTot, fewest
}

// achieved measures a plan the way optimum does: instances labelled with a
// tenant serve that tenant, explicit-model requests before any-model ones
// and reserved first.
func achieved(fleet Fleet, demand Demand, plan Plan) (res, tot int) {
	type tn struct{ tenant, profile string }
	held := map[tn]map[string]int{}
	for _, g := range plan.GPUs {
		for _, in := range g.Instances {
			if in.Tenant == "" {
				continue
			}
			k := tn{in.Tenant, in.Profile}
			if held[k] == nil {
				held[k] = map[string]int{}
			}
			held[k][g.Model]++
		}
	}
	for _, td := range demand.Tenants {
		er, ep := map[string]map[string]int{}, map[string]map[string]int{}
		ar, ap := map[string]int{}, map[string]int{}
		for _, c := range []struct {
			reqs     []Request
			explicit map[string]map[string]int
			any      map[string]int
		}{{td.Reserved, er, ar}, {td.Pending, ep, ap}} {
			for _, r := range c.reqs {
				if r.Model == "" {
					c.any[r.Profile] += r.Count
					continue
				}
				if c.explicit[r.Profile] == nil {
					c.explicit[r.Profile] = map[string]int{}
				}
				c.explicit[r.Profile][r.Model] += r.Count
			}
		}
		for k, h := range held {
			if k.tenant != td.Tenant {
				continue
			}
			r, t := served(profileSlices("", k.profile), h, er[k.profile], ep[k.profile], ar[k.profile], ap[k.profile])
			res += r
			tot += t
		}
	}
	return res, tot
}

// On small fleets the planner is compared with exhaustive search over every
// combination of layouts. The gap is reported; the test fails if the planner
// claims more than the optimum (a bug in one of them) or falls short of it
// more often than the documented bound. Seed 7 is the set the planner was
// tuned on; seeds 1–3 are independent of it and mix models that share
// profile names (A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB) with
// half the requests naming no model, so instances may move across models.
func TestSolveAgainstExhaustiveSearch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		seeds    []int64
		mixed    bool
		anyModel int
	}{
		{"tuning seed 7, one or two models", []int64{7}, false, 0},
		{"independent seeds 1-3, two models sharing profile names, any-model requests", []int64{1, 2, 3}, true, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cases, exact, resGap, totGap, changeGap, gapSlices, optSlices int
			for _, seed := range tc.seeds {
				r := rand.New(rand.NewSource(seed))
				for i := range 400 {
					cases++
					all := gpucatalog.Models()
					models := []string{all[r.Intn(4)]}
					switch {
					case tc.mixed:
						models = []string{all[r.Intn(3)], all[r.Intn(3)]}
					case r.Intn(4) == 0:
						models = append(models, all[r.Intn(4)])
					}
					cfg := genConfig{gpus: 1 + r.Intn(3), tenants: 1 + r.Intn(3), models: models, busyPct: 35,
						maxExisting: 4, maxRequests: 2, maxCount: 3, anyModelPct: tc.anyModel}
					fleet, demand := genFleet(r, cfg), genDemand(r, cfg)
					plan, err := Solve(fleet, demand)
					if err != nil {
						t.Fatalf("seed %d case %d: %v", seed, i, err)
					}
					checkPlan(t, fleet, demand, plan)
					res, tot := achieved(fleet, demand, plan)
					optRes, optTot, fewest := optimum(fleet, demand)
					optSlices += optTot
					switch {
					case res > optRes || (res == optRes && tot > optTot):
						t.Errorf("seed %d case %d: planner meets %d/%d slices, above the optimum %d/%d\nfleet %+v\ndemand %+v", seed, i, res, tot, optRes, optTot, fleet, demand)
					case res < optRes:
						resGap++
						gapSlices += optTot - tot
						t.Logf("seed %d case %d: reserved gap %d slices (planner %d, optimum %d)", seed, i, optRes-res, res, optRes)
					case tot < optTot:
						totGap++
						gapSlices += optTot - tot
						t.Logf("seed %d case %d: pending gap %d slices (planner %d, optimum %d)", seed, i, optTot-tot, tot, optTot)
					default:
						exact++
						if plan.Summary.GPUsChanged > fewest {
							changeGap++
							t.Logf("seed %d case %d: optimum demand with %d GPUs changed, %d would do", seed, i, plan.Summary.GPUsChanged, fewest)
						}
					}
				}
			}
			t.Logf("exhaustive comparison, %d cases: optimum met in %d; reserved short in %d, pending short in %d (%d of %d slices); more GPUs changed than needed in %d",
				cases, exact, resGap, totGap, gapSlices, optSlices, changeGap)
			// Bounds a little above what these seeds measure (docs/partition.md
			// has the figures): a change to the planner that does worse fails here.
			if resGap > cases/200 {
				t.Errorf("reserved demand short of the optimum in %d cases, want at most %d", resGap, cases/200)
			}
			if totGap > cases*2/100 {
				t.Errorf("pending demand short of the optimum in %d cases, want at most %d", totGap, cases*2/100)
			}
			// 0.5 %: the planner before the cross-model move measured 0.57 %
			// on the independent seeds, and fails here.
			if gapSlices*200 > optSlices {
				t.Errorf("planner short of the optimum by %d of %d slices, want at most 0.5%%", gapSlices, optSlices)
			}
			if changeGap > cases/50 {
				t.Errorf("more GPUs changed than needed in %d cases, want at most %d", changeGap, cases/50)
			}
		})
	}
}

func TestExhaustiveSearchFindsKnownOptimum(t *testing.T) {
	// The reference itself must be able to fail: a busy 1g at slot 3 leaves
	// room for one 3g (at 4) and three more 1g; asking for 3g+4g can meet 3.
	fleet := Fleet{GPUs: []GPU{{UUID: "g", Model: gpucatalog.H100SXM5_80GB, Instances: []Instance{
		{Profile: "1g.10gb", Start: ptr(3), UUID: "m", Tenant: "x", Busy: true},
	}}}}
	demand := oneTenant(gpucatalog.H100SXM5_80GB, Request{Profile: "3g.40gb", Count: 1}, Request{Profile: "4g.40gb", Count: 1})
	res, tot, fewest := optimum(fleet, demand)
	if res != 3 || tot != 3 || fewest != 1 {
		t.Errorf("optimum = %d/%d with %d changed, want 3/3 with 1", res, tot, fewest)
	}
}
