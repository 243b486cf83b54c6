package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/spool"
)

// Settings are the config file's collector section: delivery and
// attribution on GPU hosts, under collect's flags.
type Settings struct {
	Spool   spool.Config        `yaml:"spool"`
	Shipper spool.ShipperConfig `yaml:"shipper"`
	// LibvirtDir holds the libvirt domain XML files (e.g. /etc/libvirt/qemu)
	// whose gpumeter metadata maps VMs to tenants; empty: off.
	LibvirtDir string `yaml:"libvirt_dir"`
}

// DefaultSettings spool under /var/lib/gpumeter/spool.
func DefaultSettings() Settings {
	return Settings{Spool: spool.DefaultConfig("/var/lib/gpumeter/spool"), Shipper: spool.DefaultShipperConfig()}
}

// Validate names the field path of every problem in the section.
func (c Settings) Validate() error {
	errs := []error{prefixed("collector.spool", c.Spool.Validate()), prefixed("collector.shipper", c.Shipper.Validate())}
	// The collector's working directory is whatever its service manager
	// gives it, so a relative path would mean nothing reliable; whether the
	// directory exists is checked where it is used.
	if c.LibvirtDir != "" && !filepath.IsAbs(c.LibvirtDir) {
		errs = append(errs, fmt.Errorf("collector.libvirt_dir: %q is not an absolute path", c.LibvirtDir))
	}
	return errors.Join(errs...)
}

func prefixed(section string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", section, err)
}

