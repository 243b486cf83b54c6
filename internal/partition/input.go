// Package partition plans MIG layouts for a GPU fleet from what tenants
// reserved and requested, and applies a plan to one host through NVML.
//
// The planner (Solve) is pure: it takes the fleet and the demand as values
// and returns a Plan. Only the apply step (apply.go) talks to NVML, and it
// changes nothing unless asked to.
package partition

import (
	"errors"
	"fmt"

	"github.com/gpumeter/gpumeter/internal/migprofile"
)

// Fleet is the current state of the GPUs the planner may use.
type Fleet struct {
	GPUs []GPU `yaml:"gpus" json:"gpus"`
}

// GPU is one physical GPU and its current MIG layout.
type GPU struct {
	Host  string `yaml:"host" json:"host"`
	UUID  string `yaml:"uuid" json:"uuid"`
	Model string `yaml:"model" json:"model"` // a migprofile model key
	// Index is the NVML device index on its host; only the mig-parted output
	// needs it, since mig-parted selects devices by index.
	Index *int `yaml:"index,omitempty" json:"index,omitempty"`
	// MIGDisabled marks a GPU in whole-GPU mode. Turning MIG on needs a GPU
	// reset, which is the operator's call, so the planner leaves such GPUs alone.
	MIGDisabled bool       `yaml:"mig_disabled,omitempty" json:"mig_disabled,omitempty"`
	Instances   []Instance `yaml:"instances,omitempty" json:"instances,omitempty"`
}

// Instance is an existing GPU instance.
type Instance struct {
	Profile string `yaml:"profile" json:"profile"`
	// Start is the first memory slot of the placement. Nil means unknown
	// (usage samples carry no placement); the planner then infers a valid one.
	Start  *int   `yaml:"start,omitempty" json:"start,omitempty"`
	UUID   string `yaml:"uuid,omitempty" json:"uuid,omitempty"` // MIG device UUID
	Tenant string `yaml:"tenant,omitempty" json:"tenant,omitempty"`
	// Busy instances run work: the planner never moves, removes or reassigns them.
	Busy bool `yaml:"busy,omitempty" json:"busy,omitempty"`
}

// Demand is what tenants want from the fleet.
type Demand struct {
	Tenants []TenantDemand `yaml:"tenants" json:"tenants"`
}

// TenantDemand is one tenant's contracted and requested instances. Both are
// totals the tenant should hold, counting the instances it holds already.
// Reserved demand is served before any pending demand.
type TenantDemand struct {
	Tenant   string    `yaml:"tenant" json:"tenant"`
	Reserved []Request `yaml:"reserved,omitempty" json:"reserved,omitempty"`
	Pending  []Request `yaml:"pending,omitempty" json:"pending,omitempty"`
}

// Request asks for Count instances of a profile. Model may be empty: the
// profile is then served by any model that has it (3g.40gb on A100-SXM4-80GB
// or H100-SXM5-80GB).
type Request struct {
	Model   string `yaml:"model,omitempty" json:"model,omitempty"`
	Profile string `yaml:"profile" json:"profile"`
	Count   int    `yaml:"count" json:"count"`
}

// Validate reports every problem of the fleet: unknown models or profiles,
// duplicate UUIDs, invalid or overlapping placements, too many instances of
// a profile, and instances of unknown placement that fit no valid layout.
func (f Fleet) Validate() error {
	var errs []error
	seen := make(map[string]int, len(f.GPUs))
	for i, g := range f.GPUs {
		where, err := gpuWhere(i, g.UUID, seen)
		if err != nil {
			errs = append(errs, err)
		}
		if g.Index != nil && *g.Index < 0 {
			errs = append(errs, fmt.Errorf("%s: index %d is negative", where, *g.Index))
		}
		m := modelByName(g.Model)
		if m == nil {
			errs = append(errs, fmt.Errorf("%s: unknown model %q (known: %v)", where, g.Model, migprofile.Models()))
			continue
		}
		if g.MIGDisabled && len(g.Instances) > 0 {
			errs = append(errs, fmt.Errorf("%s: mig_disabled but lists %d MIG instances", where, len(g.Instances)))
			continue
		}
		if _, err := m.resolve(g.Instances); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
	}
	return errors.Join(errs...)
}

// Validate reports every problem of the demand: empty or repeated tenants,
// unknown models or profiles, and counts that are not positive.
func (d Demand) Validate() error {
	var errs []error
	seen := make(map[string]int, len(d.Tenants))
	for i, t := range d.Tenants {
		where := fmt.Sprintf("tenants[%d]", i)
		if t.Tenant == "" {
			errs = append(errs, fmt.Errorf("%s: tenant is empty", where))
		} else {
			where = fmt.Sprintf("tenants[%d] (%s)", i, t.Tenant)
			if j, dup := seen[t.Tenant]; dup {
				errs = append(errs, fmt.Errorf("%s: tenant repeats tenants[%d]", where, j))
			}
			seen[t.Tenant] = i
		}
		for _, c := range []struct {
			class Class
			reqs  []Request
		}{{Reserved, t.Reserved}, {Pending, t.Pending}} {
			for k, r := range c.reqs {
				if err := r.validate(); err != nil {
					errs = append(errs, fmt.Errorf("%s: %s[%d]: %w", where, c.class, k, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

func (r Request) validate() error {
	var errs []error
	if r.Count <= 0 {
		errs = append(errs, fmt.Errorf("count %d is not positive", r.Count))
	}
	switch {
	case r.Profile == "":
		errs = append(errs, errors.New("profile is empty"))
	case r.Model != "":
		if modelByName(r.Model) == nil {
			errs = append(errs, fmt.Errorf("unknown model %q", r.Model))
		} else if _, ok := migprofile.Lookup(r.Model, r.Profile); !ok {
			errs = append(errs, fmt.Errorf("model %s has no profile %q", r.Model, r.Profile))
		}
	default:
		if len(migprofile.ModelsWithProfile(r.Profile)) == 0 {
			errs = append(errs, fmt.Errorf("no model has profile %q", r.Profile))
		}
	}
	return errors.Join(errs...)
}

// Class orders demand: reserved before pending.
type Class string

const (
	Reserved Class = "reserved"
	Pending  Class = "pending"
)

// gpuWhere names gpus[i] for messages and reports an empty or repeated
// UUID, recording it in seen.
func gpuWhere(i int, uuid string, seen map[string]int) (string, error) {
	if uuid == "" {
		where := fmt.Sprintf("gpus[%d]", i)
		return where, fmt.Errorf("%s: uuid is empty", where)
	}
	where := fmt.Sprintf("gpus[%d] (%s)", i, uuid)
	if j, dup := seen[uuid]; dup {
		return where, fmt.Errorf("%s: uuid repeats gpus[%d]", where, j)
	}
	seen[uuid] = i
	return where, nil
}
