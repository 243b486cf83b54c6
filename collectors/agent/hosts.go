package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/collectors/sim/rig"
	"github.com/gpumeter/gpumeter/internal/fault"
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
	hs.closers = nil
}

// simulatedHosts builds the simulated DGX fleet (and its vGPU hosts) over
// its own /proc, pod logs and domain files in a temporary directory, each
// host wired by the shared rig: its mock NVML behind the production NVML
// source, attribution by cgroups, the fleet's map file and libvirt.
func (a *Agent) simulatedHosts() error {
	hs, s := &a.hosts, a.cfg.Simulate
	start := s.Start
	if start.IsZero() {
		start = time.Now().UTC().Truncate(a.cfg.Interval)
		if a.cfg.Duration > 0 {
			start = time.Now().UTC().Truncate(time.Hour).Add(-a.cfg.Duration)
		}
	}
	root, err := os.MkdirTemp("", "gpumeter-sim-")
	if err != nil {
		return fmt.Errorf("simulated fleet: %w", err)
	}
	hs.closers = append(hs.closers, func() error { return os.RemoveAll(root) })
	fleet, err := sim.New(sim.Config{Hosts: s.Hosts, VGPUHosts: s.VGPUHosts, KubeHosts: s.KubeHosts, GPUsPerHost: s.GPUsPerHost, Seed: s.Seed,
		Start: start, Step: a.cfg.Interval, Root: root, Plants: s.Plants})
	if err != nil {
		return fault.Validation(err)
	}
	hs.fleet = fleet
	r, err := rig.New(fleet, rig.Options{NVML: a.cfg.NVML, Metrics: a.observer,
		NamespaceIsTenant: a.cfg.NamespaceIsTenant, AccountIsTenant: a.cfg.AccountIsTenant}, a.logger)
	if err != nil {
		return err
	}
	hs.closers = append(hs.closers, r.Close)
	hs.hosts, hs.gpus = r.Hosts, r.GPUs
	hs.clock = fleet.Clock(s.Speed)
	if a.cfg.Duration > 0 {
		hs.until = fleet.Start().Add(a.cfg.Duration).Truncate(time.Second)
	}
	return nil
}

// nvmlHost builds this machine: its NVML library, and attribution by the
// kubelet's pod resources, by cgroups (pods and Slurm jobs), by the map
// file and by libvirt domains, in that order.
func (a *Agent) nvmlHost(lib gonvml.Interface) error {
	hs, hc, logger := &a.hosts, a.cfg.Host, a.logger
	name := hc.Name
	if name == "" {
		var err error
		if name, err = os.Hostname(); err != nil {
			return fmt.Errorf("host name: %w (name the host in the config)", err)
		}
	}
	src, err := nvml.New(lib, a.cfg.NVML, logger, a.observer)
	if err != nil {
		return err
	}
	hs.closers = append(hs.closers, src.Close)
	hs.gpus = len(src.GPUs())
	for _, gpu := range src.GPUs() {
		logger.Info("gpu", "gpu_index", gpu.Index, "gpu_uuid", gpu.UUID, "model", gpu.Model, "name", gpu.Name, "pci_bus_id", gpu.PCIBusID)
	}
	mapping := attribution.Mapping{}
	if hc.MapFile != "" {
		if mapping, err = attribution.LoadMapping(hc.MapFile); err != nil {
			return fault.Validation(err)
		}
	}
	tenancy := attribution.Tenancy{Mapping: mapping, NamespaceIsTenant: a.cfg.NamespaceIsTenant, AccountIsTenant: a.cfg.AccountIsTenant}
	var pods *attribution.KubeletPods
	if hc.PodLabels != nil {
		if pods, err = attribution.NewKubeletPods(*hc.PodLabels, logger); err != nil {
			return fault.Validation(err)
		}
		tenancy.Pods = pods
	} else if len(mapping.Labels) > 0 {
		logger.Warn("the map file has label rules but no kubelet pod list: pods resolve by namespace only")
	}
	var steps []attribution.Step
	if hc.KubeletSocket != "" {
		kcfg := attribution.DefaultKubeletConfig()
		kcfg.Socket = hc.KubeletSocket
		devices, err := draResolver(hc.NodeName)
		if err != nil {
			return err
		}
		k, err := attribution.NewKubelet(kcfg, tenancy, devices)
		if err != nil {
			return fault.Validation(err)
		}
		hs.closers = append(hs.closers, k.Close)
		steps = append(steps, attribution.Step{Name: "kubelet", Attributor: k})
	}
	if hc.HAMi {
		if pods == nil {
			return fault.Validation(errors.New("host.hami: HAMi's annotations come from the kubelet's pod list (--kubelet-pods-url)"))
		}
		h, err := attribution.NewHAMi(pods, hc.NodeName, tenancy)
		if err != nil {
			return fault.Validation(err)
		}
		steps = append(steps, attribution.Step{Name: "hami", Attributor: h})
	}
	if hc.ProcRoot != "" {
		cg, err := attribution.NewCgroup(attribution.CgroupConfig{ProcRoot: hc.ProcRoot, PodLogDir: hc.PodLogDir, SlurmEnvironment: hc.SlurmEnvironment}, tenancy, logger)
		if err != nil {
			return fault.Validation(err)
		}
		steps = append(steps, attribution.Step{Name: "cgroup", Attributor: cg})
	}
	steps = append(steps, attribution.Step{Name: "static", Attributor: attribution.NewStatic(mapping)},
		attribution.Step{Name: "vm", Attributor: attribution.NewVM(mapping, hc.LibvirtDir, 10*time.Second)})
	chain := attribution.NewChain(logger, steps...).Observe(func(source string, err error) { a.observer.AttributionSource(name, source, err) })
	hs.hosts = []collectors.Host{{Name: name, Sources: []collectors.NamedSource{{Name: "nvml", Source: src}}, Attributor: chain}}
	hs.clock = collectors.WallClock{}
	if a.cfg.Duration > 0 {
		hs.until = time.Now().Add(a.cfg.Duration).Truncate(time.Second) // boundaries are whole seconds
	}
	return nil
}

// draResolver reads the node's ResourceSlices through the in-cluster API
// server (the collector's service account: get, list and watch on
// resourceslices.resource.k8s.io); no node name, no DRA resolution.
func draResolver(node string) (attribution.DeviceResolver, error) {
	if node == "" {
		return nil, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fault.Validation(fmt.Errorf("--node-name %s: DRA needs the in-cluster API server: %w", node, err))
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	cfg := attribution.DefaultResourceSlicesConfig()
	cfg.NodeName = node
	r, err := attribution.NewResourceSlices(client, cfg)
	if err != nil {
		return nil, fault.Validation(err)
	}
	return r, nil
}
