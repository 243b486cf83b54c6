package partition

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// maxImprovePasses bounds the local search, which stops as soon as a pass
// moves nothing.
const maxImprovePasses = 10

// Solve plans a target MIG layout for every GPU of the fleet. The objective,
// in order: the most reserved demand met, then the most demand met overall
// (both weighed in compute slices, the gpucatalog GPU-equivalent weights),
// then the fewest GPUs changed, then the fewest instances created or
// destroyed. Busy instances are never moved, removed or reassigned.
//
// Strategy (docs/partition.md has the long form):
//  1. Busy instances count for their tenant. Idle instances are a pool:
//     tenant labels move freely, only creating and destroying is a change.
//  2. Best-fit decreasing: demand the current instances leave unmet becomes
//     new instances, reserved before pending, largest first, each put on a
//     GPU already being changed if one has room, else on the tightest fit
//     (or the emptiest GPU: see below). Room is decided by an exact search
//     over NVIDIA's placements for the whole set of instances added to that
//     GPU, not by the first free slot.
//  3. Local search: each GPU in turn takes the layout (any multiset of
//     demanded profiles that fits beside its busy instances) that improves
//     the objective most given every other GPU, with one-instance ejections
//     to another GPU and a consolidation step, until no GPU improves. This
//     undoes idle instances that block larger reserved demand.
//  4. Each changed GPU gets placements that reuse the most existing idle
//     instances in place and leave the most usable free space; then tenants
//     are matched to instances, an instance's previous tenant first.
//
// Invalid input returns an error and no plan. Work and memory are bounded
// by the fleet: demand beyond what the fleet could hold of a profile is
// reported unmet without being expanded into instances to place.
func Solve(fleet Fleet, demand Demand) (Plan, error) {
	return SolveContext(context.Background(), fleet, demand)
}

// SolveContext is Solve that gives up when ctx is done: the search checks
// ctx before each new instance it places and each GPU it revisits, and then
// returns ctx.Err() (wrapped) and no plan. Invalid input is reported first.
func SolveContext(ctx context.Context, fleet Fleet, demand Demand) (Plan, error) {
	if err := errors.Join(fleet.Validate(), demand.Validate()); err != nil {
		return Plan{}, fmt.Errorf("plan mig layouts: %w", err)
	}
	// The search breaks ties by position, so it runs on one canonical
	// order: listing the same GPUs or requests differently gives the same plan.
	cf, cd, order := canonical(fleet, demand)
	plan, err := search(ctx, cf, cd)
	if err != nil {
		return Plan{}, fmt.Errorf("plan mig layouts: %w", err)
	}
	return inInputOrder(plan, order), nil
}

func search(ctx context.Context, fleet Fleet, demand Demand) (Plan, error) {
	if err := ctx.Err(); err != nil {
		return Plan{}, err
	}
	// Two ways to pick a GPU to open for new instances: the tightest fit,
	// which wastes the least space, and the emptiest, which lets the next
	// instances join it rather than open more GPUs. Neither wins everywhere
	// (docs/partition.md); the search runs both and keeps the better plan.
	var best Plan
	for i, fill := range []bool{false, true} {
		s := newSolver(fleet, demand)
		s.fill = fill
		s.holdBusy()
		s.aggregate()
		if err := s.placeNew(ctx); err != nil {
			return Plan{}, err
		}
		if err := s.improve(ctx); err != nil {
			return Plan{}, err
		}
		moved, err := s.consolidate(ctx)
		if err != nil {
			return Plan{}, err
		}
		if moved {
			if err := s.improve(ctx); err != nil {
				return Plan{}, err
			}
		}
		if p := s.result(); i == 0 || better(p.Summary, best.Summary) {
			best = p
		}
	}
	return best, nil
}

// better orders plans by the objective of Solve.
func better(a, b Summary) bool {
	return less(
		[]int{-a.ReservedMetSlices, -(a.ReservedMetSlices + a.PendingMetSlices), a.GPUsChanged, a.Created + a.Destroyed},
		[]int{-b.ReservedMetSlices, -(b.ReservedMetSlices + b.PendingMetSlices), b.GPUsChanged, b.Created + b.Destroyed})
}

type want struct {
	tenant    string
	class     Class
	model     string // "" = any model with the profile
	profile   string
	slices    int
	remaining int
	total     int
	unmet     map[string]int // reason → count
}

type existing struct {
	in     Instance
	placed placed
}

type gpuState struct {
	idx      int
	g        *GPU
	m        *modelIndex
	insts    []existing
	busy     uint8  // slots of busy instances
	busyN    counts // busy instances per profile
	occupied uint8  // slots of all existing instances
	current  counts // idle instances per profile
	// target is the planned multiset of non-busy instances of demanded
	// profiles; instances of other profiles stay if nothing needs their slots.
	target  counts
	changed bool
	// addMask marks the demanded profiles the GPU could take one more of;
	// addCounted is the changed flag it was counted under.
	addMask    uint8
	addCounted bool
}

