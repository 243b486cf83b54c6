package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	promcollectors "github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/metrics"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/server"
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
MIG devices, processes, energy, PCIe and NVLink counters, per-MIG SM
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
		if err := f.check(cmd.Flags(), g.cfg); err != nil {
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

// check takes the spool's and shipper's settings not given as flags from
// cfg and checks every rule on flag combinations.
func (f *collectFlags) check(fs *pflag.FlagSet, cfg config.Config) error {
	sc, shc := cfg.Collector.Spool, cfg.Collector.Shipper
	configDefault(fs, "spool-max-bytes", &f.spoolMaxBytes, sc.MaxBytes)
	configDefault(fs, "spool-overflow", &f.spoolOverflow, string(sc.Overflow))
	configDefault(fs, "ship-batch-rows", &f.shipRows, shc.BatchRows)
	configDefault(fs, "ship-flush", &f.shipFlush, shc.FlushInterval)
	configDefault(fs, "ship-backoff-max", &f.shipBackoff, shc.BackoffMax)
	var errs []error
	if f.interval < time.Second || f.interval%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--interval: %s is not a whole number of seconds", f.interval))
	}
	if f.duration < 0 {
		errs = append(errs, fmt.Errorf("--duration: %s is negative", f.duration))
	}
	switch f.sink {
	case "clickhouse", "jsonl", "discard":
	default:
		errs = append(errs, fmt.Errorf("--sink: %q is not clickhouse, jsonl or discard", f.sink))
	}
	if _, err := vgpuUnused(f.vgpuUnused); err != nil {
		errs = append(errs, err)
	}
	if f.libvirtDir == "" && !f.simulate {
		f.libvirtDir = cfg.Collector.LibvirtDir
	}
	if st, err := os.Stat(f.libvirtDir); f.libvirtDir != "" && (err != nil || !st.IsDir()) {
		errs = append(errs, fmt.Errorf("--libvirt-dir (or collector.libvirt_dir): %s is not a readable directory", f.libvirtDir))
	}
	if f.podsURL != "" {
		pcfg := attribution.DefaultPodLabelsConfig()
		pcfg.URL = f.podsURL
		if err := pcfg.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--kubelet-pods-url: %w", err))
		}
		if f.simulate {
			errs = append(errs, errors.New("--kubelet-pods-url: the simulated fleet has no kubelet"))
		}
	}
	if f.drainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--drain-timeout: %s: must be positive", f.drainTimeout))
	}
	if f.batchRows < 0 {
		errs = append(errs, fmt.Errorf("--batch-rows: %d is negative", f.batchRows))
	}
	if f.vgpu && !f.simulate {
		errs = append(errs, errors.New("--vgpu: only with --simulate"))
	}
	if f.simulate {
		if f.speed < 0 {
			errs = append(errs, fmt.Errorf("--speed: %v is negative", f.speed))
		}
		if f.speed == 0 && f.duration == 0 {
			errs = append(errs, errors.New("--speed 0 (as fast as possible) needs a --duration"))
		}
		if f.mapFile != "" {
			errs = append(errs, errors.New("--map-file: the simulated fleet brings its own map"))
		}
		if f.libvirtDir != "" {
			errs = append(errs, errors.New("--libvirt-dir: the simulated fleet writes its own domain files"))
		}
		if f.start != "" {
			if _, err := time.Parse(time.RFC3339, f.start); err != nil {
				errs = append(errs, fmt.Errorf("--start: %q is not RFC 3339", f.start))
			}
		}
	}
	if _, err := f.plants.parse(f.simulate); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return usageError{err}
	}
	return nil
}

// runCollect runs the collector: the hosts (NVML or the simulated fleet)
// with their attribution, apportioning, the sink, and the metrics listener.
func runCollect(ctx context.Context, g *globals, f collectFlags, deps collectDeps) error {
	logger := g.logger.With("component", "collector")
	reg := deps.registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(promcollectors.NewGoCollector(), promcollectors.NewProcessCollector(promcollectors.ProcessCollectorOpts{}))
	}
	observer := metrics.New(reg)

	sk, err := openSink(ctx, g, f, reg, logger)
	if err != nil {
		return err
	}
	defer sk.close()
	flushRows := f.batchRows
	if flushRows == 0 {
		flushRows = 1
		if f.simulate {
			flushRows = 20_000
		}
	}
	batch, err := collectors.NewBatch(collectors.BatchConfig{FlushRows: flushRows, MaxRows: max(flushRows, 1_000_000)}, sk.counted)
	if err != nil {
		return err
	}
	observer.WatchBatch(batch)

	nvmlCfg := nvml.DefaultConfig()
	nvmlCfg.GPM, nvmlCfg.MaxPowerWatts = f.gpm, f.maxPowerWatts
	var hs hostSet
	if f.simulate {
		hs, err = simulatedHosts(f, nvmlCfg, observer, logger)
	} else {
		hs, err = nvmlHost(f, deps.newNVML(), nvmlCfg, observer, logger)
	}
	defer hs.close(logger) // what was opened before an error too
	if err != nil {
		return err
	}
	if err := sk.checkPoll(hs.gpus); err != nil {
		return err
	}

	loop, err := collectors.NewLoop(collectors.LoopConfig{Interval: f.interval, Until: hs.until}, hs.hosts, apportioner(f), batch, hs.clock, logger, observer)
	if err != nil {
		return err
	}
	if f.listen != "" {
		srv := server.New(server.DefaultConfig(), reg, logger, server.Check{Name: "poll", Ready: observer.Ready})
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

	began := time.Now()
	logger.Info("collecting", "hosts", len(hs.hosts), "interval", f.interval, "simulate", f.simulate, "sink", f.sink)
	if err := loop.Run(ctx); err != nil {
		return err
	}
	if err := finishCollecting(ctx, f, batch, sk, logger); err != nil {
		return err
	}
	written := sk.written.Load()
	logger.Info("collector stopped", "samples", written, "elapsed", time.Since(began).Round(time.Millisecond))
	if hs.fleet != nil && g.stdout != nil && f.sink != "jsonl" {
		if err := printLedger(g.stdout, hs.fleet, written); err != nil {
			return fmt.Errorf("print the ledger: %w", err)
		}
	}
	return nil
}

// printLedger prints what the simulator ran, per tenant, to compare with
// `gpumeter usage` over the same range.
func printLedger(w io.Writer, fleet *sim.Fleet, written uint64) error {
	l := fleet.Ledger()
	out := reports.SimLedger{Hosts: len(fleet.Hosts()), Start: fleet.Start(), End: fleet.Now(), Written: written}
	for _, t := range l.Tenants() {
		out.Tenants = append(out.Tenants, reports.SimTenant{Tenant: t, GPUMicroseconds: l.GPUMicroseconds[t], EnergyMillijoules: l.EnergyMillijoules[t]})
	}
	return reports.WriteSimLedger(w, out)
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

// apportioner is the apportioning rules under the flags' choices
// (validated by then).
func apportioner(f collectFlags) collectors.ApportionFunc {
	unused, _ := vgpuUnused(f.vgpuUnused)
	return attribution.Options{BestEffortUnused: unused}.Apportion
}
