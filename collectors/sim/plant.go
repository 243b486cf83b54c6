package sim

import (
	"errors"
	"fmt"
	"time"
)

// Plants are usage patterns planted on purpose, for the insights tests: a
// tenant hoarding idle whole GPUs, a tenant on an oversized MIG instance
// and a one-hour usage (and so spend) spike. They all go on the plant
// host, the first DGX host (an H100-SXM5-80GB: GPM reports SM activity
// per MIG instance, which right-sizing needs). Config.Plants nil plants
// nothing, and a fleet without plants runs exactly as before.
//
// Planted tenants are tenants of their own (department PlantDepartment),
// mapped by namespace and Slurm account in MapFile; the fleet's random
// work never goes to them, so everything they hold is the plant.
type Plants struct {
	// Hoarder holds the plant host's first HoardGPUs whole GPUs from the
	// start for the whole run, with 0 or 1 % SM activity and 2 GiB of
	// memory. Empty: no hoarder.
	Hoarder   string
	HoardGPUs int // at least 1 with a hoarder

	// OversizedMIG rents the plant host's first MIG GPU as one 7g
	// instance and runs one workload on it for the whole run: 6 GiB of
	// memory (a 1g.10gb holds it, with 10 % headroom) and 8 to 12 % SM
	// activity (under 1/7 of the GPU with 10 % headroom, above the 5 %
	// idle threshold). Empty: none.
	OversizedMIG string

	// Spike runs SpikeGPUs whole GPUs of the plant host (after the
	// hoarder's) at 90 to 99 % SM activity for the one hour [SpikeAt,
	// SpikeAt+1h), and holds nothing at any other time. SpikeAt is a whole
	// UTC hour at or after the fleet's start. With the default anomaly
	// parameters (spread at least 1 GPU-hour, threshold 5) a spike over a
	// zero baseline needs 5 GPUs or more to be found. Empty: no spike.
	Spike     string
	SpikeAt   time.Time
	SpikeGPUs int // at least 1 with a spike
}

// PlantDepartment is the department of planted tenants.
const PlantDepartment = "plants"

// any reports whether anything is planted.
func (p *Plants) any() bool {
	return p != nil && (p.Hoarder != "" || p.OversizedMIG != "" || p.Spike != "")
}

// validate checks the plants against the fleet's config.
func (p *Plants) validate(c Config) error {
	if !p.any() {
		return nil
	}
	var errs []error
	if c.Hosts < 1 {
		errs = append(errs, errors.New("plants: need a DGX host (hosts ≥ 1)"))
	}
	n := c.GPUsPerHost
	whole, mig := n/2, n/4
	if n == 1 {
		whole = 1
	}
	wholeNeeded := 0
	if p.Hoarder != "" {
		if p.HoardGPUs < 1 {
			errs = append(errs, fmt.Errorf("plants: hoard gpus %d, want at least 1", p.HoardGPUs))
		}
		wholeNeeded += max(p.HoardGPUs, 0)
	}
	if p.Spike != "" {
		if p.SpikeGPUs < 1 {
			errs = append(errs, fmt.Errorf("plants: spike gpus %d, want at least 1", p.SpikeGPUs))
		}
		wholeNeeded += max(p.SpikeGPUs, 0)
		start := c.Start.UTC().Truncate(max(c.Step, time.Second))
		switch {
		case p.SpikeAt.IsZero():
			errs = append(errs, errors.New("plants: spike at is missing"))
		case !p.SpikeAt.Equal(p.SpikeAt.Truncate(time.Hour)):
			errs = append(errs, fmt.Errorf("plants: spike at %s is not a whole hour", p.SpikeAt.UTC().Format(time.RFC3339)))
		case p.SpikeAt.Before(start):
			errs = append(errs, fmt.Errorf("plants: spike at %s is before the fleet starts (%s)", p.SpikeAt.UTC().Format(time.RFC3339), start.Format(time.RFC3339)))
		case c.Step > 0 && time.Hour%c.Step != 0:
			errs = append(errs, fmt.Errorf("plants: a spike needs a step that divides an hour, not %s", c.Step))
		}
	}
	if wholeNeeded > whole {
		errs = append(errs, fmt.Errorf("plants: %d whole GPUs planted, the plant host has %d (half of %d per host)", wholeNeeded, whole, n))
	}
	if p.OversizedMIG != "" && mig < 1 {
		errs = append(errs, fmt.Errorf("plants: an oversized MIG tenant needs a MIG GPU (4 or more GPUs per host, not %d)", n))
	}
	names := map[string]bool{}
	for _, t := range fleetTenants {
		names[t.name], names[t.account] = true, true
		for _, ns := range t.namespaces {
			names[ns] = true
		}
	}
	for _, t := range []string{p.Hoarder, p.OversizedMIG, p.Spike} {
		if t == "" {
			continue
		}
		if names[t] {
			errs = append(errs, fmt.Errorf("plants: tenant %q is taken (a fleet tenant, namespace, account or another plant)", t))
		}
		names[t] = true
	}
	return errors.Join(errs...)
}