// base is the target that changes nothing: the idle instances of demanded
// profiles as they are.
func (g *gpuState) base(demanded uint8) counts {
	var c counts
	for p := range g.m.profiles {
		if demanded&(1<<p) != 0 {
			c[p] = g.current[p]
		}
	}
	return c
}

// pair names one profile of one model.
type pair struct{ m, p int }

// nameDemand is the demand for one profile name, summed over tenants, after
// busy instances took their share. Tenants do not matter for the layout;
// they are matched to instances at the end.
type nameDemand struct {
	name        string
	slices, mem int
	pairs       []pair
	ar, ap      int // any-model reserved, pending
}

type solver struct {
	gpus     []*gpuState
	wants    []*want
	byTenant map[string][]*want
	names    []*nameDemand
	namesOf  [][]*nameDemand // per model position, the names it offers
	byName   map[string]*nameDemand
	er, ep   [][maxProfiles]int // explicit-model reserved, pending, by model position
	supply   [][maxProfiles]int // planned non-busy instances, by model position
	demanded []uint8            // per model position, profiles anyone asked for
	fitCache map[uint64]bool
	optCache map[optKey][]counts
	// addable[m][p] counts the GPUs of model m that could take one more
	// instance of p; addableChanged those among them already changed.
	addable, addableChanged [][maxProfiles]int
	// fill opens the emptiest GPU for new instances instead of the tightest.
	fill bool
}

type optKey struct {
	model, busy, demanded uint8
	busyN                 uint32
}

func newSolver(f Fleet, d Demand) *solver {
	n := len(modelIndexes)
	s := &solver{byTenant: map[string][]*want{}, byName: map[string]*nameDemand{},
		er: make([][maxProfiles]int, n), ep: make([][maxProfiles]int, n), supply: make([][maxProfiles]int, n),
		demanded: make([]uint8, n), namesOf: make([][]*nameDemand, n), fitCache: map[uint64]bool{}, optCache: map[optKey][]counts{},
		addable: make([][maxProfiles]int, n), addableChanged: make([][maxProfiles]int, n)}
	for i := range f.GPUs {
		g := &f.GPUs[i]
		st := &gpuState{idx: i, g: g, m: modelByName(g.Model)}
		if !g.MIGDisabled {
			pl, _ := st.m.resolve(g.Instances) // Validate passed, so this cannot fail
			for k, in := range g.Instances {
				st.insts = append(st.insts, existing{in: in, placed: pl[k]})
				st.occupied |= pl[k].mask
				if in.Busy {
					st.busy |= pl[k].mask
					st.busyN[pl[k].prof]++
				} else {
					st.current[pl[k].prof]++
				}
			}
		}
		s.gpus = append(s.gpus, st)
	}
	for _, t := range d.Tenants {
		for _, c := range []struct {
			class Class
			reqs  []Request
		}{{Reserved, t.Reserved}, {Pending, t.Pending}} {
			for _, r := range c.reqs {
				if w := s.exactWant(t.Tenant, c.class, r.Model, r.Profile); w != nil {
					w.total += r.Count
					w.remaining += r.Count
					continue
				}
				w := &want{tenant: t.Tenant, class: c.class, model: r.Model, profile: r.Profile,
					slices: profileSlices(r.Model, r.Profile), total: r.Count, remaining: r.Count, unmet: map[string]int{}}
				s.wants = append(s.wants, w)
				s.byTenant[t.Tenant] = append(s.byTenant[t.Tenant], w)
				s.nameDemand(r.Profile)
			}
		}
	}
	slices.SortFunc(s.names, func(a, b *nameDemand) int { return strings.Compare(a.name, b.name) })
	for _, nd := range s.names {
		for _, pr := range nd.pairs {
			s.namesOf[pr.m] = append(s.namesOf[pr.m], nd)
		}
	}
	return s
}

func (s *solver) exactWant(tenant string, class Class, model, profile string) *want {
	for _, w := range s.byTenant[tenant] {
		if w.class == class && w.model == model && w.profile == profile {
			return w
		}
	}
	return nil
}

func (s *solver) nameDemand(profile string) *nameDemand {
	if nd := s.byName[profile]; nd != nil {
		return nd
	}
	nd := &nameDemand{name: profile, slices: profileSlices("", profile), mem: profileMemory("", profile)}
	for _, m := range modelIndexes {
		if p, ok := m.byName[profile]; ok {
			nd.pairs = append(nd.pairs, pair{m.pos, p})
			s.demanded[m.pos] |= 1 << p
		}
	}
	s.byName[profile] = nd
	s.names = append(s.names, nd)
	return nd
}

