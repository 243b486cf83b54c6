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
	"strconv"
	"strings"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// Demand counts are bounded so that no sum the planner forms can wrap and a
// typo cannot ask it for unbounded work. No fleet comes near either limit:
// the planner never expands demand beyond what the fleet could hold, so a
// count past capacity costs nothing; the limits only guard the arithmetic.
const (
	// MaxCount is the most instances one demand line may ask for.
	MaxCount = 1_000_000
	// MaxTotalCount is the most instances a whole demand may ask for.
	MaxTotalCount = 1_000_000_000
)

// Fleet is the current state of the GPUs the planner may use.
type Fleet struct {
	GPUs []GPU `yaml:"gpus" json:"gpus"`
}

// GPU is one physical GPU and its current MIG layout.
type GPU struct {
	Host  string `yaml:"host" json:"host"`
	UUID  string `yaml:"uuid" json:"uuid"`
	Model string `yaml:"model" json:"model"` // a gpucatalog model key
	// Index is the NVML device index on its host; only the mig-parted output
	// needs it, since mig-parted selects devices by index.
	Index *int `yaml:"index,omitempty" json:"index,omitempty"`
	// MIGDisabled marks a GPU in whole-GPU mode. Turning MIG on needs a GPU
	// reset, which is the operator's call, so the planner leaves such GPUs alone.
	MIGDisabled bool       `yaml:"mig_disabled,omitempty" json:"mig_disabled,omitempty"`
	Instances   []Instance `yaml:"instances,omitempty" json:"instances,omitempty"`

	notInteger string // the index as written, when it is not an integer
}

// UnmarshalYAML decodes a GPU as usual and records an index that is not an
// integer (YAML decoders truncate index: 1.5 to 1) for Validate to refuse.
func (g *GPU) UnmarshalYAML(unmarshal func(any) error) error {
	type plain GPU
	if err := unmarshal((*plain)(g)); err != nil {
		return err
	}
	var err error
	g.notInteger, err = nonInteger(unmarshal, "index")
	return err
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

	notInteger string // the start as written, when it is not an integer
}

// UnmarshalYAML decodes an instance as usual and records a start that is
// not an integer for Validate to refuse.
func (in *Instance) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Instance
	if err := unmarshal((*plain)(in)); err != nil {
		return err
	}
	var err error
	in.notInteger, err = nonInteger(unmarshal, "start")
	return err
}

// nonInteger decodes the mapping again, scalars as text, and returns the
// value of key as written when it is present and not an integer literal,
// "" otherwise.
func nonInteger(unmarshal func(any) error, key string) (string, error) {
	var raw map[string]scalarText
	if err := unmarshal(&raw); err != nil {
		return "", err
	}
	v, ok := raw[key]
	if !ok || !v.scalar || v.text == "" || isIntegerLiteral(v.text) {
		return "", nil
	}
	return v.text, nil
}

// scalarText is a YAML value as written when it is a scalar; sequences
// and mappings decode to nothing.
type scalarText struct {
	text   string
	scalar bool
}

func (s *scalarText) UnmarshalYAML(unmarshal func(any) error) error {
	var t string
	if unmarshal(&t) == nil {
		s.text, s.scalar = t, true
	}
	return nil
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
	// Count is between 1 and MaxCount, and an integer in the file: YAML
	// decoders truncate count: 1.5 to 1, so UnmarshalYAML keeps the text of
	// a count that is not an integer literal for Validate to refuse.
	Count int `yaml:"count" json:"count"`

	notInteger string // the count as written, when it is not an integer
}

// UnmarshalYAML decodes a request as usual (strictness included) and
// records a count written as something other than an integer literal. The
// signature is the parser-neutral one (yaml.v2 and v3, goccy/go-yaml), so
// the package needs no YAML import. JSON needs nothing: encoding/json
// refuses 1.5 for an int.
func (r *Request) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Request
	if err := unmarshal((*plain)(r)); err != nil {
		return err
	}
	// Every field is a scalar, so the mapping decodes as text as written.
	var text map[string]string
	if err := unmarshal(&text); err != nil {
		return err
	}
	r.notInteger = ""
	if c, ok := text["count"]; ok && !isIntegerLiteral(c) {
		r.notInteger = c
	}
	return nil
}

