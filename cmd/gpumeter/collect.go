package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	promcollectors "github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpumeter/gpumeter/cmd/gpumeter/config"
	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/agent"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/internal/importer"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/spool"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/reports"
)

// collectDeps are what tests replace: the NVML library and the registry.
type collectDeps struct {
	newNVML  func() gonvml.Interface
	registry *prometheus.Registry
}

func newCollectCmd(g *globals, deps collectDeps) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "collect [--simulate] [flags]",
		Short: "run the GPU collector (NVML, or --simulate)",
		Long: `collect runs on each GPU host: every --interval it reads NVML (whole GPUs,
MIG devices, processes, the device counters of the meter table, per-MIG SM
activity), attributes GPUs, MIG instances and processes to tenants (the
kubelet's pod resources, process cgroups of pods and Slurm jobs, the map
file, libvirt domains), and splits each interval into samples that add up
exactly. Samples go through an on-disk spool to ClickHouse (--sink), at
least once; metrics, /healthz and /readyz are on --listen. --simulate runs a
deterministic simulated DGX fleet instead of NVML and prints what it ran. The
spool and shipper flags' defaults are the config's collector section
(docs/collector.md, docs/delivery.md).`,
		Example: "  gpumeter --config /etc/gpumeter/gpumeter.yaml collect --spool /var/lib/gpumeter/spool --listen :9401\n" +
			"  gpumeter collect --simulate --hosts 2 --duration 6h --start 2026-11-05T00:00:00Z --listen \"\"",
		Args: noArgs,
	}
	var f collectFlags
	f.register(cmd.Flags(), g.cfg)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := f.check(cmd.Flags(), g); err != nil {
			return err
		}
		return runCollect(cmd.Context(), g, f, deps)
	}
	return cmd
}

type collectFlags struct {
	interval  time.Duration
	duration  time.Duration
	listen    string
	sink      string
	host      string
	batchRows int

	spoolDir      string
	spoolMaxBytes int64
	spoolOverflow string
	shipRows      int
	shipFlush     time.Duration
	shipBackoff   time.Duration
	drainTimeout  time.Duration

	simulate bool
	hosts    int
	vgpu     bool
	gpus     int
	seed     int64
	start    string
	speed    float64
	plants   plantFlags

	kubeletSocket     string
	podsURL           string
	podsTokenFile     string
	podsInsecure      bool
	procRoot          string
	podLogDir         string
	slurmEnv          bool
	mapFile           string
	namespaceIsTenant bool
	accountIsTenant   bool
	gpm               bool
	maxPowerWatts     uint64
	vgpuUnused        string
	libvirtDir        string
}