// serves returns the tenant's open want of a class that an instance of
// profile on model can serve, preferring one that names the model.
func (s *solver) serves(tenant string, class Class, model, profile string) *want {
	var anyModel *want
	for _, w := range s.byTenant[tenant] {
		if w.class != class || w.profile != profile || w.remaining == 0 {
			continue
		}
		if w.model == model {
			return w
		}
		if w.model == "" && anyModel == nil {
			anyModel = w
		}
	}
	return anyModel
}

// holdBusy lets busy instances count for their tenant, reserved first.
func (s *solver) holdBusy() {
	for _, g := range s.gpus {
		for _, e := range g.insts {
			if !e.in.Busy || e.in.Tenant == "" {
				continue
			}
			for _, class := range []Class{Reserved, Pending} {
				if w := s.serves(e.in.Tenant, class, g.m.name, e.in.Profile); w != nil {
					w.remaining--
					break
				}
			}
		}
	}
}

// aggregate sums what busy instances left of the demand, by model and
// profile, and starts every GPU from its current layout.
func (s *solver) aggregate() {
	for _, w := range s.wants {
		if w.model == "" {
			nd := s.byName[w.profile]
			if w.class == Reserved {
				nd.ar += w.remaining
			} else {
				nd.ap += w.remaining
			}
			continue
		}
		m := modelByName(w.model)
		p := m.byName[w.profile]
		if w.class == Reserved {
			s.er[m.pos][p] += w.remaining
		} else {
			s.ep[m.pos][p] += w.remaining
		}
	}
	for _, g := range s.gpus {
		if g.g.MIGDisabled {
			continue
		}
		g.target = g.base(s.demanded[g.m.pos])
		s.addSupply(g.m.pos, g.target, 1)
	}
}

func (s *solver) addSupply(model int, c counts, sign int) {
	for p, n := range c {
		s.supply[model][p] += sign * int(n)
	}
}

// value is the demand met by the planned supply, for the profile names of
// one model (or all names when model < 0), in compute slices: reserved, and
// reserved plus pending. Explicit-model demand is served from its model's
// instances first; any-model demand takes what is left anywhere. Reserved
// and total are maximal together (the demand a supply can serve forms a
// matroid), so one matching realises both; result() builds it.
func (s *solver) value(model int) (res, tot int) {
	names := s.names
	if model >= 0 {
		names = s.namesOf[model]
	}
	for _, nd := range names {
		var r, t, slackR, slackT int
		for _, pr := range nd.pairs {
			sup := s.supply[pr.m][pr.p]
			er, et := s.er[pr.m][pr.p], s.er[pr.m][pr.p]+s.ep[pr.m][pr.p]
			r += min(sup, er)
			t += min(sup, et)
			slackR += max(0, sup-er)
			slackT += max(0, sup-et)
		}
		res += nd.slices * (r + min(slackR, nd.ar))
		tot += nd.slices * (t + min(slackT, nd.ar+nd.ap))
	}
	return res, tot
}

// bucketKey groups GPUs whose states are interchangeable for placement, so
// a decision looks at distinct states, not at every GPU.
type bucketKey struct {
	occupied        uint8
	existing, added uint32
	changed         bool
}

type bucket struct {
	key  bucketKey
	g    *gpuState // a member; all members share the key's state
	gpus []int     // sorted GPU indexes
	n    counts    // busy and idle instances of the members
	add  counts
}

type unit struct {
	class Class
	model int // model position, -1 for any model
	nd    *nameDemand
}

// newUnits lists the new instances placeNew tries to place: demand the
// current instances leave unmet, one unit per instance, in order of
// placement. A run of one class, profile and model is cut at what the fleet
// could hold beside its current instances (room), since the units of a run
// are placed in turn and one that finds no GPU leaves the next nowhere to
// go either: the plan is the same as with every unit, and memory and time
// do not grow with the count asked for.
func (s *solver) newUnits() []unit {
	room := s.room()
	var units []unit
	emit := func(n, limit int, u unit) {
		for range min(n, limit) {
			units = append(units, u)
		}
	}
	for _, nd := range s.names {
		left := map[int]int{}
		anyRoom := 0
		for _, pr := range nd.pairs {
			left[pr.m] = s.supply[pr.m][pr.p]
			anyRoom += room[pr.m][pr.p]
		}
		// The same order of service as value(): explicit reserved, any
		// reserved, explicit pending, any pending.
		unmetAny := func(need int) int {
			for _, pr := range nd.pairs {
				take := min(need, left[pr.m])
				left[pr.m] -= take
				need -= take
			}
			return need
		}
		for _, pr := range nd.pairs {
			take := min(left[pr.m], s.er[pr.m][pr.p])
			left[pr.m] -= take
			emit(s.er[pr.m][pr.p]-take, room[pr.m][pr.p], unit{Reserved, pr.m, nd})
		}
		emit(unmetAny(nd.ar), anyRoom, unit{Reserved, -1, nd})
		for _, pr := range nd.pairs {
			take := min(left[pr.m], s.ep[pr.m][pr.p])
			left[pr.m] -= take
			emit(s.ep[pr.m][pr.p]-take, room[pr.m][pr.p], unit{Pending, pr.m, nd})
		}
		emit(unmetAny(nd.ap), anyRoom, unit{Pending, -1, nd})
	}
	classRank := map[Class]int{Reserved: 0, Pending: 1}
	slices.SortStableFunc(units, func(a, b unit) int {
		return cmp.Or(
			cmp.Compare(classRank[a.class], classRank[b.class]),
			cmp.Compare(b.nd.slices, a.nd.slices),
			cmp.Compare(b.nd.mem, a.nd.mem),
			strings.Compare(a.nd.name, b.nd.name),
			cmp.Compare(a.model, b.model),
		)
	})
	return units
}