// Flags are collect's command-line flags: what they set in Config, and the
// rules on combining them. Like node_exporter's collectors, the agent
// defines its own flags; the command adds where samples go.
type Flags struct {
	interval  time.Duration
	duration  time.Duration
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
	kube     bool
	gpus     int
	seed     int64
	start    string
	speed    float64
	plants   plantFlags

	kubeletSocket     string
	nodeName          string
	hami              bool
	sharedBilling     string
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

// Register defines the flags on fs, the spool's and shipper's defaults
// from the config file's collector section.
func (f *Flags) Register(fs *pflag.FlagSet, file Settings) {
	kube := attribution.DefaultKubeletConfig()
	cg := attribution.DefaultCgroupConfig()
	fs.DurationVar(&f.interval, "interval", collectors.DefaultInterval, "sampling interval")
	fs.DurationVar(&f.duration, "duration", 0, "stop after this long (simulated time with --simulate); 0 runs until interrupted")
	fs.StringVar(&f.host, "host", "", "host name in samples (default: the machine's)")
	fs.IntVar(&f.batchRows, "batch-rows", 0, "samples per ClickHouse insert (default: every poll; 20000 with --simulate)")
	sc, shc := file.Spool, file.Shipper
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
	fs.BoolVar(&f.kube, "kube", false, "with --simulate, also a simulated Kubernetes host: a DRA whole GPU, a DRA MIG device, a claim three pods share, a GPU HAMi shares between four pods")
	fs.IntVar(&f.gpus, "gpus", 8, "GPUs per simulated host")
	fs.Int64Var(&f.seed, "seed", 1, "seed of the simulated fleet")
	fs.StringVar(&f.start, "start", "", "simulated start time, RFC 3339 (default: --duration before the last full hour, or now)")
	fs.Float64Var(&f.speed, "speed", 0, "simulated seconds per wall second; 0 runs as fast as possible (needs --duration)")
	f.plants.register(fs)
	fs.StringVar(&f.kubeletSocket, "kubelet-socket", kube.Socket, "kubelet pod-resources socket; empty disables")
	fs.StringVar(&f.nodeName, "node-name", "", "this Kubernetes node (the downward API's spec.nodeName): DRA-claimed devices are resolved from its ResourceSlices through the in-cluster API server; empty disables DRA")
	fs.BoolVar(&f.hami, "hami", false, "attribute HAMi-shared GPUs from HAMi's pod annotations in the --kubelet-pods-url list")
	fs.StringVar(&f.sharedBilling, "hami-billing", "measured", "GPUs HAMi shares: measured (split by per-process use) or granted (each pod its cores % × time, the rest idle)")
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

// flagOf names the flag that sets each field of Config.
var flagOf = map[string]string{"interval": "--interval", "duration": "--duration", "batch_rows": "--batch-rows",
	"drain_timeout": "--drain-timeout", "simulate.speed": "--speed", "host.libvirt_dir": "--libvirt-dir (or collector.libvirt_dir)",
	"host.pod_labels": "--kubelet-pods-url"}

// Config is the agent's config under the flags given on fs, the config
// file's collector section for those not given, and the spool of a
// simulated run kept per DSN. Every rule on flag combinations is checked:
// a flag the mode ignores is refused, not dropped.
func (f *Flags) Config(fs *pflag.FlagSet, file Settings, dsn string) (Config, error) {
	sc, shc := file.Spool, file.Shipper
	cli.ConfigDefault(fs, "spool-max-bytes", &f.spoolMaxBytes, sc.MaxBytes)
	cli.ConfigDefault(fs, "spool-overflow", &f.spoolOverflow, string(sc.Overflow))
	cli.ConfigDefault(fs, "ship-batch-rows", &f.shipRows, shc.BatchRows)
	cli.ConfigDefault(fs, "ship-flush", &f.shipFlush, shc.FlushInterval)
	cli.ConfigDefault(fs, "ship-backoff-max", &f.shipBackoff, shc.BackoffMax)
	if f.libvirtDir == "" && !f.simulate {
		f.libvirtDir = file.LibvirtDir
	}
	// The flags Config has no place for, or ignores in this mode; the rest
	// is Config's own Validate, in flag names.
	var errs []error
	if _, err := vgpuUnused(f.vgpuUnused); err != nil {
		errs = append(errs, err)
	}
	if f.podsURL != "" && f.simulate {
		errs = append(errs, errors.New("--kubelet-pods-url: the simulated fleet has no kubelet"))
	}
	if f.vgpu && !f.simulate {
		errs = append(errs, errors.New("--vgpu: only with --simulate"))
	}
	if f.kube && !f.simulate {
		errs = append(errs, errors.New("--kube: only with --simulate"))
	}
	if f.simulate && (f.nodeName != "" || f.hami) {
		errs = append(errs, errors.New("--node-name, --hami: the simulated fleet's Kubernetes host (--kube) brings its own"))
	}
	if f.hami && f.podsURL == "" && !f.simulate {
		errs = append(errs, errors.New("--hami: needs --kubelet-pods-url (HAMi's allocation is in pod annotations)"))
	}
	if f.sharedBilling != "measured" && f.sharedBilling != "granted" {
		errs = append(errs, fmt.Errorf("--hami-billing: %q is not measured or granted", f.sharedBilling))
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
	c := f.config(file, dsn)
	if err := c.Validate(); err != nil {
		errs = append(errs, cli.FlagNamed(err, flagOf))
	}
	return c, fault.Validation(errors.Join(errs...))
}

func (f Flags) config(file Settings, dsn string) Config {
	unused, _ := vgpuUnused(f.vgpuUnused)
	c := Config{Interval: f.interval, Duration: f.duration, BatchRows: f.batchRows, DrainTimeout: f.drainTimeout,
		NVML: nvml.DefaultConfig(), BestEffortUnused: unused, Granted: f.sharedBilling == "granted", NamespaceIsTenant: f.namespaceIsTenant, AccountIsTenant: f.accountIsTenant,
		Spool: file.Spool, Shipper: file.Shipper}
	c.NVML.GPM, c.NVML.MaxPowerWatts = f.gpm, f.maxPowerWatts
	c.Spool.MaxBytes, c.Spool.Overflow = f.spoolMaxBytes, spool.OverflowPolicy(f.spoolOverflow)
	c.Shipper.BatchRows, c.Shipper.FlushInterval, c.Shipper.BackoffMax = f.shipRows, f.shipFlush, f.shipBackoff
	switch {
	case f.spoolDir != "":
		c.Spool.Dir = f.spoolDir
	case f.simulate:
		c.Spool.Dir = SimulatedSpoolDir(dsn)
	}
	if !f.simulate {
		c.Host = HostConfig{Name: f.host, MapFile: f.mapFile, KubeletSocket: f.kubeletSocket, ProcRoot: f.procRoot,
			PodLogDir: f.podLogDir, SlurmEnvironment: f.slurmEnv, LibvirtDir: f.libvirtDir, NodeName: f.nodeName, HAMi: f.hami}
		if f.podsURL != "" {
			pl := attribution.DefaultPodLabelsConfig()
			pl.URL, pl.TokenFile, pl.InsecureSkipVerify = f.podsURL, f.podsTokenFile, f.podsInsecure
			c.Host.PodLabels = &pl
		}
		return c
	}
	c.Simulate = &SimConfig{Hosts: f.hosts, GPUsPerHost: f.gpus, Seed: f.seed, Speed: f.speed}
	if f.vgpu {
		c.Simulate.VGPUHosts = 1
	}
	if f.kube {
		c.Simulate.KubeHosts = 1
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

// plantFlags plant the insights cases in the simulated fleet (sim.Plants):
// a hoarding tenant, a tenant on an oversized 7g MIG instance, a one-hour
// spike. None given plants nothing.
type plantFlags struct {
	hoarder, oversized, spike, spikeAt string
	hoardGPUs, spikeGPUs               int
}

func (p *plantFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&p.hoarder, "plant-hoarder", "", "with --simulate, this tenant holds whole GPUs idle for the whole run")
	fs.IntVar(&p.hoardGPUs, "plant-hoard-gpus", 1, "GPUs the --plant-hoarder tenant holds")
	fs.StringVar(&p.oversized, "plant-oversized-mig", "", "with --simulate, this tenant runs a small job on a whole 7g MIG instance")
	fs.StringVar(&p.spike, "plant-spike", "", "with --simulate, this tenant uses --plant-spike-gpus GPUs in the one hour --plant-spike-at, nothing else")
	fs.StringVar(&p.spikeAt, "plant-spike-at", "", "the spike's hour, RFC 3339, a whole UTC hour within the run")
	fs.IntVar(&p.spikeGPUs, "plant-spike-gpus", 6, "GPUs of the spike (5 or more clear the default anomaly threshold)")
}

// parse gives the plants, nil when none is asked for.
func (p plantFlags) parse(simulate bool) (*sim.Plants, error) {
	if p.hoarder == "" && p.oversized == "" && p.spike == "" {
		if p.spikeAt != "" {
			return nil, errors.New("--plant-spike-at: only with --plant-spike")
		}
		return nil, nil
	}
	if !simulate {
		return nil, errors.New("--plant-*: only with --simulate")
	}
	out := &sim.Plants{Hoarder: p.hoarder, HoardGPUs: p.hoardGPUs, OversizedMIG: p.oversized, Spike: p.spike, SpikeGPUs: p.spikeGPUs}
	var errs []error
	if p.spike != "" {
		at, err := time.Parse(time.RFC3339, p.spikeAt)
		switch {
		case p.spikeAt == "":
			errs = append(errs, errors.New("--plant-spike needs --plant-spike-at"))
		case err != nil:
			errs = append(errs, fmt.Errorf("--plant-spike-at: %q is not RFC 3339", p.spikeAt))
		default:
			out.SpikeAt = at.UTC()
		}
	} else if p.spikeAt != "" {
		errs = append(errs, errors.New("--plant-spike-at: only with --plant-spike"))
	}
	if p.hoardGPUs < 1 || p.spikeGPUs < 1 {
		errs = append(errs, errors.New("--plant-hoard-gpus and --plant-spike-gpus: at least 1"))
	}
	return out, errors.Join(errs...)
}