// register defines the flags on fs, the spool's and shipper's defaults
// from cfg.
func (f *collectFlags) register(fs *pflag.FlagSet, cfg config.Config) {
	kube := attribution.DefaultKubeletConfig()
	cg := attribution.DefaultCgroupConfig()
	fs.DurationVar(&f.interval, "interval", collectors.DefaultInterval, "sampling interval")
	fs.DurationVar(&f.duration, "duration", 0, "stop after this long (simulated time with --simulate); 0 runs until interrupted")
	fs.StringVar(&f.listen, "listen", ":9401", "address of /metrics, /healthz and /readyz; empty disables")
	fs.StringVar(&f.sink, "sink", "clickhouse", "where samples go: clickhouse, jsonl (stdout, the import format) or discard")
	fs.StringVar(&f.host, "host", "", "host name in samples (default: the machine's)")
	fs.IntVar(&f.batchRows, "batch-rows", 0, "samples per ClickHouse insert (default: every poll; 20000 with --simulate)")
	sc, shc := cfg.Collector.Spool, cfg.Collector.Shipper
	fs.StringVar(&f.spoolDir, "spool", "", "spool directory: samples are fsynced here before shipping (default collector.spool.dir of the config, /var/lib/gpumeter/spool; with --simulate one per DSN under $TMPDIR)")
	fs.Int64Var(&f.spoolMaxBytes, "spool-max-bytes", sc.MaxBytes, "bound on the spool's size")
	fs.StringVar(&f.spoolOverflow, "spool-overflow", string(sc.Overflow), "when the spool is full: drop_oldest or reject")
	fs.IntVar(&f.shipRows, "ship-batch-rows", shc.BatchRows, "rows per ClickHouse insert from the spool (10000-100000)")
	fs.DurationVar(&f.shipFlush, "ship-flush", shc.FlushInterval, "ship a smaller batch after this long")
	fs.DurationVar(&f.shipBackoff, "ship-backoff-max", shc.BackoffMax, "longest wait between retries while ClickHouse is down")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", 10*time.Minute, "at the end of a finite run, how long to wait for the spool to ship and to take what the poll loop kept while it was full (what is spooled stays on disk either way; what never was is counted lost)")
	fs.StringVar(&f.libvirtDir, "libvirt-dir", "", "libvirt domain XML directory (e.g. /etc/libvirt/qemu) whose gpumeter:owner metadata maps VMs to tenants (default collector.libvirt_dir of the config; empty there too disables)")
	fs.StringVar(&f.vgpuUnused, "vgpu-best-effort-unused", "idle", "on best-effort vGPU GPUs, the time no instance used: idle, or holders (shared over the instances present)")
	fs.BoolVar(&f.simulate, "simulate", false, "read a simulated DGX fleet instead of NVML")
	fs.IntVar(&f.hosts, "hosts", 2, "simulated hosts")
	fs.BoolVar(&f.vgpu, "vgpu", false, "with --simulate, also a simulated NVIDIA vGPU host (VMs under each scheduler policy, MIG-backed vGPU, passthrough)")
	fs.IntVar(&f.gpus, "gpus", 8, "GPUs per simulated host")
	fs.Int64Var(&f.seed, "seed", 1, "seed of the simulated fleet")
	fs.StringVar(&f.start, "start", "", "simulated start time, RFC 3339 (default: --duration before the last full hour, or now)")
	fs.Float64Var(&f.speed, "speed", 0, "simulated seconds per wall second; 0 runs as fast as possible (needs --duration)")
	f.plants.register(fs)
	fs.StringVar(&f.kubeletSocket, "kubelet-socket", kube.Socket, "kubelet pod-resources socket; empty disables")
	pl := attribution.DefaultPodLabelsConfig()
	fs.StringVar(&f.podsURL, "kubelet-pods-url", "", "kubelet pod list for label → tenant rules, e.g. https://127.0.0.1:10250/pods; empty disables")
	fs.StringVar(&f.podsTokenFile, "kubelet-token-file", pl.TokenFile, "bearer token for --kubelet-pods-url")
	fs.BoolVar(&f.podsInsecure, "kubelet-insecure-tls", false, "do not verify the kubelet's serving certificate")
	fs.StringVar(&f.procRoot, "proc-root", cg.ProcRoot, "procfs, for PID → pod or Slurm job")
	fs.StringVar(&f.podLogDir, "pod-log-dir", cg.PodLogDir, "kubelet pod log directory, for pod UID → namespace/name")
	fs.BoolVar(&f.slurmEnv, "slurm-env", cg.SlurmEnvironment, "a process whose cgroup names no Slurm job belongs to the job in its environment (SLURM_JOB_ID): proctrack/linuxproc and containers")
	fs.StringVar(&f.mapFile, "map-file", "", "attribution map: device, namespace, account, label and vm → tenant (docs/collector.md)")
	fs.BoolVar(&f.namespaceIsTenant, "namespace-is-tenant", true, "an unmapped namespace is its own tenant")
	fs.BoolVar(&f.accountIsTenant, "account-is-tenant", true, "an unmapped Slurm account is its own tenant")
	fs.BoolVar(&f.gpm, "gpm", true, "read per-MIG SM activity from GPM where supported")
	fs.Uint64Var(&f.maxPowerWatts, "max-power-watts", nvml.DefaultConfig().MaxPowerWatts, "energy deltas above this board power are dropped as bad reads")
}