// room counts, per model position and profile, the instances placeNew could
// add to the fleet at most: on each GPU with MIG on, the profile's instance
// limit less the instances of it there already. placeNew destroys nothing,
// so no run of units places more.
func (s *solver) room() [][maxProfiles]int {
	room := make([][maxProfiles]int, len(modelIndexes))
	for _, g := range s.gpus {
		if g.g.MIGDisabled {
			continue
		}
		for p, prof := range g.m.profiles {
			room[g.m.pos][p] += max(0, prof.MaxInstances-int(g.busyN[p])-int(g.current[p]))
		}
	}
	return room
}

// placeNew turns demand the current instances leave unmet into new
// instances, best-fit decreasing, without destroying anything (step 2).
// It checks ctx before each unit.
func (s *solver) placeNew(ctx context.Context) error {
	units := s.newUnits()
	buckets := make([]map[bucketKey]*bucket, len(modelIndexes))
	added := make([]counts, len(s.gpus))
	for i := range buckets {
		buckets[i] = map[bucketKey]*bucket{}
	}
	for _, g := range s.gpus {
		if !g.g.MIGDisabled {
			s.addToBucket(buckets, g, added[g.idx])
		}
	}
	for _, u := range units {
		if err := ctx.Err(); err != nil {
			return err
		}
		var (
			best      *bucket
			bestScore [3]int
		)
		for _, pr := range u.nd.pairs {
			if u.model >= 0 && pr.m != u.model {
				continue
			}
			for _, b := range buckets[pr.m] {
				score, ok := s.evaluate(b, pr.p)
				if !ok {
					continue
				}
				score[2] = b.gpus[0]
				if best == nil || less(score[:], bestScore[:]) {
					best, bestScore = b, score
				}
			}
		}
		if best == nil {
			continue // the local search may still find room; else it stays unmet
		}
		g := s.gpus[best.gpus[0]]
		s.removeFromBucket(buckets, best)
		p := g.m.byName[u.nd.name]
		added[g.idx][p]++
		g.target[p]++
		g.changed = true
		s.supply[g.m.pos][p]++
		s.addToBucket(buckets, g, added[g.idx])
	}
	return nil
}

