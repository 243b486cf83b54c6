package partition

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// Plan is the planner's answer: a target layout for every GPU of the fleet
// and the demand it could not meet. It is also the input of Apply.
type Plan struct {
	GPUs  []GPUPlan `yaml:"gpus" json:"gpus"`
	Unmet []Unmet   `yaml:"unmet,omitempty" json:"unmet,omitempty"`
	// Skipped lists the GPUs of a fleet read from usage samples that were
	// not planned (FleetFromSamples says why); Solve leaves it empty and
	// Apply ignores it.
	Skipped []Skipped `yaml:"skipped,omitempty" json:"skipped,omitempty"`
	Summary Summary   `yaml:"summary" json:"summary"`
}

// GPUPlan is one GPU's target layout.
type GPUPlan struct {
	Host        string `yaml:"host" json:"host"`
	UUID        string `yaml:"uuid" json:"uuid"`
	Model       string `yaml:"model" json:"model"`
	Index       *int   `yaml:"index,omitempty" json:"index,omitempty"`
	MIGDisabled bool   `yaml:"mig_disabled,omitempty" json:"mig_disabled,omitempty"`
	// Changed is true when instances are created or destroyed; tenant
	// reassignments of kept instances are bookkeeping, not hardware changes.
	Changed bool `yaml:"changed" json:"changed"`
	// Instances is the target layout, ordered by start slot.
	Instances []PlannedInstance `yaml:"instances,omitempty" json:"instances,omitempty"`
	// Remove lists the existing instances the plan destroys.
	Remove []PlannedInstance `yaml:"remove,omitempty" json:"remove,omitempty"`
}

// Action says what happens to an instance.
type Action string

const (
	Keep    Action = "keep"
	Create  Action = "create"
	Destroy Action = "destroy"
)

// PlannedInstance is one instance of a target layout (or one to remove).
type PlannedInstance struct {
	Profile string `yaml:"profile" json:"profile"`
	Start   int    `yaml:"start" json:"start"`
	Action  Action `yaml:"action" json:"action"`
	UUID    string `yaml:"uuid,omitempty" json:"uuid,omitempty"` // existing instances
	// Tenant the instance serves in the plan; empty is free capacity.
	Tenant string `yaml:"tenant,omitempty" json:"tenant,omitempty"`
	Busy   bool   `yaml:"busy,omitempty" json:"busy,omitempty"`
	// Inferred marks an existing instance whose start the planner guessed;
	// Apply trusts the device, not this number.
	Inferred bool `yaml:"inferred,omitempty" json:"inferred,omitempty"`
}

// Unmet is demand the plan does not serve, with the reason.
type Unmet struct {
	Tenant  string `yaml:"tenant" json:"tenant"`
	Class   Class  `yaml:"class" json:"class"`
	Model   string `yaml:"model,omitempty" json:"model,omitempty"`
	Profile string `yaml:"profile" json:"profile"`
	Count   int    `yaml:"count" json:"count"`
	Reason  string `yaml:"reason" json:"reason"`
}

// Summary counts what the plan does. Demand is weighed in compute slices
// (a whole GPU is 7), the weights of gpucatalog.GPUEquivalent.
type Summary struct {
	GPUs               int `yaml:"gpus" json:"gpus"`
	GPUsChanged        int `yaml:"gpus_changed" json:"gpus_changed"`
	Created            int `yaml:"created" json:"created"`
	Destroyed          int `yaml:"destroyed" json:"destroyed"`
	Kept               int `yaml:"kept" json:"kept"`
	Reassigned         int `yaml:"reassigned" json:"reassigned"`
	ReservedSlices     int `yaml:"reserved_slices" json:"reserved_slices"`
	ReservedMetSlices  int `yaml:"reserved_met_slices" json:"reserved_met_slices"`
	PendingSlices      int `yaml:"pending_slices" json:"pending_slices"`
	PendingMetSlices   int `yaml:"pending_met_slices" json:"pending_met_slices"`
	UnmetInstanceCount int `yaml:"unmet_instances" json:"unmet_instances"`
}

// Validate checks a plan read back from a file: known models and profiles,
// valid and non-overlapping placements, consistent actions.
func (p Plan) Validate() error {
	var errs []error
	seen := map[string]int{}
	for i, g := range p.GPUs {
		where, err := gpuWhere(i, g.UUID, seen)
		if err != nil {
			errs = append(errs, err)
		}
		m := modelByName(g.Model)
		if m == nil {
			errs = append(errs, fmt.Errorf("%s: unknown model %q", where, g.Model))
			continue
		}
		if g.MIGDisabled && (len(g.Instances) > 0 || len(g.Remove) > 0) {
			errs = append(errs, fmt.Errorf("%s: mig_disabled but plans MIG instances", where))
		}
		var used uint8
		var n counts
		changes := 0
		for k, in := range g.Instances {
			pm, p, err := m.checkPlaced(in)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: instances[%d]: %w", where, k, err))
				continue
			}
			switch in.Action {
			case Keep:
			case Create:
				changes++
				if in.UUID != "" || in.Busy {
					errs = append(errs, fmt.Errorf("%s: instances[%d]: a created instance has no uuid and is not busy", where, k))
				}
			default:
				errs = append(errs, fmt.Errorf("%s: instances[%d]: action %q, want keep or create", where, k, in.Action))
			}
			if used&pm != 0 {
				errs = append(errs, fmt.Errorf("%s: instances[%d]: %s at slot %d overlaps another instance", where, k, in.Profile, in.Start))
			}
			used |= pm
			n[p]++
		}
		for p, c := range n {
			if p < len(m.profiles) && int(c) > m.profiles[p].MaxInstances {
				errs = append(errs, fmt.Errorf("%s: %d instances of %s, at most %d fit", where, c, m.profiles[p].Name, m.profiles[p].MaxInstances))
			}
		}
		for k, in := range g.Remove {
			if _, _, err := m.checkPlaced(in); err != nil {
				errs = append(errs, fmt.Errorf("%s: remove[%d]: %w", where, k, err))
				continue
			}
			changes++
			if in.Action != Destroy {
				errs = append(errs, fmt.Errorf("%s: remove[%d]: action %q, want destroy", where, k, in.Action))
			}
			if in.Busy {
				errs = append(errs, fmt.Errorf("%s: remove[%d]: a busy instance is never removed", where, k))
			}
		}
		if g.Changed != (changes > 0) {
			errs = append(errs, fmt.Errorf("%s: changed is %t but the plan has %d creates and destroys", where, g.Changed, changes))
		}
	}
	return fault.Validation(errors.Join(errs...))
}

