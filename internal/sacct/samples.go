package sacct

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/importer"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// SKUMap maps GRES types to SKUs.
type SKUMap struct {
	// Types maps a GRES type ("a100", as in gres.conf and AllocTRES's
	// gres/gpu:a100) to a GPU model SKU ("A100-SXM4-80GB") or a MIG SKU
	// ("A100-SXM4-80GB/3g.40gb") for MIG devices Slurm schedules as GRES.
	Types map[string]string
	// Untyped is the SKU of GPUs AllocTRES counts without a type (a
	// cluster whose gres.conf names none); empty: such GPUs are refused.
	Untyped string
}

// LoadSKUMap reads a SKU map file (ParseSKUMap).
func LoadSKUMap(path string) (SKUMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return SKUMap{}, fmt.Errorf("sku map: %w", err)
	}
	defer f.Close()
	m, err := ParseSKUMap(f)
	if ve, ok := err.(*importer.ValidationError); ok {
		return SKUMap{}, ve.InFile(path)
	}
	if err != nil {
		return SKUMap{}, fmt.Errorf("sku map %s: %w", path, err)
	}
	return m, nil
}

// ParseSKUMap reads the YAML form:
//
//	gres:
//	  a100: A100-SXM4-80GB
//	  h100: H100-SXM5-80GB
//	  a100_3g.40gb: A100-SXM4-80GB/3g.40gb
//	untyped: H100-SXM5-80GB   # GPUs counted without a type
//
// Problems (unknown keys, SKUs not in NVIDIA's tables' spelling, MIG
// profiles a model does not have) are reported with their lines.
func ParseSKUMap(r io.Reader) (SKUMap, error) {
	var doc yaml.Node
	if err := yaml.NewDecoder(r).Decode(&doc); err != nil {
		if err == io.EOF {
			return SKUMap{}, &importer.ValidationError{Problems: []importer.Problem{{Line: 1, Msg: "empty: want gres: and/or untyped:"}}}
		}
		return SKUMap{}, fault.Validationf("not YAML: %w", err)
	}
	var ps problems
	m := SKUMap{Types: map[string]string{}}
	top := &doc
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	if top.Kind != yaml.MappingNode {
		ps.add(top.Line, "", "want a mapping with gres: and untyped:")
		return SKUMap{}, ps.err()
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		switch k.Value {
		case "gres":
			if v.Kind != yaml.MappingNode {
				ps.add(v.Line, "gres", "want a mapping of GRES type to SKU")
				continue
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				t, s := v.Content[j], v.Content[j+1]
				field := "gres." + t.Value
				switch {
				case t.Kind != yaml.ScalarNode || t.Value == "" || strings.ContainsAny(t.Value, " \t,=:"):
					ps.add(t.Line, field, "not a GRES type")
				case s.Kind != yaml.ScalarNode:
					ps.add(s.Line, field, "want a SKU")
				default:
					if _, dup := m.Types[t.Value]; dup {
						ps.add(t.Line, field, "given twice")
					} else if err := checkSKU(s.Value); err != nil {
						ps.add(s.Line, field, err.Error())
					}
					m.Types[t.Value] = s.Value
				}
			}
		case "untyped":
			if v.Kind != yaml.ScalarNode {
				ps.add(v.Line, "untyped", "want a SKU")
			} else if err := checkSKU(v.Value); err != nil {
				ps.add(v.Line, "untyped", err.Error())
			}
			m.Untyped = v.Value
		default:
			ps.add(k.Line, k.Value, "unknown key (want gres or untyped)")
		}
	}
	if err := ps.err(); err != nil {
		return SKUMap{}, err
	}
	return m, nil
}

// checkSKU accepts a whole-GPU SKU (any model; NVIDIA's table models in
// their canonical spelling) or a MIG SKU of a known model and profile.
func checkSKU(sku string) error {
	model, profile := gpucatalog.ParseSKU(sku)
	if model == "" || strings.ContainsAny(sku, " \t") {
		return fmt.Errorf("%q is not a SKU", sku)
	}
	if gpucatalog.ProfileKind(profile) == gpucatalog.KindVGPU {
		return fmt.Errorf("%q is a vGPU SKU: Slurm GRES are GPUs or MIG devices", sku)
	}
	if err := gpucatalog.CheckSKU(sku); err != nil {
		return err
	}
	if profile != "" {
		if _, ok := gpucatalog.Lookup(model, profile); !ok {
			return fmt.Errorf("%q: a MIG SKU needs a model and profile of NVIDIA's tables (%s)", sku, strings.Join(gpucatalog.Models(), ", "))
		}
	}
	return nil
}

// Config says how jobs become samples.
type Config struct {
	SKUs SKUMap
	// Tenancy maps accounts to tenants and departments (the collector's
	// map file: account lines, and AccountIsTenant).
	Tenancy attribution.Tenancy
}

// Summary counts what Samples did with the lines.
type Summary struct {
	Jobs        int // job lines (allocations)
	Steps       int // step lines: skipped, their job's line holds the allocation
	Unfinished  int // jobs without an end (running) or that never started: skipped
	WithoutGPUs int // jobs that ran without GPUs (or for no time)
	WithGPUs    int // jobs that became samples
	// GPUMicroseconds is the GPU time of the samples by SKU (GPU-
	// equivalents: a MIG device counts its slices / 7).
	GPUMicroseconds map[string]uint64
}