func less(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// evaluate scores adding one instance of profile p to a bucket's GPUs:
// lower is better, by (GPU not yet changed, compute slices left free; most
// left free first for an unchanged GPU when s.fill).
func (s *solver) evaluate(b *bucket, p int) (score [3]int, ok bool) {
	m := b.g.m
	add := b.add
	add[p]++
	if int(b.n[p])+int(add[p]) > m.profiles[p].MaxInstances {
		return score, false
	}
	used := compute(m, b.n) + compute(m, add)
	if used > gpucatalog.ComputeSlices || !s.fits(m, b.key.occupied, add) {
		return score, false
	}
	score[1] = gpucatalog.ComputeSlices - used
	if !b.key.changed {
		score[0] = 1
		if s.fill {
			score[1] = -score[1]
		}
	}
	return score, true
}

func compute(m *modelIndex, c counts) int {
	n := 0
	for p, k := range c {
		if k > 0 {
			n += int(k) * m.profiles[p].ComputeSlices
		}
	}
	return n
}

func (s *solver) fits(m *modelIndex, used uint8, add counts) bool {
	k := uint64(m.pos)<<40 | uint64(used)<<32 | uint64(add.key())
	if v, ok := s.fitCache[k]; ok {
		return v
	}
	v := m.fits(used, add)
	s.fitCache[k] = v
	return v
}

func (s *solver) addToBucket(buckets []map[bucketKey]*bucket, g *gpuState, add counts) {
	n := g.busyN
	for p, c := range g.current {
		n[p] += c
	}
	k := bucketKey{g.occupied, n.key(), add.key(), g.changed}
	mb := buckets[g.m.pos]
	b := mb[k]
	if b == nil {
		mb[k] = &bucket{key: k, g: g, gpus: []int{g.idx}, n: n, add: add}
		return
	}
	i, _ := slices.BinarySearch(b.gpus, g.idx)
	b.gpus = slices.Insert(b.gpus, i, g.idx)
}

func (s *solver) removeFromBucket(buckets []map[bucketKey]*bucket, b *bucket) {
	b.gpus = b.gpus[1:]
	if len(b.gpus) == 0 {
		delete(buckets[b.g.m.pos], b.key)
		return
	}
	b.g = s.gpus[b.gpus[0]]
}

// improve is the local search (step 3): every GPU in turn takes its best
// layout given the others, until a pass changes nothing. It checks ctx
// before each GPU.
func (s *solver) improve(ctx context.Context) error {
	for _, g := range s.gpus {
		if !g.g.MIGDisabled {
			s.setAddable(g)
		}
	}
	for range maxImprovePasses {
		moved := false
		for _, g := range s.gpus {
			if err := ctx.Err(); err != nil {
				return err
			}
			if !g.g.MIGDisabled && s.bestResponse(g) {
				moved = true
			}
		}
		if !moved {
			return nil
		}
	}
	return nil
}

// bestResponse replaces a GPU's target with the best one: most reserved
// demand met, then most demand met, then fewest GPUs changed, then closest
// to the current layout. It keeps the present target unless another is
// strictly better, and reports whether anything moved.
//
// Besides the GPU's own options it tries ejections: give up one instance
// that another GPU of the model can take without dropping anything, to make
// room here. That is the cheapest move that swaps work between two GPUs,
// which a one-GPU-at-a-time search cannot do otherwise.
func (s *solver) bestResponse(g *gpuState) bool {
	m := g.m
	demanded := s.demanded[m.pos]
	if demanded == 0 {
		return false
	}
	base := g.base(demanded)
	s.unsetAddable(g)
	defer s.setAddable(g)
	score := func(supply, c counts, extraChanged int) [4]int {
		s.addSupply(m.pos, supply, 1)
		res, tot := s.value(m.pos)
		s.addSupply(m.pos, supply, -1)
		changed, diff := extraChanged, 0
		if c != base {
			changed++
		}
		for p := range c {
			diff += max(int(c[p])-int(base[p]), int(base[p])-int(c[p]))
		}
		return [4]int{-res, -tot, changed, diff}
	}
	cur := g.target
	s.addSupply(m.pos, cur, -1)
	noEject := pair{-1, -1}
	best, bestScore, eject := cur, score(cur, cur, 0), noEject
	for _, c := range s.options(g, demanded) {
		if sc := score(c, c, 0); less(sc[:], bestScore[:]) {
			best, bestScore, eject = c, sc, noEject
		}
		lost, lostN := -1, 0
		for p := range c {
			if c[p] < cur[p] {
				lost, lostN = p, lostN+int(cur[p]-c[p])
			}
		}
		if lostN != 1 {
			continue
		}
		// The instance may go to a GPU of any model with a profile of the
		// same name: any-model demand is served there as well (value()
		// counts it), and an A100's 1g.10gb often has to make room by
		// moving to an H100's 1g.10gb.
		for _, pr := range s.byName[m.profiles[lost].Name].pairs {
			if s.addable[pr.m][pr.p] == 0 {
				continue
			}
			// Only for more demand met: an ejection churns two GPUs.
			extra := 0
			if s.addableChanged[pr.m][pr.p] == 0 {
				extra = 1
			}
			s.supply[pr.m][pr.p]++
			sc := score(c, c, extra)
			s.supply[pr.m][pr.p]--
			if less(sc[:2], bestScore[:2]) {
				best, bestScore, eject = c, sc, pr
			}
		}
	}
	s.addSupply(m.pos, best, 1)
	moved := best != cur
	g.target, g.changed = best, best != base
	if eject != noEject {
		s.absorbInto(s.absorber(g, eject, false), eject.p)
	}
	return moved
}

// absorber finds a GPU other than g, of the model and profile of at, that
// can take one more instance, preferring (or, with changedOnly, requiring)
// one already changed.
func (s *solver) absorber(g *gpuState, at pair, changedOnly bool) *gpuState {
	var h *gpuState
	for _, o := range s.gpus {
		if o == g || o.m.pos != at.m || o.addMask&(1<<at.p) == 0 || (changedOnly && !o.changed) {
			continue
		}
		if h == nil || (o.changed && !h.changed) {
			h = o
		}
		if h.changed {
			break
		}
	}
	return h
}

func (s *solver) absorbInto(h *gpuState, p int) {
	s.unsetAddable(h)
	h.target[p]++
	s.supply[h.m.pos][p]++
	h.changed = h.target != h.base(s.demanded[h.m.pos])
	s.setAddable(h)
}

// setTarget replaces a GPU's target, keeping supply and the ejection index
// in step.
func (s *solver) setTarget(g *gpuState, c counts) {
	s.unsetAddable(g)
	s.addSupply(g.m.pos, g.target, -1)
	g.target = c
	s.addSupply(g.m.pos, c, 1)
	g.changed = c != g.base(s.demanded[g.m.pos])
	s.setAddable(g)
}

// consolidate tries to leave changed GPUs as they are: it puts a GPU back
// to its current layout and moves the instances that were new on it to
// other changed GPUs with room, keeping the result when no demand is lost.
// It reports whether anything moved, and checks ctx before each GPU.
func (s *solver) consolidate(ctx context.Context) (bool, error) {
	moved := false
	for _, g := range s.gpus {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if g.g.MIGDisabled || !g.changed {
			continue
		}
		res, tot := s.value(-1)
		saved := map[*gpuState]counts{g: g.target}
		base := g.base(s.demanded[g.m.pos])
		lost := g.target
		s.setTarget(g, base)
		for p := range lost {
			for range max(0, int(lost[p])-int(base[p])) {
				h := s.absorber(g, pair{g.m.pos, p}, true)
				if h == nil {
					break
				}
				if _, ok := saved[h]; !ok {
					saved[h] = h.target
				}
				s.absorbInto(h, p)
			}
		}
		if r, t := s.value(-1); r < res || (r == res && t < tot) {
			for h, c := range saved {
				s.setTarget(h, c)
			}
			continue
		}
		moved = true
	}
	return moved, nil
}

// setAddable records which demanded profiles a GPU could take one more of
// beside its target, for the ejection moves; unsetAddable withdraws it.
func (s *solver) setAddable(g *gpuState) {
	s.unsetAddable(g) // idempotent: never count a GPU twice
	m := g.m
	g.addMask, g.addCounted = 0, g.changed
	for p := range m.profiles {
		if s.demanded[m.pos]&(1<<p) == 0 {
			continue
		}
		c := g.target
		c[p]++
		if int(g.busyN[p])+int(c[p]) > m.profiles[p].MaxInstances ||
			compute(m, g.busyN)+compute(m, c) > gpucatalog.ComputeSlices || !s.fits(m, g.busy, c) {
			continue
		}
		g.addMask |= 1 << p
		s.addable[m.pos][p]++
		if g.changed {
			s.addableChanged[m.pos][p]++
		}
	}
}

func (s *solver) unsetAddable(g *gpuState) {
	for p := range g.m.profiles {
		if g.addMask&(1<<p) != 0 {
			s.addable[g.m.pos][p]--
			if g.addCounted {
				s.addableChanged[g.m.pos][p]--
			}
		}
	}
	g.addMask = 0
}

// options lists every multiset of demanded profiles that fits beside a
// GPU's busy instances. GPUs with the same busy layout share the list.
func (s *solver) options(g *gpuState, demanded uint8) []counts {
	k := optKey{uint8(g.m.pos), g.busy, demanded, g.busyN.key()}
	if opts, ok := s.optCache[k]; ok {
		return opts
	}
	m := g.m
	var profs []int
	for _, p := range m.order {
		if demanded&(1<<p) != 0 {
			profs = append(profs, p)
		}
	}
	var opts []counts
	var c counts
	var rec func(i int)
	rec = func(i int) {
		if i == len(profs) {
			opts = append(opts, c)
			return
		}
		p := profs[i]
		for n := 0; int(g.busyN[p])+n <= m.profiles[p].MaxInstances; n++ {
			c[p] = uint8(n)
			if n > 0 && (compute(m, g.busyN)+compute(m, c) > gpucatalog.ComputeSlices || !s.fits(m, g.busy, c)) {
				break
			}
			rec(i + 1)
		}
		c[p] = 0
	}
	rec(0)
	s.optCache[k] = opts
	return opts
}

func (s *solver) unmetReason(w *want) string {
	models := gpucatalog.ModelsWithProfile(w.profile)
	if w.model != "" {
		models = []string{w.model}
	}
	total, on := 0, 0
	for _, g := range s.gpus {
		if slices.Contains(models, g.m.name) {
			total++
			if !g.g.MIGDisabled {
				on++
			}
		}
	}
	names := strings.Join(models, " or ")
	switch {
	case total == 0:
		return fmt.Sprintf("no %s GPU in the fleet", names)
	case on == 0:
		return fmt.Sprintf("every %s GPU has MIG mode disabled", names)
	}
	reason := fmt.Sprintf("no free placement for %s on any %s GPU", w.profile, names)
	if p, ok := gpucatalog.Lookup(models[0], w.profile); ok && p.MaxInstances < len(p.Placements) {
		reason += fmt.Sprintf(" (at most %d per GPU)", p.MaxInstances)
	}
	return reason
}

// planned is an instance of the final layout with where it came from.
type planned struct {
	PlannedInstance
	prof     int
	previous string // the tenant an existing instance had
}

// result builds the plan: placements for changed GPUs (step 4), then the
// matching of tenants to instances.
func (s *solver) result() Plan {
	var plan Plan
	layouts := make([][]*planned, len(s.gpus))
	for _, g := range s.gpus {
		gp := GPUPlan{Host: g.g.Host, UUID: g.g.UUID, Model: g.g.Model, Index: g.g.Index, MIGDisabled: g.g.MIGDisabled}
		var keep []bool
		var created []*planned
		if g.changed {
			keep, created = s.place(g)
		} else {
			keep = make([]bool, len(g.insts))
			for i := range keep {
				keep[i] = true
			}
		}
		for i, e := range g.insts {
			pi := PlannedInstance{Profile: e.in.Profile, Start: e.placed.start, UUID: e.in.UUID,
				Busy: e.in.Busy, Inferred: e.placed.inferred, Tenant: e.in.Tenant}
			if !keep[i] {
				pi.Action = Destroy
				gp.Remove = append(gp.Remove, pi)
				continue
			}
			pi.Action = Keep
			if !e.in.Busy {
				pi.Tenant = "" // matched below
			}
			layouts[g.idx] = append(layouts[g.idx], &planned{PlannedInstance: pi, prof: e.placed.prof, previous: e.in.Tenant})
		}
		layouts[g.idx] = append(layouts[g.idx], created...)
		plan.GPUs = append(plan.GPUs, gp)
	}
	s.match(layouts)
	for i := range s.gpus {
		gp := &plan.GPUs[i]
		for _, pi := range layouts[i] {
			gp.Instances = append(gp.Instances, pi.PlannedInstance)
			switch {
			case pi.Action == Create:
				plan.Summary.Created++
			default:
				plan.Summary.Kept++
				if pi.Tenant != pi.previous {
					plan.Summary.Reassigned++
				}
			}
		}
		plan.Summary.Destroyed += len(gp.Remove)
		slices.SortStableFunc(gp.Instances, func(a, b PlannedInstance) int { return cmp.Compare(a.Start, b.Start) })
		slices.SortStableFunc(gp.Remove, func(a, b PlannedInstance) int { return cmp.Compare(a.Start, b.Start) })
		gp.Changed = len(gp.Remove) > 0 || slices.ContainsFunc(gp.Instances, func(p PlannedInstance) bool { return p.Action == Create })
		if gp.Changed {
			plan.Summary.GPUsChanged++
		}
	}
	plan.Summary.GPUs = len(s.gpus)
	for _, w := range s.wants {
		if w.remaining > 0 {
			w.unmet[s.unmetReason(w)] += w.remaining
		}
		met := (w.total - w.remaining) * w.slices
		if w.class == Reserved {
			plan.Summary.ReservedSlices += w.total * w.slices
			plan.Summary.ReservedMetSlices += met
		} else {
			plan.Summary.PendingSlices += w.total * w.slices
			plan.Summary.PendingMetSlices += met
		}
		for r, n := range w.unmet {
			plan.Unmet = append(plan.Unmet, Unmet{Tenant: w.tenant, Class: w.class, Model: w.model,
				Profile: w.profile, Count: n, Reason: r})
			plan.Summary.UnmetInstanceCount += n
		}
	}
	slices.SortStableFunc(plan.Unmet, func(a, b Unmet) int {
		return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(string(a.Class), string(b.Class)),
			strings.Compare(a.Model, b.Model), strings.Compare(a.Profile, b.Profile), strings.Compare(a.Reason, b.Reason))
	})
	return plan
}