// collectFlagOf names the flag that sets each field of agent.Config.
var collectFlagOf = map[string]string{"interval": "--interval", "duration": "--duration", "batch_rows": "--batch-rows",
	"drain_timeout": "--drain-timeout", "simulate.speed": "--speed", "host.libvirt_dir": "--libvirt-dir (or collector.libvirt_dir)",
	"host.pod_labels": "--kubelet-pods-url"}

// check takes the spool's and shipper's settings not given as flags from
// cfg and checks every rule on flag combinations.
func (f *collectFlags) check(fs *pflag.FlagSet, g *globals) error {
	cfg := g.cfg
	sc, shc := cfg.Collector.Spool, cfg.Collector.Shipper
	configDefault(fs, "spool-max-bytes", &f.spoolMaxBytes, sc.MaxBytes)
	configDefault(fs, "spool-overflow", &f.spoolOverflow, string(sc.Overflow))
	configDefault(fs, "ship-batch-rows", &f.shipRows, shc.BatchRows)
	configDefault(fs, "ship-flush", &f.shipFlush, shc.FlushInterval)
	configDefault(fs, "ship-backoff-max", &f.shipBackoff, shc.BackoffMax)
	if f.libvirtDir == "" && !f.simulate {
		f.libvirtDir = cfg.Collector.LibvirtDir
	}
	// The flags the agent's config has no place for, or ignores in this
	// mode; the rest is the config's own Validate, in flag names.
	var errs []error
	switch f.sink {
	case "clickhouse", "jsonl", "discard":
	default:
		errs = append(errs, fmt.Errorf("--sink: %q is not clickhouse, jsonl or discard", f.sink))
	}
	if _, err := vgpuUnused(f.vgpuUnused); err != nil {
		errs = append(errs, err)
	}
	if f.podsURL != "" && f.simulate {
		errs = append(errs, errors.New("--kubelet-pods-url: the simulated fleet has no kubelet"))
	}
	if f.vgpu && !f.simulate {
		errs = append(errs, errors.New("--vgpu: only with --simulate"))
	}
	if f.simulate {
		if f.mapFile != "" {
			errs = append(errs, errors.New("--map-file: the simulated fleet brings its own map"))
		}
		if f.libvirtDir != "" {
			errs = append(errs, errors.New("--libvirt-dir: the simulated fleet writes its own domain files"))
		}
		if _, err := time.Parse(time.RFC3339, f.start); f.start != "" && err != nil {
			errs = append(errs, fmt.Errorf("--start: %q is not RFC 3339", f.start))
		}
	}
	if _, err := f.plants.parse(f.simulate); err != nil {
		errs = append(errs, err)
	}
	if err := f.config(g).Validate(); err != nil {
		errs = append(errs, flagNamed(err, collectFlagOf))
	}
	if err := errors.Join(errs...); err != nil {
		return usageError{err}
	}
	return nil
}

