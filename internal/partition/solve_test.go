package partition

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

type slot struct {
	profile string
	start   int
}

func layoutOf(g GPUPlan) []slot {
	var out []slot
	for _, in := range g.Instances {
		out = append(out, slot{in.Profile, in.Start})
	}
	return out
}

func oneTenant(model string, reqs ...Request) Demand {
	for i := range reqs {
		reqs[i].Model = model
	}
	return Demand{Tenants: []TenantDemand{{Tenant: "acme", Reserved: reqs}}}
}

func emptyGPU(model string) Fleet {
	return Fleet{GPUs: []GPU{{Host: "h", UUID: "GPU-0", Model: model}}}
}

// The layouts operators ask for most, each on an empty GPU. 2×1g+2g+3g is
// the case a first-free-slot greedy gets wrong (3g at slot 0 leaves no room
// for the second 1g).
func TestSolveFindsKnownLayouts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		model  string
		demand []Request
		want   []slot
	}{
		{"all 1g x7 on H100", gpucatalog.H100SXM5_80GB, []Request{{Profile: "1g.10gb", Count: 7}},
			[]slot{{"1g.10gb", 0}, {"1g.10gb", 1}, {"1g.10gb", 2}, {"1g.10gb", 3}, {"1g.10gb", 4}, {"1g.10gb", 5}, {"1g.10gb", 6}}},
		{"3g+3g on A100 80GB", gpucatalog.A100SXM4_80GB, []Request{{Profile: "3g.40gb", Count: 2}},
			[]slot{{"3g.40gb", 0}, {"3g.40gb", 4}}},
		{"4g+2g+1g on H200", gpucatalog.H200SXM5_141GB,
			[]Request{{Profile: "1g.18gb", Count: 1}, {Profile: "2g.35gb", Count: 1}, {Profile: "4g.71gb", Count: 1}},
			[]slot{{"4g.71gb", 0}, {"2g.35gb", 4}, {"1g.18gb", 6}}},
		{"2x1g+2g+3g on A100 40GB", gpucatalog.A100SXM4_40GB,
			[]Request{{Profile: "1g.5gb", Count: 2}, {Profile: "2g.10gb", Count: 1}, {Profile: "3g.20gb", Count: 1}},
			[]slot{{"1g.5gb", 0}, {"1g.5gb", 1}, {"2g.10gb", 2}, {"3g.20gb", 4}}},
		{"4g+3g on H100", gpucatalog.H100SXM5_80GB, []Request{{Profile: "3g.40gb", Count: 1}, {Profile: "4g.40gb", Count: 1}},
			[]slot{{"4g.40gb", 0}, {"3g.40gb", 4}}},
		{"4x 1g with two memory slices", gpucatalog.H100SXM5_80GB, []Request{{Profile: "1g.20gb", Count: 4}},
			[]slot{{"1g.20gb", 0}, {"1g.20gb", 2}, {"1g.20gb", 4}, {"1g.20gb", 6}}},
		{"3x 2g + 1g", gpucatalog.H100SXM5_80GB, []Request{{Profile: "2g.20gb", Count: 3}, {Profile: "1g.10gb", Count: 1}},
			[]slot{{"2g.20gb", 0}, {"2g.20gb", 2}, {"2g.20gb", 4}, {"1g.10gb", 6}}},
		{"whole 7g", gpucatalog.H200SXM5_141GB, []Request{{Profile: "7g.141gb", Count: 1}},
			[]slot{{"7g.141gb", 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := Solve(emptyGPU(tc.model), oneTenant(tc.model, tc.demand...))
			if err != nil {
				t.Fatal(err)
			}
			checkLayouts(t, plan)
			if len(plan.Unmet) > 0 {
				t.Errorf("unmet: %+v", plan.Unmet)
			}
			// Several layouts can be equally good (2g at 0 and the 1g pair at
			// 2-3 is as valid as the reverse): compare what is placed.
			profiles := func(s []slot) []string {
				var out []string
				for _, x := range s {
					out = append(out, x.profile)
				}
				slices.Sort(out)
				return out
			}
			if got := layoutOf(plan.GPUs[0]); !slices.Equal(profiles(got), profiles(tc.want)) {
				t.Errorf("layout %v, want %v", got, tc.want)
			}
			for _, in := range plan.GPUs[0].Instances {
				if in.Action != Create || in.Tenant != "acme" {
					t.Errorf("instance %+v: want a create for acme", in)
				}
			}
		})
	}
}