// place picks placements for a changed GPU's target: the assignment that
// creates and destroys the least (reusing idle instances where they are),
// then leaves the most compute placeable, the largest instance placeable
// and the most placements open. Idle instances it does not overlap stay,
// unless keeping them would exceed a profile's instance limit.
func (s *solver) place(g *gpuState) (keep []bool, created []*planned) {
	m := g.m
	profs := m.expand(g.target)
	at := map[[2]int]int{} // profile, start → idle instance
	for i, e := range g.insts {
		if !e.in.Busy {
			at[[2]int{e.placed.prof, e.placed.start}] = i
		}
	}
	var (
		bestStarts []int
		bestKeep   []bool
		bestScore  [4]int
	)
	m.assignItems(g.busy, profs, func(starts []int) bool {
		occupied := g.busy
		n := g.busyN
		keep := make([]bool, len(g.insts))
		churn := 0
		for i, e := range g.insts {
			keep[i] = e.in.Busy
		}
		for k, p := range profs {
			occupied |= m.maskAt(p, starts[k])
			n[p]++
			if i, ok := at[[2]int{p, starts[k]}]; ok {
				keep[i] = true
			} else {
				churn++ // a create
			}
		}
		for i, e := range g.insts {
			if keep[i] {
				continue
			}
			p := e.placed.prof
			if occupied&e.placed.mask != 0 || int(n[p]) >= m.profiles[p].MaxInstances {
				churn++ // a destroy
				continue
			}
			keep[i] = true
			occupied |= e.placed.mask
			n[p]++
		}
		score := [4]int{churn, -int(m.bestFill[occupied]), -int(m.largest[occupied]), -m.openPlacements(occupied)}
		if bestStarts == nil || less(score[:], bestScore[:]) {
			bestStarts, bestKeep, bestScore = slices.Clone(starts), keep, score
		}
		return true
	})
	if bestStarts == nil {
		// Cannot happen: every target was checked to fit beside the busy
		// instances. Should it anyway, leave the GPU as it is.
		keep = make([]bool, len(g.insts))
		for i := range keep {
			keep[i] = true
		}
		return keep, nil
	}
	for k, p := range profs {
		if _, ok := at[[2]int{p, bestStarts[k]}]; ok {
			continue // reused in place
		}
		created = append(created, &planned{
			PlannedInstance: PlannedInstance{Profile: m.profiles[p].Name, Start: bestStarts[k], Action: Create},
			prof:            p,
		})
	}
	return bestKeep, created
}

