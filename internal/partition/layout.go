package partition

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// maxProfiles bounds the profiles of one model (the tables have 7), so that
// per-profile counts fit a fixed array and pack into a map key.
const maxProfiles = 8

// counts holds instances per profile index of one model.
type counts [maxProfiles]uint8

// key packs counts into 4 bits each (a GPU holds at most 7 instances of a
// profile, fewer than 16).
func (c counts) key() uint32 {
	var k uint32
	for i, n := range c {
		k |= uint32(n&0xf) << (4 * i)
	}
	return k
}

// modelIndex is one model's profile table arranged for the search: masks of
// every placement, a largest-first order, and the best fill of every free
// mask. All of it is derived from gpucatalog; nothing here is a second table.
type modelIndex struct {
	pos      int
	name     string
	profiles []gpucatalog.Profile
	byName   map[string]int
	masks    [][]uint8 // masks[p][k] is placement k of profile p
	order    []int     // profile indexes, most memory slots first
	// bestFill[m] is the most compute slices that fit in the slots free in
	// occupancy mask m; the tie-breaks use it to keep free space usable.
	bestFill [256]uint8
	// largest[m] is the most compute slices of one instance that fits.
	largest [256]uint8
}

var modelIndexes = buildModelIndexes()

func buildModelIndexes() []*modelIndex {
	var out []*modelIndex
	for i, name := range gpucatalog.Models() {
		m, _ := gpucatalog.LookupModel(name)
		mi := &modelIndex{pos: i, name: name, profiles: m.Profiles, byName: map[string]int{}}
		for p, prof := range m.Profiles {
			mi.byName[prof.Name] = p
			masks := make([]uint8, len(prof.Placements))
			for k, pl := range prof.Placements {
				masks[k] = pl.Mask()
			}
			mi.masks = append(mi.masks, masks)
			mi.order = append(mi.order, p)
		}
		slices.SortStableFunc(mi.order, func(a, b int) int {
			pa, pb := m.Profiles[a], m.Profiles[b]
			return cmp.Or(cmp.Compare(pb.MemorySlices, pa.MemorySlices), cmp.Compare(pb.ComputeSlices, pa.ComputeSlices))
		})
		mi.fillTables()
		out = append(out, mi)
	}
	return out
}

func (m *modelIndex) fillTables() {
	// Masks with more occupied slots depend only on supersets, so walk from
	// the full mask down.
	for mask := 255; mask >= 0; mask-- {
		best, largest := 0, 0
		for p, prof := range m.profiles {
			for _, pm := range m.masks[p] {
				if uint8(mask)&pm != 0 {
					continue
				}
				largest = max(largest, prof.ComputeSlices)
				best = max(best, prof.ComputeSlices+int(m.bestFill[uint8(mask)|pm]))
			}
		}
		m.bestFill[mask] = uint8(min(best, gpucatalog.ComputeSlices))
		m.largest[mask] = uint8(largest)
	}
}

func modelByName(name string) *modelIndex {
	for _, m := range modelIndexes {
		if m.name == name {
			return m
		}
	}
	return nil
}

// placed is an instance with a resolved placement.
type placed struct {
	prof     int
	start    int
	mask     uint8
	inferred bool
}

// resolve checks a GPU's instances against the table and gives every
// instance of unknown placement a valid one. It reports all problems.
func (m *modelIndex) resolve(insts []Instance) ([]placed, error) {
	var errs []error
	out := make([]placed, len(insts))
	var used uint8
	var n counts
	var unknown []int
	for i, in := range insts {
		p, ok := m.byName[in.Profile]
		if !ok {
			errs = append(errs, fmt.Errorf("instances[%d]: model %s has no profile %q", i, m.name, in.Profile))
			continue
		}
		out[i].prof = p
		n[p]++
		if in.Start == nil {
			unknown = append(unknown, i)
			continue
		}
		k := slices.Index(m.starts(p), *in.Start)
		if k < 0 {
			errs = append(errs, fmt.Errorf("instances[%d]: %s cannot start at slot %d (valid: %v)", i, in.Profile, *in.Start, m.starts(p)))
			continue
		}
		pm := m.masks[p][k]
		if used&pm != 0 {
			errs = append(errs, fmt.Errorf("instances[%d]: %s at slot %d overlaps another instance", i, in.Profile, *in.Start))
			continue
		}
		used |= pm
		out[i] = placed{prof: p, start: *in.Start, mask: pm}
	}
	for p, c := range n {
		if p < len(m.profiles) && int(c) > m.profiles[p].MaxInstances {
			errs = append(errs, fmt.Errorf("%d instances of %s, at most %d fit", c, m.profiles[p].Name, m.profiles[p].MaxInstances))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(unknown) > 0 {
		items := make([]int, len(unknown))
		for k, i := range unknown {
			items[k] = out[i].prof
		}
		order := m.sortItems(items)
		profs := make([]int, len(order))
		for k, j := range order {
			profs[k] = items[j]
		}
		var starts []int
		m.assignItems(used, profs, func(s []int) bool { starts = slices.Clone(s); return false })
		if starts == nil {
			return nil, fmt.Errorf("%d instances of unknown placement fit no valid layout beside the others", len(unknown))
		}
		for k, j := range order {
			i := unknown[j]
			p := out[i].prof
			out[i] = placed{prof: p, start: starts[k], mask: m.maskAt(p, starts[k]), inferred: true}
		}
	}
	return out, nil
}

func (m *modelIndex) starts(p int) []int {
	s := make([]int, len(m.profiles[p].Placements))
	for k, pl := range m.profiles[p].Placements {
		s[k] = pl.Start
	}
	return s
}

func (m *modelIndex) maskAt(p, start int) uint8 {
	for k, pl := range m.profiles[p].Placements {
		if pl.Start == start {
			return m.masks[p][k]
		}
	}
	return 0
}

// sortItems returns the positions of items (profile indexes) largest first,
// equal profiles adjacent, so the search places big instances first and can
// skip permutations of identical ones.
func (m *modelIndex) sortItems(items []int) []int {
	rank := make([]int, len(m.profiles))
	for r, p := range m.order {
		rank[p] = r
	}
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rank[items[a]], rank[items[b]]) })
	return order
}

// assignItems enumerates placements for profs (profile indexes, equal ones
// adjacent) in the slots free in used, calling fn with each item's start
// until fn returns false. Identical neighbours take increasing placements so
// each layout is visited once.
func (m *modelIndex) assignItems(used uint8, profs []int, fn func(starts []int) bool) {
	starts := make([]int, len(profs))
	var rec func(k int, used uint8, minK int) bool
	rec = func(k int, used uint8, minK int) bool {
		if k == len(profs) {
			return fn(starts)
		}
		p := profs[k]
		for j := minK; j < len(m.masks[p]); j++ {
			pm := m.masks[p][j]
			if used&pm != 0 {
				continue
			}
			starts[k] = m.profiles[p].Placements[j].Start
			next := 0
			if k+1 < len(profs) && profs[k+1] == p {
				next = j + 1
			}
			if !rec(k+1, used|pm, next) {
				return false
			}
		}
		return true
	}
	rec(0, used, 0)
}

// expand lists the instances of c as profile indexes, largest first.
func (m *modelIndex) expand(c counts) []int {
	var out []int
	for _, p := range m.order {
		for range c[p] {
			out = append(out, p)
		}
	}
	return out
}

// fits reports whether the instances of add can all be placed in the slots
// free in used.
func (m *modelIndex) fits(used uint8, add counts) bool {
	ok := false
	m.assignItems(used, m.expand(add), func([]int) bool { ok = true; return false })
	return ok
}