func TestSolveNeverTouchesBusyInstances(t *testing.T) {
	// A busy 1g at slot 3 blocks every 4g and the 3g at slot 0; the planner
	// must place around it, not move it.
	fleet := Fleet{GPUs: []GPU{{Host: "h", UUID: "GPU-0", Model: gpucatalog.H100SXM5_80GB, Instances: []Instance{
		{Profile: "1g.10gb", Start: ptr(3), UUID: "MIG-busy", Tenant: "other", Busy: true},
	}}}}
	demand := oneTenant(gpucatalog.H100SXM5_80GB, Request{Profile: "4g.40gb", Count: 1}, Request{Profile: "3g.40gb", Count: 1})
	plan, err := Solve(fleet, demand)
	if err != nil {
		t.Fatal(err)
	}
	checkLayouts(t, plan)
	g := plan.GPUs[0]
	want := []slot{{"1g.10gb", 3}, {"3g.40gb", 4}}
	if got := layoutOf(g); !slices.Equal(got, want) {
		t.Fatalf("layout %v, want %v", got, want)
	}
	if in := g.Instances[0]; in.Action != Keep || in.UUID != "MIG-busy" || in.Tenant != "other" || !in.Busy {
		t.Errorf("busy instance became %+v", in)
	}
	if len(plan.Unmet) != 1 || plan.Unmet[0].Profile != "4g.40gb" || !strings.Contains(plan.Unmet[0].Reason, "no free placement") {
		t.Errorf("unmet %+v, want the 4g with a placement reason", plan.Unmet)
	}
}

func TestSolveReusesIdleInstancesWithoutChanges(t *testing.T) {
	fleet := Fleet{GPUs: []GPU{
		{Host: "h", UUID: "GPU-0", Model: gpucatalog.H100SXM5_80GB, Instances: []Instance{
			{Profile: "3g.40gb", Start: ptr(0), UUID: "MIG-a", Tenant: "acme"},
			{Profile: "3g.40gb", Start: ptr(4), UUID: "MIG-b"},
		}},
		{Host: "h", UUID: "GPU-1", Model: gpucatalog.H100SXM5_80GB},
	}}
	demand := Demand{Tenants: []TenantDemand{
		{Tenant: "acme", Reserved: []Request{{Model: gpucatalog.H100SXM5_80GB, Profile: "3g.40gb", Count: 1}}},
		{Tenant: "beta", Pending: []Request{{Profile: "3g.40gb", Count: 1}}},
	}}
	plan, err := Solve(fleet, demand)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Summary.GPUsChanged != 0 || plan.Summary.Created != 0 || plan.Summary.Destroyed != 0 {
		t.Errorf("summary %+v: demand fits the existing instances, nothing should change", plan.Summary)
	}
	owners := map[string]string{}
	for _, in := range plan.GPUs[0].Instances {
		owners[in.UUID] = in.Tenant
	}
	if owners["MIG-a"] != "acme" || owners["MIG-b"] != "beta" {
		t.Errorf("owners %v, want acme keeps MIG-a and beta gets the free MIG-b", owners)
	}
	if plan.Summary.Reassigned != 1 {
		t.Errorf("reassigned %d, want 1", plan.Summary.Reassigned)
	}
}