// openPlacements counts the placements of every profile still free.
func (m *modelIndex) openPlacements(occupied uint8) int {
	n := 0
	for p := range m.profiles {
		for _, pm := range m.masks[p] {
			if occupied&pm == 0 {
				n++
			}
		}
	}
	return n
}

// match gives the non-busy instances of the final layouts to tenants, in
// the order value() counts them: explicit reserved, any-model reserved,
// explicit pending, any-model pending. Within a step an instance goes back
// to its previous tenant when that tenant wants it; the rest is shared out
// one instance per tenant per round.
func (s *solver) match(layouts [][]*planned) {
	pools := make([][maxProfiles][]*planned, len(modelIndexes))
	for i, l := range layouts {
		for _, pi := range l {
			if !pi.Busy {
				pos := s.gpus[i].m.pos
				pools[pos][pi.prof] = append(pools[pos][pi.prof], pi)
			}
		}
	}
	free := func(pool []*planned) int {
		n := 0
		for _, pi := range pool {
			if pi.Tenant == "" {
				n++
			}
		}
		return n
	}
	for _, nd := range s.names {
		for _, class := range []Class{Reserved, Pending} {
			// Explicit-model wants from their model's pool.
			for _, pr := range nd.pairs {
				ws := s.openWants(class, modelIndexes[pr.m].name, nd.name)
				s.distribute(pools[pr.m][pr.p], ws, -1)
			}
			// Any-model wants: first from pools with instances no pending
			// explicit want will need, then from any pool.
			ws := s.openWants(class, "", nd.name)
			if len(ws) == 0 {
				continue
			}
			order := slices.Clone(nd.pairs)
			slack := func(pr pair) int {
				return free(pools[pr.m][pr.p]) - s.openCount(Pending, modelIndexes[pr.m].name, nd.name)
			}
			slices.SortStableFunc(order, func(a, b pair) int { return cmp.Compare(slack(b), slack(a)) })
			for _, pr := range order {
				if sl := slack(pr); sl > 0 && class == Reserved {
					s.distribute(pools[pr.m][pr.p], ws, sl)
				}
			}
			for _, pr := range order {
				s.distribute(pools[pr.m][pr.p], ws, -1)
			}
		}
	}
}

