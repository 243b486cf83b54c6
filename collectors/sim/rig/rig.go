// Package rig wires a simulated fleet (collectors/sim) to the production
// collector, the one way `gpumeter collect --simulate` and the tests run
// it: each host's mock NVML behind collectors/nvml, and attribution by
// cgroups (pods and Slurm jobs), the fleet's map file and libvirt domains,
// over the fleet's own files.
package rig

import (
	"bytes"
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
	// Apportion are the apportioning options (zero: collect's defaults;
	// Granted bills HAMi-shared GPUs by their grants).
	Apportion attribution.Options
}

// DefaultOptions are collect's defaults.
func DefaultOptions() Options {
	return Options{NVML: nvml.DefaultConfig(), NamespaceIsTenant: true, AccountIsTenant: true}
}

// Rig is a simulated fleet with a production collector per host.
type Rig struct {
	Fleet     *sim.Fleet
	Hosts     []collectors.Host
	GPUs      int // GPUs in one poll of every host
	apportion attribution.Options
	close     []func() error
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
	r := &Rig{Fleet: f, apportion: o.Apportion}
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
		steps, err := r.kubeSteps(h, tenancy)
		if err != nil {
			return nil, errors.Join(err, r.Close())
		}
		chain := attribution.NewChain(logger, append(steps,
			attribution.Step{Name: "cgroup", Attributor: cg},
			attribution.Step{Name: "static", Attributor: attribution.NewStatic(mapping)},
			// Simulated time outruns the wall clock: look at new domain
			// files every poll.
			attribution.Step{Name: "vm", Attributor: attribution.NewVM(mapping, h.LibvirtDir(), 0)})...)
		r.Hosts = append(r.Hosts, collectors.Host{Name: h.Name(), Sources: []collectors.NamedSource{{Name: "nvml", Source: src}}, Attributor: chain})
	}
	return r, nil
}

// kubeSteps are a Kubernetes host's first attribution steps: the kubelet's
// PodResources (served by the host on its socket) with DRA devices
// resolved from the host's ResourceSlices, then HAMi's annotations from the
// host's pod list. Other hosts have none.
func (r *Rig) kubeSteps(h *sim.Host, tenancy attribution.Tenancy) ([]attribution.Step, error) {
	k := h.Kube()
	if k == nil {
		return nil, nil
	}
	stop, err := k.ServePodResources(h.KubeletSocket())
	if err != nil {
		return nil, err
	}
	r.close = append(r.close, stop)
	kcfg := attribution.DefaultKubeletConfig()
	kcfg.Socket = h.KubeletSocket()
	kube, err := attribution.NewKubelet(kcfg, tenancy, sliceResolver{k: k, node: h.Name(), drivers: kcfg.DRADrivers})
	if err != nil {
		return nil, err
	}
	r.close = append(r.close, kube.Close)
	hami, err := attribution.NewHAMi(podList{k}, h.Name(), tenancy)
	if err != nil {
		return nil, err
	}
	return []attribution.Step{{Name: "kubelet", Attributor: kube}, {Name: "hami", Attributor: hami}}, nil
}

// sliceResolver resolves DRA devices from the simulated node's slices, as
// attribution.ResourceSlices does from the API server's.
type sliceResolver struct {
	k       *sim.KubeNode
	node    string
	drivers []string
}

func (s sliceResolver) DeviceUUIDs(context.Context, []attribution.DRADevice) (map[attribution.DRADevice]string, error) {
	return attribution.SliceDeviceUUIDs(s.k.ResourceSlices(), s.node, s.drivers), nil
}

// podList is the simulated kubelet's /pods, decoded as the collector
// decodes the real one.
type podList struct{ k *sim.KubeNode }

func (p podList) Pods(context.Context) ([]attribution.PodMeta, error) {
	b, err := p.k.PodList()
	if err != nil {
		return nil, err
	}
	return attribution.DecodePodList(bytes.NewReader(b))
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
		r.Hosts, r.apportion.Apportion, out, r.Fleet.Clock(0), logger, nil)
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