func TestSolveDestroysIdleSurplusOnlyWhenNeeded(t *testing.T) {
	// GPU-0 holds idle 1g instances nobody asked for; GPU-1 is empty. A 7g
	// goes to the empty GPU and the idle instances stay.
	fleet := Fleet{GPUs: []GPU{
		{Host: "h", UUID: "GPU-0", Model: gpucatalog.A100SXM4_40GB, Instances: []Instance{
			{Profile: "1g.5gb", Start: ptr(0), UUID: "MIG-x"}, {Profile: "1g.5gb", Start: ptr(1), UUID: "MIG-y"},
		}},
		{Host: "h", UUID: "GPU-1", Model: gpucatalog.A100SXM4_40GB},
	}}
	plan, err := Solve(fleet, oneTenant(gpucatalog.A100SXM4_40GB, Request{Profile: "7g.40gb", Count: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if plan.GPUs[0].Changed || !plan.GPUs[1].Changed || plan.Summary.Destroyed != 0 {
		t.Fatalf("plan %+v: want the empty GPU used and nothing destroyed", plan.GPUs)
	}
	// With two 7g wanted, the idle instances must go.
	plan, err = Solve(fleet, oneTenant(gpucatalog.A100SXM4_40GB, Request{Profile: "7g.40gb", Count: 2}))
	if err != nil {
		t.Fatal(err)
	}
	checkLayouts(t, plan)
	if len(plan.Unmet) != 0 || plan.Summary.Destroyed != 2 || len(plan.GPUs[0].Remove) != 2 {
		t.Errorf("unmet %+v, summary %+v: want both idle instances destroyed for the second 7g", plan.Unmet, plan.Summary)
	}
}

func TestSolvePacksOntoFewGPUs(t *testing.T) {
	fleet := Fleet{}
	for i := range 4 {
		fleet.GPUs = append(fleet.GPUs, GPU{Host: "h", UUID: fmt.Sprintf("GPU-%d", i), Model: gpucatalog.H100SXM5_80GB})
	}
	demand := Demand{Tenants: []TenantDemand{
		{Tenant: "a", Reserved: []Request{{Profile: "3g.40gb", Count: 1}, {Profile: "1g.10gb", Count: 2}}},
		{Tenant: "b", Reserved: []Request{{Profile: "2g.20gb", Count: 1}, {Profile: "3g.40gb", Count: 1}}},
	}}
	plan, err := Solve(fleet, demand)
	if err != nil {
		t.Fatal(err)
	}
	checkLayouts(t, plan)
	if plan.Summary.GPUsChanged != 2 || len(plan.Unmet) != 0 {
		t.Errorf("changed %d GPUs, unmet %+v: 3g+3g and 2g+1g+1g need two GPUs", plan.Summary.GPUsChanged, plan.Unmet)
	}
}

func TestSolveInfersUnknownPlacements(t *testing.T) {
	// Usage samples carry no placement. A 4g and a 3g must sit at 0 and 4;
	// the free 1g.20gb-sized gap is then nowhere, so a new 1g is unmet.
	fleet := Fleet{GPUs: []GPU{{Host: "h", UUID: "GPU-0", Model: gpucatalog.H100SXM5_80GB, Instances: []Instance{
		{Profile: "3g.40gb", UUID: "MIG-3", Tenant: "a", Busy: true},
		{Profile: "4g.40gb", UUID: "MIG-4", Tenant: "b", Busy: true},
	}}}}
	plan, err := Solve(fleet, oneTenant(gpucatalog.H100SXM5_80GB, Request{Profile: "1g.10gb", Count: 1}))
	if err != nil {
		t.Fatal(err)
	}
	got := layoutOf(plan.GPUs[0])
	if want := []slot{{"4g.40gb", 0}, {"3g.40gb", 4}}; !slices.Equal(got, want) {
		t.Errorf("layout %v, want %v", got, want)
	}
	for _, in := range plan.GPUs[0].Instances {
		if !in.Inferred {
			t.Errorf("%+v: want inferred", in)
		}
	}
	if len(plan.Unmet) != 1 {
		t.Errorf("unmet %+v, want the 1g", plan.Unmet)
	}
}

func TestSolveUnmetReasons(t *testing.T) {
	fleet := Fleet{GPUs: []GPU{
		{Host: "h", UUID: "GPU-0", Model: gpucatalog.A100SXM4_40GB, MIGDisabled: true},
		{Host: "h", UUID: "GPU-1", Model: gpucatalog.H100SXM5_80GB, Instances: []Instance{
			{Profile: "7g.80gb", Start: ptr(0), UUID: "MIG-7", Tenant: "x", Busy: true},
		}},
	}}
	for _, tc := range []struct {
		name   string
		req    Request
		reason string
	}{
		{"model absent from the fleet", Request{Model: gpucatalog.H200SXM5_141GB, Profile: "1g.18gb", Count: 1}, "no H200-SXM5-141GB GPU in the fleet"},
		{"only GPUs with MIG off", Request{Model: gpucatalog.A100SXM4_40GB, Profile: "1g.5gb", Count: 1}, "every A100-SXM4-40GB GPU has MIG mode disabled"},
		{"GPUs full of busy work", Request{Model: gpucatalog.H100SXM5_80GB, Profile: "1g.10gb", Count: 2}, "no free placement for 1g.10gb on any H100-SXM5-80GB GPU"},
		{"any-model request names every candidate", Request{Profile: "3g.40gb", Count: 1}, "no free placement for 3g.40gb on any A100-SXM4-80GB or H100-SXM5-80GB GPU"},
		{"any-model request for a model absent", Request{Profile: "2g.35gb", Count: 1}, "no H200-SXM5-141GB GPU in the fleet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := Solve(fleet, Demand{Tenants: []TenantDemand{{Tenant: "acme", Pending: []Request{tc.req}}}})
			if err != nil {
				t.Fatal(err)
			}
			if len(plan.Unmet) != 1 || plan.Unmet[0].Reason != tc.reason || plan.Unmet[0].Count != tc.req.Count || plan.Unmet[0].Class != Pending {
				t.Errorf("unmet %+v, want %d with reason %q", plan.Unmet, tc.req.Count, tc.reason)
			}
			if plan.Summary.GPUsChanged != 0 {
				t.Errorf("changed %d GPUs", plan.Summary.GPUsChanged)
			}
		})
	}
}

func TestSolveMediaExtensionsOnePerGPU(t *testing.T) {
	plan, err := Solve(emptyGPU(gpucatalog.H100SXM5_80GB), oneTenant(gpucatalog.H100SXM5_80GB, Request{Profile: "1g.10gb+me", Count: 2}))
	if err != nil {
		t.Fatal(err)
	}
	checkLayouts(t, plan)
	want := "no free placement for 1g.10gb+me on any H100-SXM5-80GB GPU (at most 1 per GPU)"
	if len(plan.GPUs[0].Instances) != 1 || len(plan.Unmet) != 1 || plan.Unmet[0].Reason != want {
		t.Errorf("layout %v, unmet %+v", layoutOf(plan.GPUs[0]), plan.Unmet)
	}
}

func TestSolveServesReservedBeforePending(t *testing.T) {
	// One GPU, room for one 7g: reserved beta wins over pending alpha even
	// though alpha sorts first.
	demand := Demand{Tenants: []TenantDemand{
		{Tenant: "alpha", Pending: []Request{{Profile: "7g.80gb", Count: 1}}},
		{Tenant: "beta", Reserved: []Request{{Profile: "1g.10gb", Count: 1}}},
	}}
	plan, err := Solve(emptyGPU(gpucatalog.H100SXM5_80GB), demand)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Unmet) != 1 || plan.Unmet[0].Tenant != "alpha" {
		t.Errorf("unmet %+v, want alpha's pending 7g", plan.Unmet)
	}
	if plan.Summary.ReservedMetSlices != 1 || plan.Summary.PendingMetSlices != 0 || plan.Summary.PendingSlices != 7 {
		t.Errorf("summary %+v", plan.Summary)
	}
}

func TestSolveRejectsInvalidInput(t *testing.T) {
	h100 := gpucatalog.H100SXM5_80GB
	for _, tc := range []struct {
		name   string
		fleet  Fleet
		demand Demand
		want   []string
	}{
		{"unknown model", Fleet{GPUs: []GPU{{UUID: "g", Model: "B300"}}}, Demand{}, []string{`unknown model "B300"`}},
		{"missing uuid", Fleet{GPUs: []GPU{{Model: h100}}}, Demand{}, []string{"uuid is empty"}},
		{"duplicate uuid", Fleet{GPUs: []GPU{{UUID: "g", Model: h100}, {UUID: "g", Model: h100}}}, Demand{}, []string{"uuid repeats gpus[0]"}},
		{"profile of another model", Fleet{GPUs: []GPU{{UUID: "g", Model: h100, Instances: []Instance{{Profile: "1g.5gb", Start: ptr(0)}}}}}, Demand{},
			[]string{`has no profile "1g.5gb"`}},
		{"invalid start", Fleet{GPUs: []GPU{{UUID: "g", Model: h100, Instances: []Instance{{Profile: "3g.40gb", Start: ptr(2)}}}}}, Demand{},
			[]string{"cannot start at slot 2"}},
		{"overlap", Fleet{GPUs: []GPU{{UUID: "g", Model: h100, Instances: []Instance{{Profile: "3g.40gb", Start: ptr(0)}, {Profile: "2g.20gb", Start: ptr(2)}}}}}, Demand{},
			[]string{"overlaps"}},
		{"too many media instances", Fleet{GPUs: []GPU{{UUID: "g", Model: h100, Instances: []Instance{{Profile: "1g.10gb+me"}, {Profile: "1g.10gb+me"}}}}}, Demand{},
			[]string{"at most 1 fit"}},
		{"unknown placements that fit nowhere", Fleet{GPUs: []GPU{{UUID: "g", Model: h100, Instances: []Instance{{Profile: "4g.40gb"}, {Profile: "7g.80gb"}}}}}, Demand{},
			[]string{"fit no valid layout"}},
		{"instances on a GPU with MIG off", Fleet{GPUs: []GPU{{UUID: "g", Model: h100, MIGDisabled: true, Instances: []Instance{{Profile: "7g.80gb"}}}}}, Demand{},
			[]string{"mig_disabled but lists"}},
		{"demand problems are all reported", Fleet{}, Demand{Tenants: []TenantDemand{
			{Tenant: "", Reserved: []Request{{Profile: "3g.40gb", Count: 0}}},
			{Tenant: "a", Pending: []Request{{Model: h100, Profile: "1g.5gb", Count: 1}, {Profile: "9g.1tb", Count: 1}, {Model: "X", Profile: "1g.5gb", Count: 1}}},
			{Tenant: "a"},
		}}, []string{"tenant is empty", "count 0 is not positive", `has no profile "1g.5gb"`, `no model has profile "9g.1tb"`, `unknown model "X"`, "tenant repeats"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Solve(tc.fleet, tc.demand)
			if err == nil {
				t.Fatal("Solve accepted invalid input")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// checkPlan holds the properties every plan must have.
func checkPlan(t *testing.T, fleet Fleet, demand Demand, plan Plan) {
	t.Helper()
	checkLayouts(t, plan)
	if err := plan.Validate(); err != nil {
		t.Errorf("plan does not validate: %v", err)
	}
	if len(plan.GPUs) != len(fleet.GPUs) {
		t.Fatalf("%d GPU plans for %d GPUs", len(plan.GPUs), len(fleet.GPUs))
	}
	type key struct{ tenant, model, profile string }
	held := map[key]int{} // non-busy instances each tenant holds in the plan
	for i, g := range fleet.GPUs {
		gp := plan.GPUs[i]
		if gp.UUID != g.UUID || gp.Model != g.Model {
			t.Fatalf("gpu %d: plan for %s/%s, fleet has %s/%s", i, gp.UUID, gp.Model, g.UUID, g.Model)
		}
		byUUID := map[string]PlannedInstance{}
		for _, in := range append(slices.Clone(gp.Instances), gp.Remove...) {
			if in.UUID != "" {
				byUUID[in.UUID] = in
			}
		}
		for _, in := range g.Instances {
			pi, ok := byUUID[in.UUID]
			if !ok {
				t.Errorf("gpu %s: instance %s vanished from the plan", g.UUID, in.UUID)
				continue
			}
			if in.Start != nil && pi.Start != *in.Start {
				t.Errorf("gpu %s: instance %s moved from %d to %d", g.UUID, in.UUID, *in.Start, pi.Start)
			}
			if in.Busy && (pi.Action != Keep || pi.Tenant != in.Tenant || !pi.Busy) {
				t.Errorf("gpu %s: busy instance %s became %+v", g.UUID, in.UUID, pi)
			}
		}
		if !gp.Changed {
			if len(gp.Instances) != len(g.Instances) {
				t.Errorf("gpu %s unchanged but has %d instances, was %d", g.UUID, len(gp.Instances), len(g.Instances))
			}
		}
		if g.MIGDisabled && (gp.Changed || len(gp.Instances) > 0) {
			t.Errorf("gpu %s has MIG off but the plan touches it", g.UUID)
		}
		for _, in := range gp.Instances {
			if in.Tenant != "" && !in.Busy {
				held[key{in.Tenant, g.Model, in.Profile}]++
			}
		}
	}
	// Non-busy instances never exceed what a tenant asked for.
	for k, n := range held {
		asked := 0
		for _, td := range demand.Tenants {
			if td.Tenant != k.tenant {
				continue
			}
			for _, r := range append(slices.Clone(td.Reserved), td.Pending...) {
				if r.Profile == k.profile && (r.Model == "" || r.Model == k.model) {
					asked += r.Count
				}
			}
		}
		if n > asked {
			t.Errorf("tenant %s holds %d idle-or-new %s/%s, asked for %d", k.tenant, n, k.model, k.profile, asked)
		}
	}
	// Met plus unmet is what was asked.
	asked, unmet := 0, 0
	for _, td := range demand.Tenants {
		for _, r := range append(slices.Clone(td.Reserved), td.Pending...) {
			asked += r.Count * profileSlices(r.Model, r.Profile)
		}
	}
	for _, u := range plan.Unmet {
		unmet += u.Count * profileSlices(u.Model, u.Profile)
	}
	s := plan.Summary
	if s.ReservedSlices+s.PendingSlices != asked || s.ReservedMetSlices+s.PendingMetSlices+unmet != asked {
		t.Errorf("summary %+v: asked %d slices, unmet %d", s, asked, unmet)
	}
	// Nothing unmet would still fit: a profile left unmet has no room on any
	// candidate GPU of the final plan.
	for _, u := range plan.Unmet {
		models := []string{u.Model}
		if u.Model == "" {
			models = gpucatalog.ModelsWithProfile(u.Profile)
		}
		for _, gp := range plan.GPUs {
			if gp.MIGDisabled || !slices.Contains(models, gp.Model) {
				continue
			}
			p, _ := gpucatalog.Lookup(gp.Model, u.Profile)
			var used uint8
			n := 0
			for _, in := range gp.Instances {
				q, _ := gpucatalog.Lookup(gp.Model, in.Profile)
				used |= gpucatalog.Placement{Start: in.Start, Size: q.MemorySlices}.Mask()
				if in.Profile == u.Profile {
					n++
				}
			}
			if n >= p.MaxInstances {
				continue
			}
			for _, pl := range p.Placements {
				if used&pl.Mask() == 0 {
					t.Errorf("unmet %+v, yet gpu %s has slot %d free for it", u, gp.UUID, pl.Start)
					break
				}
			}
		}
	}
}

func TestSolvePropertiesOnRandomFleets(t *testing.T) {
	r := rand.New(rand.NewSource(20240601))
	cfg := genConfig{gpus: 40, tenants: 12, models: gpucatalog.Models(), busyPct: 30, unknownStartPct: 20,
		maxExisting: 5, maxRequests: 3, maxCount: 4, anyModelPct: 20, disabledPct: 5}
	for i := range 150 {
		fleet, demand := genFleet(r, cfg), genDemand(r, cfg)
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			plan, err := Solve(fleet, demand)
			if err != nil {
				t.Fatalf("Solve: %v", err)
			}
			checkPlan(t, fleet, demand, plan)
			again, _ := Solve(fleet, demand)
			if !reflect.DeepEqual(plan, again) {
				t.Error("Solve is not deterministic")
			}
		})
	}
}

// allocatedBytes is what f allocates, the least of a few runs (the heap
// counter is process-wide, so a run can only read high, never low).
func allocatedBytes(f func()) uint64 {
	var least uint64
	for i := range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; i == 0 || n < least {
			least = n
		}
	}
	return least
}

// Demand beyond what the fleet could ever hold costs nothing: asking for a
// million instances plans with the memory of asking for what fits, and the
// unmet part is reported exactly.
func TestSolveCostDoesNotGrowWithDemandBeyondCapacity(t *testing.T) {
	h100 := gpucatalog.H100SXM5_80GB
	fleet := Fleet{GPUs: []GPU{
		{Host: "n1", UUID: "GPU-0", Model: h100},
		{Host: "n1", UUID: "GPU-1", Model: h100},
		{Host: "n1", UUID: "GPU-2", Model: gpucatalog.A100SXM4_80GB},
	}}
	const huge = 1_000_000
	for _, tc := range []struct {
		name  string
		class Class
		req   Request
		fits  int // instances the fleet holds of the request
	}{
		// 1g.10gb: at most 7 per H100.
		{"explicit reserved", Reserved, Request{Model: h100, Profile: "1g.10gb"}, 14},
		{"explicit pending", Pending, Request{Model: h100, Profile: "1g.10gb"}, 14},
		// 3g.40gb: 2 per GPU on the H100s and the A100 80GB.
		{"any-model reserved", Reserved, Request{Profile: "3g.40gb"}, 6},
		{"any-model pending", Pending, Request{Profile: "3g.40gb"}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			demand := func(n int) Demand {
				r := tc.req
				r.Count = n
				td := TenantDemand{Tenant: "acme"}
				if tc.class == Reserved {
					td.Reserved = []Request{r}
				} else {
					td.Pending = []Request{r}
				}
				return Demand{Tenants: []TenantDemand{td}}
			}
			var small, big Plan
			smallBytes := allocatedBytes(func() { small, _ = Solve(fleet, demand(tc.fits)) })
			bigBytes := allocatedBytes(func() { big, _ = Solve(fleet, demand(huge)) })
			if bigBytes > 2*smallBytes+64<<10 {
				t.Errorf("asking for %d allocates %d bytes, asking for the %d that fit %d", huge, bigBytes, tc.fits, smallBytes)
			}
			if len(small.Unmet) != 0 {
				t.Fatalf("demand that fits left unmet %+v", small.Unmet)
			}
			if len(big.Unmet) != 1 || big.Unmet[0].Count != huge-tc.fits || big.Summary.UnmetInstanceCount != huge-tc.fits {
				t.Fatalf("unmet %+v, summary %+v; want %d unmet", big.Unmet, big.Summary, huge-tc.fits)
			}
			if !reflect.DeepEqual(big.GPUs, small.GPUs) {
				t.Errorf("layouts differ from those for the demand that fits:\n%+v\n%+v", big.GPUs, small.GPUs)
			}
			checkPlan(t, fleet, demand(huge), big)
		})
	}
}

// countdownContext reports cancellation from its (left+1)th Err call on, so
// a test can cancel the planner at any one of its checks without a clock.
type countdownContext struct {
	context.Context
	left, calls int
	done        chan struct{}
}

func newCountdown(left int) *countdownContext {
	return &countdownContext{Context: context.Background(), left: left, done: make(chan struct{})}
}

func (c *countdownContext) Done() <-chan struct{} { return c.done }

func (c *countdownContext) Err() error {
	c.calls++
	if c.left == 0 {
		select {
		case <-c.done:
		default:
			close(c.done)
		}
		return context.Canceled
	}
	c.left--
	return nil
}

func TestSolveContextStopsWhenCancelled(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	cfg := genConfig{gpus: 60, tenants: 20, models: gpucatalog.Models(), busyPct: 30, unknownStartPct: 10,
		maxExisting: 5, maxRequests: 3, maxCount: 4, anyModelPct: 20, disabledPct: 2}
	fleet, demand := genFleet(r, cfg), genDemand(r, cfg)

	never := newCountdown(math.MaxInt)
	want, err := SolveContext(never, fleet, demand)
	if err != nil {
		t.Fatalf("SolveContext: %v", err)
	}
	if got, _ := Solve(fleet, demand); !reflect.DeepEqual(got, want) {
		t.Error("Solve and SolveContext plan differently")
	}
	checks := never.calls
	// Both searches look at every GPU at least once in each phase.
	if checks < 2*len(fleet.GPUs) {
		t.Fatalf("%d context checks for %d GPUs", checks, len(fleet.GPUs))
	}
	for _, k := range []int{0, 1, checks / 4, checks / 2, checks - 1} {
		ctx := newCountdown(k)
		plan, err := SolveContext(ctx, fleet, demand)
		if !errors.Is(err, context.Canceled) || !reflect.DeepEqual(plan, Plan{}) {
			t.Errorf("cancelled at check %d of %d: %v, plan %+v", k+1, checks, err, plan.Summary)
		}
		if ctx.calls != k+1 {
			t.Errorf("cancelled at check %d: %d checks, want it to stop at the first that saw it", k+1, ctx.calls)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := SolveContext(ctx, fleet, demand); !errors.Is(err, context.Canceled) {
		t.Errorf("pre-cancelled context: %v", err)
	}
	ctx, cancel = context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	if _, err := SolveContext(ctx, fleet, demand); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("expired context: %v", err)
	}
	// Invalid input is reported as such, whatever the context says.
	bad := Demand{Tenants: []TenantDemand{{Tenant: "a", Pending: []Request{{Profile: "3g.40gb", Count: 1.5e6}}}}}
	if _, err := SolveContext(ctx, fleet, bad); err == nil || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Errorf("invalid demand under an expired context: %v", err)
	}
}

// The planner turns demand into at most as many new-instance units as the
// fleet could hold of each profile, whatever the count (Validate bounds
// counts; this holds without it).
func TestSolveExpandsUnitsUpToCapacity(t *testing.T) {
	h100, a100 := gpucatalog.H100SXM5_80GB, gpucatalog.A100SXM4_80GB
	fleet := Fleet{GPUs: []GPU{
		{UUID: "GPU-0", Model: h100},
		{UUID: "GPU-1", Model: h100, Instances: []Instance{{Profile: "1g.10gb", Start: ptr(0)}}},
		{UUID: "GPU-2", Model: a100},
		{UUID: "GPU-3", Model: h100, MIGDisabled: true},
	}}
	for _, n := range []int{15, 10_000_000, 1 << 62, math.MaxInt} {
		demand := Demand{Tenants: []TenantDemand{
			{Tenant: "a", Reserved: []Request{{Model: h100, Profile: "1g.10gb", Count: n}}, Pending: []Request{{Profile: "3g.40gb", Count: n}}},
			{Tenant: "b", Pending: []Request{{Model: a100, Profile: "1g.10gb", Count: n}}},
		}}
		s := newSolver(fleet, demand)
		s.holdBusy()
		s.aggregate()
		got := map[unit]int{}
		for _, u := range s.newUnits() {
			got[unit{u.class, u.model, nil}]++
		}
		// Two H100s with MIG on hold 14 1g.10gb, one of them there already;
		// the A100 holds 7 more; 3g.40gb fits twice on each of the three.
		hp, ap := modelByName(h100).pos, modelByName(a100).pos
		want := map[unit]int{{Reserved, hp, nil}: 13, {Pending, ap, nil}: 7, {Pending, -1, nil}: 6}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("count %d: units %v, want %v", n, got, want)
		}
	}
}

// Issue 31: with the A100 listed first, acme's any-model 1g.10gb filled it
// (four two-slot 1g.10gb take all eight memory slots) and beta's two
// A100-only 2g.10gb went unmet, although moving two of acme's instances to
// the H100's 1g.10gb meets everything. The ejection move now moves an
// instance to any model with a profile of that name, and the plan is the
// same whichever GPU is listed or named first.
func TestSolveMovesAnyModelInstanceAcrossModels(t *testing.T) {
	a100, h100 := gpucatalog.A100SXM4_40GB, gpucatalog.H100SXM5_80GB
	for _, tc := range []struct {
		name       string
		models     [2]string
		uuids      [2]string
		betaReserv bool
	}{
		{"A100 listed and named first, beta pending", [2]string{a100, h100}, [2]string{"GPU-1", "GPU-2"}, false},
		{"H100 listed and named first, beta pending", [2]string{h100, a100}, [2]string{"GPU-1", "GPU-2"}, false},
		{"A100 listed first, H100 named first, beta pending", [2]string{a100, h100}, [2]string{"GPU-2", "GPU-1"}, false},
		{"A100 listed and named first, beta reserved", [2]string{a100, h100}, [2]string{"GPU-1", "GPU-2"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fleet := Fleet{GPUs: []GPU{{Host: "h", UUID: tc.uuids[0], Model: tc.models[0]}, {Host: "h", UUID: tc.uuids[1], Model: tc.models[1]}}}
			beta := TenantDemand{Tenant: "beta"}
			req := []Request{{Model: a100, Profile: "2g.10gb", Count: 2}}
			if tc.betaReserv {
				beta.Reserved = req
			} else {
				beta.Pending = req
			}
			demand := Demand{Tenants: []TenantDemand{{Tenant: "acme", Reserved: []Request{{Profile: "1g.10gb", Count: 5}}}, beta}}
			plan, err := Solve(fleet, demand)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, fleet, demand, plan)
			s := plan.Summary
			if met := s.ReservedMetSlices + s.PendingMetSlices; met != 9 || len(plan.Unmet) != 0 {
				t.Errorf("met %d of 9 slices, unmet %+v", met, plan.Unmet)
			}
		})
	}
}