func (s *solver) openWants(class Class, model, profile string) []*want {
	var out []*want
	for _, w := range s.wants {
		if w.class == class && w.model == model && w.profile == profile && w.remaining > 0 {
			out = append(out, w)
		}
	}
	slices.SortStableFunc(out, func(a, b *want) int { return strings.Compare(a.tenant, b.tenant) })
	return out
}

func (s *solver) openCount(class Class, model, profile string) int {
	n := 0
	for _, w := range s.openWants(class, model, profile) {
		n += w.remaining
	}
	return n
}

// distribute hands at most limit (-1: no limit) free instances of a pool to
// wants: previous tenants first, then one per tenant per round.
func (s *solver) distribute(pool []*planned, ws []*want, limit int) {
	give := func(pi *planned, w *want) {
		pi.Tenant = w.tenant
		w.remaining--
		limit--
	}
	for _, pi := range pool {
		if limit == 0 {
			return
		}
		if pi.Tenant != "" || pi.previous == "" {
			continue
		}
		for _, w := range ws {
			if w.tenant == pi.previous && w.remaining > 0 {
				give(pi, w)
				break
			}
		}
	}
	next := 0
	for progress := true; progress && limit != 0; {
		progress = false
		for _, w := range ws {
			if limit == 0 {
				return
			}
			if w.remaining == 0 {
				continue
			}
			for next < len(pool) && pool[next].Tenant != "" {
				next++
			}
			if next == len(pool) {
				return
			}
			give(pool[next], w)
			progress = true
		}
	}
}

func profileMemory(model, profile string) int {
	p, _ := gpucatalog.LookupAnyModel(model, profile)
	return p.MemorySlices
}
