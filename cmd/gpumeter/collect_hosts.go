package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/metrics"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/collectors/sim"
)

// hostSet is what the poll loop reads: the hosts with their sources and
// attribution, the clock, and when a finite run ends.
type hostSet struct {
	hosts   []collectors.Host
	gpus    int // GPUs in one poll, for the spool's size check
	clock   collectors.Clock
	until   time.Time  // zero: until interrupted
	fleet   *sim.Fleet // the simulated fleet, for its ledger; nil on NVML
	closers []func() error
}

func (hs *hostSet) close(logger *slog.Logger) {
	for _, c := range hs.closers {
		if err := c(); err != nil {
			logger.Warn("close", "err", err)
		}
	}
}

// simulatedHosts builds the simulated DGX fleet (and with --vgpu a vGPU
// host): each host's mock NVML behind the production NVML source, and
// cgroup attribution over the fleet's own /proc and pod logs.
func simulatedHosts(f collectFlags, nvmlCfg nvml.Config, observer *metrics.Observer, logger *slog.Logger) (hostSet, error) {
	var hs hostSet
	// By default a finite run covers the hours up to the last full hour
	// (re-running within the hour writes the same samples again); an
	// open-ended one starts now.
	start := time.Now().UTC().Truncate(f.interval)
	if f.duration > 0 {
		start = time.Now().UTC().Truncate(time.Hour).Add(-f.duration)
	}
	if f.start != "" {
		start, _ = time.Parse(time.RFC3339, f.start) // checked by parseCollectFlags
	}
	root, err := os.MkdirTemp("", "gpumeter-sim-")
	if err != nil {
		return hs, fmt.Errorf("simulated fleet: %w", err)
	}
	hs.closers = append(hs.closers, func() error { return os.RemoveAll(root) })
	vgpuHosts := 0
	if f.vgpu {
		vgpuHosts = 1
	}
	plants, _ := f.plants.parse(true) // checked by parseCollectFlags
	fleet, err := sim.New(sim.Config{Hosts: f.hosts, VGPUHosts: vgpuHosts, GPUsPerHost: f.gpus, Seed: f.seed, Start: start, Step: f.interval, Root: root, Plants: plants})
	if err != nil {
		return hs, usageError{err}
	}
	hs.fleet = fleet
	mapping, err := attribution.ParseMapping(strings.NewReader(fleet.MapFile()))
	if err != nil {
		return hs, fmt.Errorf("simulated fleet map: %w", err)
	}
	tenancy := attribution.Tenancy{Mapping: mapping, NamespaceIsTenant: f.namespaceIsTenant, AccountIsTenant: f.accountIsTenant}
	for _, h := range fleet.Hosts() {
		src, err := nvml.New(h.NVML(), nvmlCfg, logger.With("host", h.Name()), observer)
		if err != nil {
			return hs, err
		}
		hs.closers = append(hs.closers, src.Close)
		hs.gpus += len(src.GPUs())
		cg, err := attribution.NewCgroup(attribution.CgroupConfig{ProcRoot: h.ProcRoot(), PodLogDir: h.PodLogDir()}, tenancy, logger)
		if err != nil {
			return hs, err
		}
		chain := attribution.NewChain(logger,
			attribution.Step{Name: "cgroup", Attributor: cg},
			attribution.Step{Name: "static", Attributor: attribution.NewStatic(mapping)},
			// Simulated time outruns the wall clock: look at new domain
			// files every poll.
			attribution.Step{Name: "vm", Attributor: attribution.NewVM(mapping, h.LibvirtDir(), 0)})
		hs.hosts = append(hs.hosts, collectors.Host{Name: h.Name(), Sources: []collectors.NamedSource{{Name: "nvml", Source: src}}, Attributor: chain})
	}
	hs.clock = fleet.Clock(f.speed)
	if f.duration > 0 {
		hs.until = fleet.Start().Add(f.duration).Truncate(time.Second)
	}
	return hs, nil
}

// nvmlHost builds this machine: its NVML library, and attribution by the
// kubelet's pod resources, by cgroups (pods and Slurm jobs) and by the map
// file, in that order.
func nvmlHost(f collectFlags, lib gonvml.Interface, nvmlCfg nvml.Config, observer *metrics.Observer, logger *slog.Logger) (hostSet, error) {
	var hs hostSet
	name := f.host
	if name == "" {
		var err error
		if name, err = os.Hostname(); err != nil {
			return hs, fmt.Errorf("host name: %w (pass --host)", err)
		}
	}
	src, err := nvml.New(lib, nvmlCfg, logger, observer)
	if err != nil {
		return hs, err
	}
	hs.closers = append(hs.closers, src.Close)
	hs.gpus = len(src.GPUs())
	for _, gpu := range src.GPUs() {
		logger.Info("gpu", "gpu_index", gpu.Index, "gpu_uuid", gpu.UUID, "model", gpu.Model, "name", gpu.Name, "pci_bus_id", gpu.PCIBusID)
	}
	mapping := attribution.Mapping{}
	if f.mapFile != "" {
		if mapping, err = attribution.LoadMapping(f.mapFile); err != nil {
			return hs, usageError{err}
		}
	}
	tenancy := attribution.Tenancy{Mapping: mapping, NamespaceIsTenant: f.namespaceIsTenant, AccountIsTenant: f.accountIsTenant}
	if f.podsURL != "" {
		pcfg := attribution.DefaultPodLabelsConfig()
		pcfg.URL, pcfg.TokenFile, pcfg.InsecureSkipVerify = f.podsURL, f.podsTokenFile, f.podsInsecure
		pods, err := attribution.NewKubeletPods(pcfg, logger)
		if err != nil {
			return hs, usageError{err}
		}
		tenancy.Pods = pods
	} else if len(mapping.Labels) > 0 {
		logger.Warn("the map file has label rules but no --kubelet-pods-url: pods resolve by namespace only")
	}
	var steps []attribution.Step
	if f.kubeletSocket != "" {
		kcfg := attribution.DefaultKubeletConfig()
		kcfg.Socket = f.kubeletSocket
		k, err := attribution.NewKubelet(kcfg, tenancy)
		if err != nil {
			return hs, usageError{err}
		}
		hs.closers = append(hs.closers, k.Close)
		steps = append(steps, attribution.Step{Name: "kubelet", Attributor: k})
	}
	if f.procRoot != "" {
		cg, err := attribution.NewCgroup(attribution.CgroupConfig{ProcRoot: f.procRoot, PodLogDir: f.podLogDir, SlurmEnvironment: f.slurmEnv}, tenancy, logger)
		if err != nil {
			return hs, usageError{err}
		}
		steps = append(steps, attribution.Step{Name: "cgroup", Attributor: cg})
	}
	steps = append(steps, attribution.Step{Name: "static", Attributor: attribution.NewStatic(mapping)},
		attribution.Step{Name: "vm", Attributor: attribution.NewVM(mapping, f.libvirtDir, 10*time.Second)})
	hs.hosts = []collectors.Host{{Name: name, Sources: []collectors.NamedSource{{Name: "nvml", Source: src}}, Attributor: attribution.NewChain(logger, steps...)}}
	hs.clock = collectors.WallClock{}
	if f.duration > 0 {
		hs.until = time.Now().Add(f.duration).Truncate(time.Second) // boundaries are whole seconds
	}
	return hs, nil
}
