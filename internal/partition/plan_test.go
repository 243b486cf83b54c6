package partition

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

func TestPlanValidate(t *testing.T) {
	h100 := gpucatalog.H100SXM5_80GB
	ok := GPUPlan{UUID: "g", Model: h100, Changed: true, Instances: []PlannedInstance{
		{Profile: "3g.40gb", Start: 0, Action: Create},
		{Profile: "3g.40gb", Start: 4, Action: Keep, UUID: "MIG-1", Busy: true},
	}, Remove: []PlannedInstance{{Profile: "1g.10gb", Start: 0, Action: Destroy, UUID: "MIG-2"}}}
	for _, tc := range []struct {
		name string
		gpu  func(g *GPUPlan)
		want string
	}{
		{"valid plan", func(*GPUPlan) {}, ""},
		{"unknown model", func(g *GPUPlan) { g.Model = "B200" }, `unknown model "B200"`},
		{"invalid start", func(g *GPUPlan) { g.Instances[0].Start = 2 }, "cannot start at slot 2"},
		{"overlap", func(g *GPUPlan) { g.Instances[1].Start = 0 }, "overlaps another instance"},
		{"unknown action", func(g *GPUPlan) { g.Instances[0].Action = "move" }, `action "move"`},
		{"busy instance removed", func(g *GPUPlan) { g.Remove[0].Busy = true }, "a busy instance is never removed"},
		{"changed flag disagrees", func(g *GPUPlan) { g.Changed = false }, "changed is false but the plan has 2 creates and destroys"},
		{"created instance with a uuid", func(g *GPUPlan) { g.Instances[0].UUID = "MIG-9" }, "a created instance has no uuid"},
		{"too many media instances", func(g *GPUPlan) {
			g.Instances = []PlannedInstance{{Profile: "1g.10gb+me", Start: 0, Action: Create}, {Profile: "1g.10gb+me", Start: 1, Action: Create}}
		}, "at most 1 fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := ok
			g.Instances = append([]PlannedInstance(nil), ok.Instances...)
			g.Remove = append([]PlannedInstance(nil), ok.Remove...)
			tc.gpu(&g)
			checkValidation(t, Plan{GPUs: []GPUPlan{g}}.Validate(), tc.want)
		})
	}
	err := Plan{GPUs: []GPUPlan{{UUID: "g", Model: h100}, {UUID: "g", Model: h100}, {Model: h100}}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "uuid repeats") || !strings.Contains(err.Error(), "uuid is empty") {
		t.Errorf("Validate error %v, want both uuid problems", err)
	}
}

func TestMIGParted(t *testing.T) {
	layout := func(profiles ...string) []PlannedInstance {
		var out []PlannedInstance
		for i, p := range profiles {
			out = append(out, PlannedInstance{Profile: p, Start: i, Action: Keep})
		}
		return out
	}
	plan := Plan{GPUs: []GPUPlan{
		{Host: "a", UUID: "1", Model: gpucatalog.H100SXM5_80GB, Instances: layout("1g.10gb", "1g.10gb")},
		{Host: "a", UUID: "2", Model: gpucatalog.H100SXM5_80GB, Instances: layout("1g.10gb", "1g.10gb")},
		{Host: "b", UUID: "3", Model: gpucatalog.H100SXM5_80GB, Index: ptr(1), Instances: layout("1g.10gb")},
		{Host: "b", UUID: "4", Model: gpucatalog.H100SXM5_80GB, Index: ptr(0), MIGDisabled: true},
		{Host: "b", UUID: "5", Model: gpucatalog.H100SXM5_80GB, Index: ptr(2), Instances: layout("1g.10gb")},
	}}
	got, err := plan.MIGParted()
	if err != nil {
		t.Fatal(err)
	}
	want := MIGPartedConfig{Version: "v1", MIGConfigs: map[string][]MIGPartedDeviceConfig{
		"a": {{Devices: "all", MIGEnabled: true, MIGDevices: map[string]int{"1g.10gb": 2}}},
		"b": {
			{Devices: []int{1, 2}, MIGEnabled: true, MIGDevices: map[string]int{"1g.10gb": 1}},
			{Devices: []int{0}, MIGEnabled: false},
		},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MIGParted() =\n%+v\nwant\n%+v", got, want)
	}
	// Different layouts and no index: mig-parted cannot tell the GPUs apart.
	plan.GPUs[2].Index = nil
	if _, err := plan.MIGParted(); err == nil || !strings.Contains(err.Error(), `host "b": 1 GPUs have no index`) {
		t.Errorf("MIGParted error %v", err)
	}
}

// FuzzSolve builds fleets and demand from arbitrary bytes: whatever they
// are, Solve returns an error or a plan that keeps every property.
func FuzzSolve(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte("\x03\x07\x00\x10\x21\x42\x63\x84\xa5\xc6\xe7"))
	f.Add([]byte{255, 255, 255, 255, 0, 0, 0, 0, 9, 9, 9})
	models := gpucatalog.Models()
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			b := int(data[0])
			data = data[1:]
			return b
		}
		var fleet Fleet
		for i := range next() % 5 {
			model := models[next()%len(models)]
			m, _ := gpucatalog.LookupModel(model)
			g := GPU{UUID: string(rune('a' + i)), Model: model, MIGDisabled: next()%7 == 0}
			for range next() % 4 {
				p := m.Profiles[next()%len(m.Profiles)]
				in := Instance{Profile: p.Name, Tenant: []string{"", "x", "y"}[next()%3], Busy: next()%3 == 0}
				if s := next() % 9; s < 8 {
					in.Start = ptr(s)
				}
				in.UUID = g.UUID + string(rune('0'+len(g.Instances)))
				g.Instances = append(g.Instances, in)
			}
			fleet.GPUs = append(fleet.GPUs, g)
		}
		var demand Demand
		for _, tenant := range []string{"x", "y"} {
			td := TenantDemand{Tenant: tenant}
			for range next() % 3 {
				model := models[next()%len(models)]
				m, _ := gpucatalog.LookupModel(model)
				r := Request{Model: model, Profile: m.Profiles[next()%len(m.Profiles)].Name, Count: next()%4 - 1}
				if r.Count < 0 && next()%2 == 0 {
					// Far past any fleet, at and past the limit.
					r.Count = []int{MaxCount, MaxCount + 1, 1 << 62}[next()%3]
				}
				if next()%4 == 0 {
					r.Model = ""
				}
				if next()%2 == 0 {
					td.Reserved = append(td.Reserved, r)
				} else {
					td.Pending = append(td.Pending, r)
				}
			}
			demand.Tenants = append(demand.Tenants, td)
		}
		plan, err := Solve(fleet, demand)
		if err != nil {
			if fleet.Validate() == nil && demand.Validate() == nil {
				t.Fatalf("Solve failed on valid input: %v", err)
			}
			return
		}
		checkPlan(t, fleet, demand, plan)
	})
}