// runCollect runs the collector: the flags as the agent's config, the
// output --sink names, the metrics listener, and the ledger of a simulated
// run.
func runCollect(ctx context.Context, g *globals, f collectFlags, deps collectDeps) error {
	reg := deps.registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(promcollectors.NewGoCollector(), promcollectors.NewProcessCollector(promcollectors.ProcessCollectorOpts{}))
	}
	ad := agent.Deps{NVML: deps.newNVML, Registry: reg}
	switch f.sink {
	case "clickhouse":
		// Samples go through the on-disk spool; the store need not be
		// reachable now.
		dsn, err := store.ParseDSN(g.dsn)
		if err != nil {
			return usageError{err}
		}
		st, err := store.Connect(dsn, g.logger)
		if err != nil {
			return err
		}
		defer st.Close()
		ad.Sink = st
	case "jsonl":
		var err error
		if ad.Out, err = importer.NewAppender(g.stdout, importer.FormatJSONL); err != nil {
			return err
		}
	case "discard":
		ad.Out = collectors.AppenderFunc(func(context.Context, []collectors.Sample) error { return nil })
	}
	a, err := agent.New(ctx, f.config(g), ad, g.logger)
	if err != nil {
		return err
	}
	defer a.Close()
	logger := g.logger.With("component", "collector")
	if f.listen != "" {
		srv := server.New(server.DefaultConfig(), reg, logger, server.Check{Name: "poll", Ready: a.Ready})
		srv.MountMetrics(reg)
		_, stop, err := srv.Start(ctx, f.listen)
		if err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		defer func() {
			if err := stop(); err != nil {
				logger.Warn("metrics listener", "err", err)
			}
		}()
	}
	logger.Info("collecting", "hosts", a.Hosts(), "interval", f.interval, "simulate", f.simulate, "sink", f.sink)
	res, err := a.Run(ctx)
	if err != nil {
		return err
	}
	if res.Fleet != nil && g.stdout != nil && f.sink != "jsonl" {
		if err := reports.WriteSimLedger(g.stdout, reports.SimLedgerOf(res.Fleet, res.Written)); err != nil {
			return fmt.Errorf("print the ledger: %w", err)
		}
	}
	return nil
}

// config is the agent's config under the flags (checked by then) and the
// config file's collector section.
func (f collectFlags) config(g *globals) agent.Config {
	unused, _ := vgpuUnused(f.vgpuUnused)
	c := agent.Config{Interval: f.interval, Duration: f.duration, BatchRows: f.batchRows, DrainTimeout: f.drainTimeout,
		NVML: nvml.DefaultConfig(), BestEffortUnused: unused, NamespaceIsTenant: f.namespaceIsTenant, AccountIsTenant: f.accountIsTenant,
		Spool: g.cfg.Collector.Spool, Shipper: g.cfg.Collector.Shipper}
	c.NVML.GPM, c.NVML.MaxPowerWatts = f.gpm, f.maxPowerWatts
	c.Spool.MaxBytes, c.Spool.Overflow = f.spoolMaxBytes, spool.OverflowPolicy(f.spoolOverflow)
	c.Shipper.BatchRows, c.Shipper.FlushInterval, c.Shipper.BackoffMax = f.shipRows, f.shipFlush, f.shipBackoff
	switch {
	case f.spoolDir != "":
		c.Spool.Dir = f.spoolDir
	case f.simulate:
		c.Spool.Dir = agent.SimulatedSpoolDir(g.dsn)
	}
	if !f.simulate {
		c.Host = agent.HostConfig{Name: f.host, MapFile: f.mapFile, KubeletSocket: f.kubeletSocket, ProcRoot: f.procRoot,
			PodLogDir: f.podLogDir, SlurmEnvironment: f.slurmEnv, LibvirtDir: f.libvirtDir}
		if f.podsURL != "" {
			pl := attribution.DefaultPodLabelsConfig()
			pl.URL, pl.TokenFile, pl.InsecureSkipVerify = f.podsURL, f.podsTokenFile, f.podsInsecure
			c.Host.PodLabels = &pl
		}
		return c
	}
	c.Simulate = &agent.SimConfig{Hosts: f.hosts, GPUsPerHost: f.gpus, Seed: f.seed, Speed: f.speed}
	if f.vgpu {
		c.Simulate.VGPUHosts = 1
	}
	if f.start != "" {
		c.Simulate.Start, _ = time.Parse(time.RFC3339, f.start)
	}
	c.Simulate.Plants, _ = f.plants.parse(true)
	return c
}

// vgpuUnused reads --vgpu-best-effort-unused.
func vgpuUnused(v string) (attribution.Unused, error) {
	switch v {
	case "idle":
		return attribution.UnusedIdle, nil
	case "holders":
		return attribution.UnusedToHolders, nil
	}
	return 0, fmt.Errorf("--vgpu-best-effort-unused: %q is not idle or holders", v)
}