// isIntegerLiteral reports whether s is an integer as YAML resolves plain
// scalars (decimal, 0x, 0o or 0b, with _ separators), not a float.
func isIntegerLiteral(s string) bool {
	_, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
	return err == nil
}

// Validate reports every problem of the fleet: unknown models or profiles,
// duplicate GPU UUIDs, an NVML index twice on one host, a MIG UUID twice
// anywhere in the fleet, invalid or overlapping placements, too many
// instances of a profile, and instances of unknown placement that fit no
// valid layout. Fleets read from ClickHouse pass through it too.
func (f Fleet) Validate() error {
	type hostIndex struct {
		host  string
		index int
	}
	type migAt struct{ gpu, inst int }
	var errs []error
	seen := make(map[string]int, len(f.GPUs))
	indexes := make(map[hostIndex]int, len(f.GPUs))
	migs := map[string]migAt{}
	for i, g := range f.GPUs {
		where, err := gpuWhere(i, g.UUID, seen)
		if err != nil {
			errs = append(errs, err)
		}
		if g.notInteger != "" {
			errs = append(errs, fmt.Errorf("%s: index %s is not an integer", where, g.notInteger))
		} else if g.Index != nil {
			k := hostIndex{g.Host, *g.Index}
			switch j, dup := indexes[k]; {
			case *g.Index < 0:
				errs = append(errs, fmt.Errorf("%s: index %d is negative", where, *g.Index))
			case dup:
				errs = append(errs, fmt.Errorf("%s: index %d on host %q repeats gpus[%d]", where, *g.Index, g.Host, j))
			default:
				indexes[k] = i
			}
		}
		badStart := false
		for k, in := range g.Instances {
			if in.notInteger != "" {
				errs = append(errs, fmt.Errorf("%s: instances[%d]: start %s is not an integer", where, k, in.notInteger))
				badStart = true
			}
			if in.UUID == "" {
				continue
			}
			if at, dup := migs[in.UUID]; dup {
				errs = append(errs, fmt.Errorf("%s: instances[%d]: uuid %s repeats gpus[%d] instances[%d]", where, k, in.UUID, at.gpu, at.inst))
				continue
			}
			migs[in.UUID] = migAt{i, k}
		}
		m := modelByName(g.Model)
		if m == nil {
			errs = append(errs, fmt.Errorf("%s: unknown model %q (known: %v)", where, g.Model, gpucatalog.Models()))
			continue
		}
		if g.MIGDisabled && len(g.Instances) > 0 {
			errs = append(errs, fmt.Errorf("%s: mig_disabled but lists %d MIG instances", where, len(g.Instances)))
			continue
		}
		if badStart {
			continue
		}
		if _, err := m.resolve(g.Instances); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
	}
	return fault.Validation(errors.Join(errs...))
}

// Validate reports every problem of the demand: empty or repeated tenants,
// unknown models or profiles, and counts that are not integers, not
// positive, above MaxCount, or that add up to more than MaxTotalCount.
func (d Demand) Validate() error {
	var errs []error
	seen := make(map[string]int, len(d.Tenants))
	total := 0 // of valid lines, each at most MaxCount: it stops short of wrapping
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
				} else if total <= MaxTotalCount {
					total += r.Count
				}
			}
		}
	}
	if total > MaxTotalCount {
		errs = append(errs, fmt.Errorf("demand asks for more than %d instances in all", MaxTotalCount))
	}
	return fault.Validation(errors.Join(errs...))
}

func (r Request) validate() error {
	var errs []error
	switch {
	case r.notInteger != "":
		errs = append(errs, fmt.Errorf("count %s is not an integer", r.notInteger))
	case r.Count <= 0:
		errs = append(errs, fmt.Errorf("count %d is not positive", r.Count))
	case r.Count > MaxCount:
		errs = append(errs, fmt.Errorf("count %d exceeds the limit of %d per line", r.Count, MaxCount))
	}
	switch {
	case r.Profile == "":
		errs = append(errs, errors.New("profile is empty"))
	case r.Model != "":
		if modelByName(r.Model) == nil {
			errs = append(errs, fmt.Errorf("unknown model %q", r.Model))
		} else if _, ok := gpucatalog.Lookup(r.Model, r.Profile); !ok {
			errs = append(errs, fmt.Errorf("model %s has no profile %q", r.Model, r.Profile))
		}
	default:
		if len(gpucatalog.ModelsWithProfile(r.Profile)) == 0 {
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
