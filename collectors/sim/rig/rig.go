// Package rig wires a simulated fleet (collectors/sim) to the production
// collector, the one way `gpumeter collect --simulate` and the tests run
// it: each host's mock NVML behind collectors/nvml, and attribution by
// cgroups (pods and Slurm jobs), the fleet's map file and libvirt domains,
// over the fleet's own files.
package rig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/collectors/sim"
)

// Options are the collector's settings that the simulated fleet does not
// fix itself.
type Options struct {
	NVML    nvml.Config  // zero: nvml.DefaultConfig()
	Metrics nvml.Metrics // nil: none
	// NamespaceIsTenant and AccountIsTenant: an unmapped namespace or
	// Slurm account is its own tenant (collect's defaults, both true,
	// are DefaultOptions).
	NamespaceIsTenant bool
	AccountIsTenant   bool
}

// DefaultOptions are collect's defaults.
func DefaultOptions() Options {
	return Options{NVML: nvml.DefaultConfig(), NamespaceIsTenant: true, AccountIsTenant: true}
}

// Rig is a simulated fleet with a production collector per host.
type Rig struct {
	Fleet *sim.Fleet
	Hosts []collectors.Host
	GPUs  int // GPUs in one poll of every host
	close []func() error
}

// New builds the collector of every host of f.
func New(f *sim.Fleet, o Options, logger *slog.Logger) (*Rig, error) {
	if o.NVML == (nvml.Config{}) {
		o.NVML = nvml.DefaultConfig()
	}
	mapping, err := attribution.ParseMapping(strings.NewReader(f.MapFile()))
	if err != nil {
		return nil, fmt.Errorf("simulated fleet map: %w", err)
	}
	tenancy := attribution.Tenancy{Mapping: mapping, NamespaceIsTenant: o.NamespaceIsTenant, AccountIsTenant: o.AccountIsTenant}
	r := &Rig{Fleet: f}
	for _, h := range f.Hosts() {
		src, err := nvml.New(h.NVML(), o.NVML, logger.With("host", h.Name()), o.Metrics)
		if err != nil {
			return nil, errors.Join(err, r.Close())
		}
		r.close = append(r.close, src.Close)
		r.GPUs += len(src.GPUs())
		cg, err := attribution.NewCgroup(attribution.CgroupConfig{ProcRoot: h.ProcRoot(), PodLogDir: h.PodLogDir()}, tenancy, logger)
		if err != nil {
			return nil, errors.Join(err, r.Close())
		}
		chain := attribution.NewChain(logger,
			attribution.Step{Name: "cgroup", Attributor: cg},
			attribution.Step{Name: "static", Attributor: attribution.NewStatic(mapping)},
			// Simulated time outruns the wall clock: look at new domain
			// files every poll.
			attribution.Step{Name: "vm", Attributor: attribution.NewVM(mapping, h.LibvirtDir(), 0)})
		r.Hosts = append(r.Hosts, collectors.Host{Name: h.Name(), Sources: []collectors.NamedSource{{Name: "nvml", Source: src}}, Attributor: chain})
	}
	return r, nil
}

// Close releases every host's NVML handle.
func (r *Rig) Close() error {
	var errs []error
	for _, c := range r.close {
		errs = append(errs, c())
	}
	r.close = nil
	return errors.Join(errs...)
}

// Collect runs the collector over the fleet from its start for d, as fast
// as it computes, and hands every batch to out.
func (r *Rig) Collect(ctx context.Context, d time.Duration, out collectors.Appender, logger *slog.Logger) error {
	loop, err := collectors.NewLoop(collectors.LoopConfig{Interval: r.Fleet.Step(), Until: r.Fleet.Start().Add(d)},
		r.Hosts, attribution.Apportion, out, r.Fleet.Clock(0), logger, nil)
	if err != nil {
		return err
	}
	return loop.Run(ctx)
}

// Samples is Collect into a slice.
func (r *Rig) Samples(ctx context.Context, d time.Duration, logger *slog.Logger) ([]collectors.Sample, error) {
	var out []collectors.Sample
	err := r.Collect(ctx, d, collectors.AppenderFunc(func(_ context.Context, s []collectors.Sample) error {
		out = append(out, s...)
		return nil
	}), logger)
	return out, err
}

// Simulate builds the fleet of cfg, runs the production collector over it
// from its start for d and returns the fleet (for its ledger) and every
// sample: the whole pipeline up to the spool, in one call.
func Simulate(ctx context.Context, cfg sim.Config, o Options, d time.Duration, logger *slog.Logger) (*sim.Fleet, []collectors.Sample, error) {
	f, err := sim.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	r, err := New(f, o, logger)
	if err != nil {
		return nil, nil, err
	}
	samples, err := r.Samples(ctx, d, logger)
	return f, samples, errors.Join(err, r.Close())
}