// Samples turns jobs into importer rows: for every GPU a job held, one
// sample per hour (or part of an hour) from Start to End, on a device
// named for the job and the GPU's index ("SLURM-<cluster>-<job>-<n>"),
// host = the cluster, tenant and department from the account, workload
// "slurm/<job id>", SKU from the GRES type. sacct knows the allocation,
// not what ran on it: SM activity, energy and traffic are unmeasured,
// memory is 0. Steps, running jobs, jobs that never ran and jobs without
// GPUs make no rows. A job whose GPUs cannot be priced (a type the map
// lacks, GPUs asked for but not in AllocTRES) is a problem naming its
// line; with any problem no rows are returned.
//
// Ids follow from host, device, tenant, workload and hour, so a second
// import of the same jobs finds its rows stored and adds nothing, and an
// import after the account map changed claims the job's devices twice,
// which the import's capacity check refuses rather than doubling.
func Samples(jobs []Job, cfg Config) ([]importer.Row, Summary, error) {
	sum := Summary{GPUMicroseconds: map[string]uint64{}}
	var ps problems
	var rows []importer.Row
	for _, j := range jobs {
		if j.IsStep() {
			sum.Steps++
			continue
		}
		sum.Jobs++
		if j.Start.IsZero() || j.End.IsZero() {
			sum.Unfinished++
			continue
		}
		span := j.End.Sub(j.Start)
		if span < 0 {
			ps.add(j.Line, "End", fmt.Sprintf("%s is before Start %s", j.End.Format(time.RFC3339), j.Start.Format(time.RFC3339)))
			continue
		}
		if j.GPUCount() == 0 || span == 0 {
			if j.RequestedGPUs > 0 && span > 0 {
				ps.add(j.Line, "AllocTRES", fmt.Sprintf("no gres/gpu, but ReqTRES asks for %d GPUs: add gres/gpu to AccountingStorageTRES in slurm.conf, or these GPUs go unbilled", j.RequestedGPUs))
				continue
			}
			sum.WithoutGPUs++
			continue
		}
		if j.Elapsed != span {
			ps.add(j.Line, "Elapsed", fmt.Sprintf("%s, but End - Start is %s: times in another zone than the location given (a daylight saving change), or a suspended job", j.Elapsed, span))
			continue
		}
		id := j.JobIDRaw
		if id == "" {
			if !isDigits(j.JobID) {
				ps.add(j.Line, "JobIDRaw", fmt.Sprintf("missing: job %s is an array task or het component, whose own id only JobIDRaw holds", j.JobID))
				continue
			}
			id = j.JobID
		}
		if j.Cluster == "" {
			ps.add(j.Line, "Cluster", "empty: give the cluster")
			continue
		}
		before := len(ps.Problems)
		skus := make([]string, 0, len(j.GPUs))
		for _, g := range j.GPUs {
			sku, ok := cfg.SKUs.Types[g.Type]
			if g.Type == "" {
				sku, ok = cfg.SKUs.Untyped, cfg.SKUs.Untyped != ""
			}
			if !ok {
				what := fmt.Sprintf("GRES type %q has no SKU: add it under gres: in the SKU map", g.Type)
				if g.Type == "" {
					what = fmt.Sprintf("%d GPUs without a type: name their SKU as untyped: in the SKU map", g.Count)
				}
				ps.add(j.Line, "AllocTRES", what)
			}
			skus = append(skus, sku)
		}
		if len(ps.Problems) > before {
			continue
		}
		owner := collectors.Owner{Tenant: collectors.UnattributedTenant, Workload: "slurm/" + id}
		if t, ok := cfg.Tenancy.Account(j.Account); ok {
			owner.Tenant, owner.Department = t.Name, t.Department
		}
		sum.WithGPUs++
		n := 0
		for gi, g := range j.GPUs {
			model, profile := gpucatalog.ParseSKU(skus[gi])
			slices := gpucatalog.ComputeSlices
			if profile != "" {
				p, _ := gpucatalog.Lookup(model, profile)
				slices = p.ComputeSlices
			}
			for range g.Count {
				dev := fmt.Sprintf("SLURM-%s-%s-%d", j.Cluster, id, n)
				n++
				for from := j.Start; from.Before(j.End); {
					to := from.Truncate(time.Hour).Add(time.Hour)
					if to.After(j.End) {
						to = j.End
					}
					s := collectors.Sample{
						Host: j.Cluster, GPUUUID: dev, GPUModel: model, SKU: skus[gi],
						Tenant: owner.Tenant, Department: owner.Department, Workload: owner.Workload,
						Start: from, End: to, Unmeasured: meter.UnmeasuredAll,
					}
					s.GPUMicroseconds = uint64(to.Sub(from)/time.Microsecond) * uint64(slices) / gpucatalog.ComputeSlices
					if profile != "" {
						s.MIGUUID, s.MIGProfile = dev+"-"+profile, profile
					}
					sum.GPUMicroseconds[s.SKU] += s.GPUMicroseconds
					rows = append(rows, importer.Row{Line: j.Line, Sample: s})
					from = to
				}
			}
		}
	}
	if err := ps.err(); err != nil {
		return nil, sum, err
	}
	return rows, sum, nil
}