func (m *modelIndex) checkPlaced(in PlannedInstance) (uint8, int, error) {
	p, ok := m.byName[in.Profile]
	if !ok {
		return 0, 0, fmt.Errorf("model %s has no profile %q", m.name, in.Profile)
	}
	pm := m.maskAt(p, in.Start)
	if pm == 0 {
		return 0, 0, fmt.Errorf("%s cannot start at slot %d (valid: %v)", in.Profile, in.Start, m.starts(p))
	}
	return pm, p, nil
}

// MIGPartedConfig is a config for NVIDIA's mig-parted (version v1 schema):
// one named config per host, devices selected by NVML index.
type MIGPartedConfig struct {
	Version    string                             `yaml:"version" json:"version"`
	MIGConfigs map[string][]MIGPartedDeviceConfig `yaml:"mig-configs" json:"mig-configs"`
}

// MIGPartedDeviceConfig is one entry of a mig-parted config.
type MIGPartedDeviceConfig struct {
	Devices    any            `yaml:"devices" json:"devices"` // "all" or a list of indexes
	MIGEnabled bool           `yaml:"mig-enabled" json:"mig-enabled"`
	MIGDevices map[string]int `yaml:"mig-devices,omitempty" json:"mig-devices,omitempty"`
}

// MIGParted turns the plan into a mig-parted config, one config per host
// named after it. mig-parted picks devices by index: a host whose GPUs lack
// an index can only be written when all its GPUs get the same layout
// ("devices: all"). mig-parted places instances itself and recreates a
// GPU's instances when its layout differs, so it does not keep busy
// instances in place; `gpumeter mig apply` does.
func (p Plan) MIGParted() (MIGPartedConfig, error) {
	type group struct {
		devices []int
		cfg     MIGPartedDeviceConfig
	}
	hosts := map[string][]GPUPlan{}
	var order []string
	for _, g := range p.GPUs {
		if _, ok := hosts[g.Host]; !ok {
			order = append(order, g.Host)
		}
		hosts[g.Host] = append(hosts[g.Host], g)
	}
	out := MIGPartedConfig{Version: "v1", MIGConfigs: map[string][]MIGPartedDeviceConfig{}}
	var errs []error
	for _, host := range order {
		gpus := hosts[host]
		name := host
		if name == "" {
			name = "default"
		}
		layout := func(g GPUPlan) MIGPartedDeviceConfig {
			c := MIGPartedDeviceConfig{MIGEnabled: !g.MIGDisabled}
			if len(g.Instances) > 0 {
				c.MIGDevices = map[string]int{}
				for _, in := range g.Instances {
					c.MIGDevices[in.Profile]++
				}
			}
			return c
		}
		same := true
		for _, g := range gpus[1:] {
			if !sameLayout(layout(gpus[0]), layout(g)) {
				same = false
				break
			}
		}
		if same {
			c := layout(gpus[0])
			c.Devices = "all"
			out.MIGConfigs[name] = []MIGPartedDeviceConfig{c}
			continue
		}
		var groups []*group
		missing := 0
		for _, g := range gpus {
			if g.Index == nil {
				missing++
				continue
			}
			c := layout(g)
			i := slices.IndexFunc(groups, func(gr *group) bool { return sameLayout(gr.cfg, c) })
			if i < 0 {
				groups = append(groups, &group{cfg: c})
				i = len(groups) - 1
			}
			groups[i].devices = append(groups[i].devices, *g.Index)
		}
		if missing > 0 {
			errs = append(errs, fmt.Errorf("host %q: %d GPUs have no index and the host's layouts differ; add index to the fleet file", host, missing))
			continue
		}
		for _, gr := range groups {
			slices.Sort(gr.devices)
			gr.cfg.Devices = gr.devices
			out.MIGConfigs[name] = append(out.MIGConfigs[name], gr.cfg)
		}
	}
	if len(errs) > 0 {
		return MIGPartedConfig{}, fault.Validationf("mig-parted config: %w", errors.Join(errs...))
	}
	return out, nil
}

func sameLayout(a, b MIGPartedDeviceConfig) bool {
	if a.MIGEnabled != b.MIGEnabled || len(a.MIGDevices) != len(b.MIGDevices) {
		return false
	}
	for k, v := range a.MIGDevices {
		if b.MIGDevices[k] != v {
			return false
		}
	}
	return true
}

// profileSlices is the demand weight of one instance of a profile, in
// compute slices (7 = one GPU), from the shared gpucatalog table.
func profileSlices(model, profile string) int {
	p, _ := gpucatalog.LookupAnyModel(model, profile)
	return p.ComputeSlices
}