// Plans do not depend on the order in which GPUs, their instances, tenants
// and requests are listed: each random case is solved as generated and
// shuffled, and the plans agree GPU by GPU (matched by UUID) and in what
// they meet.
func TestSolveDoesNotDependOnInputOrder(t *testing.T) {
	r := rand.New(rand.NewSource(31))
	big := genConfig{gpus: 24, tenants: 8, models: gpucatalog.Models(), busyPct: 30, unknownStartPct: 20,
		maxExisting: 5, maxRequests: 3, maxCount: 4, anyModelPct: 40, disabledPct: 5}
	for i := range 60 {
		cfg := big
		if i%2 == 1 {
			all := gpucatalog.Models()
			cfg = genConfig{gpus: 2 + r.Intn(3), tenants: 1 + r.Intn(3), models: []string{all[r.Intn(3)], all[r.Intn(3)]},
				busyPct: 35, unknownStartPct: 20, maxExisting: 4, maxRequests: 2, maxCount: 3, anyModelPct: 50}
		}
		fleet, demand := genFleet(r, cfg), genDemand(r, cfg)
		shuffled := shuffleInput(r, fleet, demand)
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			plan, err := Solve(fleet, demand)
			if err != nil {
				t.Fatal(err)
			}
			other, err := Solve(shuffled.fleet, shuffled.demand)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, shuffled.fleet, shuffled.demand, other)
			if plan.Summary != other.Summary {
				t.Errorf("summary %+v, shuffled %+v", plan.Summary, other.Summary)
			}
			if !reflect.DeepEqual(plan.Unmet, other.Unmet) {
				t.Errorf("unmet %+v, shuffled %+v", plan.Unmet, other.Unmet)
			}
			byUUID := map[string]GPUPlan{}
			for _, g := range other.GPUs {
				byUUID[g.UUID] = g
			}
			for _, g := range plan.GPUs {
				if !reflect.DeepEqual(g, byUUID[g.UUID]) {
					t.Errorf("gpu %s:\n%+v\nshuffled:\n%+v", g.UUID, g, byUUID[g.UUID])
				}
			}
		})
	}
}

