package partition

import (
	"math/rand"
	"slices"
	"testing"

	"github.com/gpumeter/gpumeter/collectors/migprofile"
)

// bruteFits places profiles (any order) beside the occupied slots by trying
// every placement: an independent check that shares no code with the planner.
func bruteFits(model string, used uint8, profiles []string) bool {
	if len(profiles) == 0 {
		return true
	}
	p, _ := migprofile.Lookup(model, profiles[0])
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
			p, _ := migprofile.Lookup(g.Model, in.Profile)
			used |= migprofile.Placement{Start: *in.Start, Size: p.MemorySlices}.Mask()
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
		p, _ := migprofile.Lookup(g.Model, profs[i])
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

// optimum is the best demand any combination of layouts meets, as
// (reserved, total) compute slices, and the fewest GPUs changed to meet it.
func optimum(fleet Fleet, demand Demand) (bestRes, bestTot, fewest int) {
	reserved, pending := map[dkey]int{}, map[dkey]int{}
	demanded := map[string][]string{}
	for _, td := range demand.Tenants {
		for _, r := range td.Reserved {
			reserved[dkey{td.Tenant, r.Model, r.Profile}] += r.Count
		}
		for _, r := range td.Pending {
			pending[dkey{td.Tenant, r.Model, r.Profile}] += r.Count
		}
		for _, r := range append(slices.Clone(td.Reserved), td.Pending...) {
			if !slices.Contains(demanded[r.Model], r.Profile) {
				demanded[r.Model] = append(demanded[r.Model], r.Profile)
			}
		}
	}
	busyHeld := map[dkey]int{}
	for _, g := range fleet.GPUs {
		for _, in := range g.Instances {
			if in.Busy {
				busyHeld[dkey{in.Tenant, g.Model, in.Profile}]++
			}
		}
	}
	// What supply cannot change is computed once per model/profile: the
	// demand busy instances meet, and what is left for idle or new ones.
	type term struct{ w, r, t, restR, restT int }
	index := map[[2]string]int{}
	var terms []term
	add := func(k dkey) {
		mp := [2]string{k.model, k.profile}
		if _, ok := index[mp]; !ok {
			index[mp] = len(terms)
			terms = append(terms, term{w: profileSlices(k.model, k.profile)})
		}
	}
	for k := range reserved {
		add(k)
	}
	for k := range pending {
		add(k)
	}
	seen := map[dkey]bool{}
	for _, m := range []map[dkey]int{reserved, pending} {
		for k := range m {
			if seen[k] {
				continue
			}
			seen[k] = true
			tm := &terms[index[[2]string{k.model, k.profile}]]
			b := busyHeld[k]
			tm.r += min(b, reserved[k])
			tm.t += min(b, reserved[k]+pending[k])
			tm.restR += max(0, reserved[k]-b)
			tm.restT += max(0, reserved[k]+pending[k]-b)
		}
	}
	supply := make([]int, len(terms))
	score := func() (res, tot int) {
		for i, tm := range terms {
			res += tm.w * (tm.r + min(supply[i], tm.restR))
			tot += tm.w * (tm.t + min(supply[i], tm.restT))
		}
		return res, tot
	}
	type delta struct {
		add     [][2]int // term index, count
		changed bool
	}
	opts := make([][]delta, len(fleet.GPUs))
	for i, g := range fleet.GPUs {
		for _, o := range gpuOptions(g, demanded) {
			d := delta{changed: o.changed}
			for mp, n := range o.supply {
				if k, ok := index[mp]; ok {
					d.add = append(d.add, [2]int{k, n})
				}
			}
			opts[i] = append(opts[i], d)
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
			for _, a := range o.add {
				supply[a[0]] += a[1]
			}
			c := changed
			if o.changed {
				c++
			}
			rec(i+1, c)
			for _, a := range o.add {
				supply[a[0]] -= a[1]
			}
		}
	}
	rec(0, 0)
	return bestRes, bestTot, fewest
}

// achieved measures a plan the way optimum does: instances labelled with a
// tenant serve that tenant, reserved first.
func achieved(fleet Fleet, demand Demand, plan Plan) (res, tot int) {
	held := map[dkey]int{}
	for _, g := range plan.GPUs {
		for _, in := range g.Instances {
			if in.Tenant != "" {
				held[dkey{in.Tenant, g.Model, in.Profile}]++
			}
		}
	}
	reserved, pending := map[dkey]int{}, map[dkey]int{}
	for _, td := range demand.Tenants {
		for _, r := range td.Reserved {
			reserved[dkey{td.Tenant, r.Model, r.Profile}] += r.Count
		}
		for _, r := range td.Pending {
			pending[dkey{td.Tenant, r.Model, r.Profile}] += r.Count
		}
	}
	for k, n := range held {
		w := profileSlices(k.model, k.profile)
		res += w * min(n, reserved[k])
		tot += w * min(n, reserved[k]+pending[k])
	}
	return res, tot
}

// On small fleets the planner is compared with exhaustive search over every
// combination of layouts. The gap is reported; the test fails if the planner
// claims more than the optimum (a bug in one of them) or falls short of it
// more often than the documented bound.
func TestSolveAgainstExhaustiveSearch(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	const cases = 400
	var (
		exact, resGap, totGap, changeGap int
		gapSlices, optSlices             int
	)
	for i := range cases {
		models := []string{migprofile.Models()[r.Intn(4)]}
		if r.Intn(4) == 0 {
			models = append(models, migprofile.Models()[r.Intn(4)])
		}
		cfg := genConfig{gpus: 1 + r.Intn(3), tenants: 1 + r.Intn(3), models: models, busyPct: 35,
			maxExisting: 4, maxRequests: 2, maxCount: 3}
		fleet, demand := genFleet(r, cfg), genDemand(r, cfg)
		plan, err := Solve(fleet, demand)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		checkPlan(t, fleet, demand, plan)
		res, tot := achieved(fleet, demand, plan)
		optRes, optTot, fewest := optimum(fleet, demand)
		optSlices += optTot
		switch {
		case res > optRes || (res == optRes && tot > optTot):
			t.Errorf("case %d: planner meets %d/%d slices, above the optimum %d/%d\nfleet %+v\ndemand %+v", i, res, tot, optRes, optTot, fleet, demand)
		case res < optRes:
			resGap++
			gapSlices += optTot - tot
			t.Logf("case %d: reserved gap %d slices (planner %d, optimum %d)", i, optRes-res, res, optRes)
		case tot < optTot:
			totGap++
			gapSlices += optTot - tot
			t.Logf("case %d: pending gap %d slices (planner %d, optimum %d)", i, optTot-tot, tot, optTot)
		default:
			exact++
			if plan.Summary.GPUsChanged > fewest {
				changeGap++
				t.Logf("case %d: optimum demand with %d GPUs changed, %d would do", i, plan.Summary.GPUsChanged, fewest)
			}
		}
	}
	t.Logf("exhaustive comparison, %d cases: optimum met in %d; reserved short in %d, pending short in %d (%d of %d slices); more GPUs changed than needed in %d",
		cases, exact, resGap, totGap, gapSlices, optSlices, changeGap)
	// Bounds a little above what this seed measures (docs/partition.md has
	// the figures): a change to the planner that does worse fails here.
	if resGap > cases/200 {
		t.Errorf("reserved demand short of the optimum in %d cases, want at most %d", resGap, cases/200)
	}
	if totGap > cases*3/100 {
		t.Errorf("pending demand short of the optimum in %d cases, want at most %d", totGap, cases*3/100)
	}
	if gapSlices*100 > optSlices {
		t.Errorf("planner short of the optimum by %d of %d slices, want at most 1%%", gapSlices, optSlices)
	}
	if changeGap > cases/50 {
		t.Errorf("more GPUs changed than needed in %d cases, want at most %d", changeGap, cases/50)
	}
}

func TestExhaustiveSearchFindsKnownOptimum(t *testing.T) {
	// The reference itself must be able to fail: a busy 1g at slot 3 leaves
	// room for one 3g (at 4) and three more 1g; asking for 3g+4g can meet 3.
	fleet := Fleet{GPUs: []GPU{{UUID: "g", Model: migprofile.H100SXM5_80GB, Instances: []Instance{
		{Profile: "1g.10gb", Start: ptr(3), UUID: "m", Tenant: "x", Busy: true},
	}}}}
	demand := oneTenant(migprofile.H100SXM5_80GB, Request{Profile: "3g.40gb", Count: 1}, Request{Profile: "4g.40gb", Count: 1})
	res, tot, fewest := optimum(fleet, demand)
	if res != 3 || tot != 3 || fewest != 1 {
		t.Errorf("optimum = %d/%d with %d changed, want 3/3 with 1", res, tot, fewest)
	}
}