// tenants are the planted tenants, mapped like the fleet's.
func (p *Plants) tenants() []tenantSpec {
	var out []tenantSpec
	for _, t := range []string{p.Hoarder, p.OversizedMIG, p.Spike} {
		if t != "" {
			out = append(out, tenantSpec{name: t, department: PlantDepartment, namespaces: []string{t}, account: t})
		}
	}
	return out
}

func plantTenant(name string) tenantSpec {
	return tenantSpec{name: name, department: PlantDepartment, namespaces: []string{name}, account: name}
}

// The plant host's GPU roles.
const (
	roleHoard gpuRole = iota + 100
	roleSpike
	roleOversized
)

// plantRole is GPU i's role on the plant host when a plant takes it, and
// whether one does. whole is the number of whole-GPU roles.
func (p *Plants) plantRole(i, whole int) (gpuRole, bool) {
	k := i
	if p.Hoarder != "" {
		if k < p.HoardGPUs {
			return roleHoard, true
		}
		k -= p.HoardGPUs
	}
	if p.Spike != "" && k < p.SpikeGPUs {
		return roleSpike, true
	}
	if p.OversizedMIG != "" && i == whole {
		return roleOversized, true
	}
	return 0, false
}

// plantBoundary starts the planted work of GPU i at boundary t.
func (s *scheduler) plantBoundary(t time.Time, i int, busy int) error {
	if busy > 0 {
		return nil
	}
	p := s.plants
	g := s.h.gpus[i]
	switch s.roles[i] {
	case roleHoard:
		return s.startPlant(t, i, "", plantTenant(p.Hoarder), 2<<30, func(step int64) uint32 { return uint32(splitmix(uint64(step)) % 2) }, time.Time{})
	case roleOversized:
		ins := g.Instances()
		if len(ins) == 0 {
			return nil
		}
		return s.startPlant(t, i, ins[0].uuid, plantTenant(p.OversizedMIG), 6<<30, func(step int64) uint32 { return 8 + uint32(splitmix(uint64(step)^0x0515e)%5) }, time.Time{})
	case roleSpike:
		end := p.SpikeAt.Add(time.Hour)
		if t.Before(p.SpikeAt) || !t.Before(end) {
			return nil
		}
		return s.startPlant(t, i, "", plantTenant(p.Spike), g.memTotal*6/10&^(1<<20-1), func(step int64) uint32 { return 90 + uint32(splitmix(uint64(step)^0x5b1e)%10) }, end)
	}
	return nil
}

// startPlant starts one planted workload; a zero end runs it for good.
// It draws nothing from the scheduler's random source.
func (s *scheduler) startPlant(now time.Time, gpu int, mig string, t tenantSpec, mem uint64, util func(int64) uint32, end time.Time) error {
	h := s.h
	s.jobs++
	p := Process{GPU: gpu, MIG: mig, MemBytes: mem, Util: util, Workload: Workload{Tenant: t.name, Department: t.department}}
	name := fmt.Sprintf("plant-%s-%d", t.name, s.jobs)
	if h.cfg.Cgroup == KubernetesSystemd || h.cfg.Cgroup == KubernetesCgroupfs {
		p.Workload.Pod = &Pod{Namespace: t.namespaces[0], Name: name, UID: uuidFrom(h.cfg.Name, "pod", fmt.Sprint(s.jobs))}
	} else {
		p.Workload.Slurm = &SlurmJob{ID: fmt.Sprint(100000 + s.jobs), Account: t.account}
	}
	pid, err := h.Start(p)
	if err != nil {
		return err
	}
	if !end.IsZero() {
		s.ends[pid] = end
	}
	return nil
}