type input struct {
	fleet  Fleet
	demand Demand
}

// shuffleInput lists the same fleet and demand in another order.
func shuffleInput(r *rand.Rand, f Fleet, d Demand) input {
	out := input{fleet: Fleet{GPUs: slices.Clone(f.GPUs)}, demand: Demand{Tenants: slices.Clone(d.Tenants)}}
	r.Shuffle(len(out.fleet.GPUs), func(i, j int) { out.fleet.GPUs[i], out.fleet.GPUs[j] = out.fleet.GPUs[j], out.fleet.GPUs[i] })
	for i := range out.fleet.GPUs {
		insts := slices.Clone(out.fleet.GPUs[i].Instances)
		r.Shuffle(len(insts), func(a, b int) { insts[a], insts[b] = insts[b], insts[a] })
		out.fleet.GPUs[i].Instances = insts
	}
	r.Shuffle(len(out.demand.Tenants), func(i, j int) {
		out.demand.Tenants[i], out.demand.Tenants[j] = out.demand.Tenants[j], out.demand.Tenants[i]
	})
	for i := range out.demand.Tenants {
		td := &out.demand.Tenants[i]
		for _, rs := range []*[]Request{&td.Reserved, &td.Pending} {
			c := slices.Clone(*rs)
			r.Shuffle(len(c), func(a, b int) { c[a], c[b] = c[b], c[a] })
			*rs = c
		}
	}
	return out
}
