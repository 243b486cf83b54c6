// Package agent runs the collector of a GPU host: it builds the hosts the
// poll loop reads (this machine's NVML with its attribution, or a
// simulated fleet through collectors/sim/rig), hands their samples on
// (to ClickHouse through the on-disk spool and its shipper, or to an
// appender the caller gives) and, at the end of a finite run, waits until
// everything is delivered. It never imports the store: the caller passes
// it in as a Sink. cmd/gpumeter's collect maps its flags onto Config.
package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/metrics"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/spool"
)

// Config of a collector run.
type Config struct {
	// Interval between polls: a whole number of seconds.
	Interval time.Duration
	// Duration ends a finite run after this long (simulated time with
	// Simulate); 0 runs until the context ends.
	Duration time.Duration
	// BatchRows is how many samples are handed on at once; 0: every poll
	// (20,000 samples with Simulate).
	BatchRows int
	// DrainTimeout bounds the wait, at the end of a finite run, for the
	// spool to ship and to take what the poll loop kept while it was full.
	DrainTimeout time.Duration
	// NVML configures each host's NVML source.
	NVML nvml.Config
	// BestEffortUnused says where the time no instance of a best-effort
	// vGPU used goes.
	BestEffortUnused attribution.Unused
	// Granted bills HAMi-shared GPUs by each pod's granted cores % × time
	// instead of measured use (attribution.Options.Granted).
	Granted bool
	// NamespaceIsTenant and AccountIsTenant: an unmapped namespace or Slurm
	// account is its own tenant.
	NamespaceIsTenant, AccountIsTenant bool
	// Host is this machine's name and attribution, read when Simulate is nil.
	Host HostConfig
	// Simulate runs a simulated DGX fleet instead of NVML.
	Simulate *SimConfig
	// Spool and Shipper configure delivery to a Sink.
	Spool   spool.Config
	Shipper spool.ShipperConfig
}

// HostConfig is this machine's name and its attribution sources, tried in
// the order kubelet, cgroups, map file, libvirt domains.
type HostConfig struct {
	Name    string // "": the machine's host name
	MapFile string // attribution map (docs/collector.md); "": none
	// PodLabels reads the kubelet's pod list for label → tenant rules;
	// nil: pods resolve by namespace only.
	PodLabels     *attribution.PodLabelsConfig
	KubeletSocket string // pod-resources socket; "": not asked
	// NodeName is this Kubernetes node: DRA-claimed devices are resolved
	// from its ResourceSlices through the in-cluster API server, and HAMi
	// pods bound elsewhere are skipped. "": no DRA resolution.
	NodeName string
	// HAMi attributes HAMi-shared GPUs from the pod annotations of the
	// PodLabels pod list (which it needs).
	HAMi bool
	// ProcRoot and PodLogDir: cgroup attribution of processes to pods and
	// Slurm jobs; ProcRoot "" turns it off.
	ProcRoot, PodLogDir string
	// SlurmEnvironment: a process whose cgroup names no job belongs to the
	// job in its environment (SLURM_JOB_ID).
	SlurmEnvironment bool
	LibvirtDir       string // domain XML directory; "": none
}

// SimConfig is the simulated fleet (collectors/sim).
type SimConfig struct {
	Hosts, VGPUHosts, KubeHosts, GPUsPerHost int
	Seed                                     int64
	// Start of the simulated time; zero: Duration before the last full
	// hour (re-running within the hour writes the same samples), or now
	// for an open-ended run.
	Start time.Time
	// Speed is simulated seconds per wall second; 0 runs as fast as it
	// computes, which needs a Duration.
	Speed  float64
	Plants *sim.Plants
}

// Validate reports every problem with the config, joined, in the
// validation category.
func (c Config) Validate() error {
	errs := []error{collectors.LoopConfig{Interval: c.Interval}.Validate()}
	if c.Duration < 0 {
		errs = append(errs, fmt.Errorf("duration: %s is negative", c.Duration))
	}
	if c.BatchRows < 0 {
		errs = append(errs, fmt.Errorf("batch_rows: %d is negative", c.BatchRows))
	}
	if c.DrainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("drain_timeout: %s: must be positive", c.DrainTimeout))
	}
	if s := c.Simulate; s != nil {
		if s.Speed < 0 {
			errs = append(errs, fmt.Errorf("simulate.speed: %v is negative", s.Speed))
		}
		if s.Speed == 0 && c.Duration == 0 {
			errs = append(errs, errors.New("simulate.speed: 0 (as fast as possible) needs a duration"))
		}
	} else {
		if d := c.Host.LibvirtDir; d != "" {
			if st, err := os.Stat(d); err != nil || !st.IsDir() {
				errs = append(errs, fmt.Errorf("host.libvirt_dir: %s is not a readable directory", d))
			}
		}
		if p := c.Host.PodLabels; p != nil {
			if err := p.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("host.pod_labels: %w", err))
			}
		}
	}
	return fault.Validation(errors.Join(errs...))
}

// SimulatedSpoolDir is the default spool of simulated runs that ship to
// destination (a DSN): a spool belongs to one destination, so runs against
// different databases keep theirs apart.
func SimulatedSpoolDir(destination string) string {
	sum := sha256.Sum256([]byte(destination))
	return filepath.Join(os.TempDir(), "gpumeter-sim-spool-"+hex.EncodeToString(sum[:6]))
}

// Sink is where the shipper delivers spooled samples: ClickHouse, through
// internal/store.Store. Ping only warns: samples wait in the spool while
// it fails.
type Sink interface {
	spool.Sink
	Ping(ctx context.Context) error
}

// Deps are what the agent is given rather than builds.
type Deps struct {
	// NVML gives this machine's NVML library (gonvml.New); not called
	// with Config.Simulate.
	NVML func() gonvml.Interface
	// Registry takes the collector's, the spool's and the shipper's
	// metrics. Required.
	Registry prometheus.Registerer
	// Sink receives the samples through the spool (Config.Spool and
	// Config.Shipper); when nil, Out takes them directly.
	Sink Sink
	Out  collectors.Appender
}

// Agent is a collector run, built and not yet run.
type Agent struct {
	cfg      Config
	logger   *slog.Logger
	observer *metrics.Observer
	out      *output
	hosts    hostSet
	batch    *collectors.Batch
	loop     *collectors.Loop
}

// Result is what a run did.
type Result struct {
	Written uint64     // samples handed on (to the spool, or to Deps.Out)
	Fleet   *sim.Fleet // the simulated fleet, for its ledger; nil on NVML
}

// New validates cfg and builds the run: the output (the spool and its
// shipper, which starts shipping at once), the hosts and the poll loop.
// ctx bounds the shipper too: when it ends, shipping stops. Close
// releases what New opened, also after Run.
func New(ctx context.Context, cfg Config, deps Deps, logger *slog.Logger) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case deps.Registry == nil:
		return nil, errors.New("agent: no metrics registry")
	case (deps.Sink == nil) == (deps.Out == nil):
		return nil, errors.New("agent: want exactly one of a sink and an appender")
	case cfg.Simulate == nil && deps.NVML == nil:
		return nil, errors.New("agent: no NVML library")
	}
	logger = logger.With("component", "collector")
	a := &Agent{cfg: cfg, logger: logger, observer: metrics.New(deps.Registry)}
	if err := a.build(ctx, deps); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

func (a *Agent) build(ctx context.Context, deps Deps) error {
	var err error
	if deps.Sink != nil {
		a.out, err = spoolOutput(ctx, a.cfg, deps.Sink, deps.Registry, a.logger)
	} else {
		a.out = directOutput(deps.Out)
	}
	if err != nil {
		return err
	}
	flushRows := a.cfg.BatchRows
	if flushRows == 0 {
		flushRows = 1
		if a.cfg.Simulate != nil {
			flushRows = 20_000
		}
	}
	a.batch, err = collectors.NewBatch(collectors.BatchConfig{FlushRows: flushRows, MaxRows: max(flushRows, 1_000_000)}, a.out.counted)
	if err != nil {
		return err
	}
	a.observer.WatchBatch(a.batch)
	if a.cfg.Simulate != nil {
		err = a.simulatedHosts()
	} else {
		err = a.nvmlHost(deps.NVML())
	}
	if err != nil {
		return err
	}
	if err := a.out.checkPoll(a.hosts.gpus); err != nil {
		return err
	}
	apportion := attribution.Options{BestEffortUnused: a.cfg.BestEffortUnused, Granted: a.cfg.Granted}.Apportion
	a.loop, err = collectors.NewLoop(collectors.LoopConfig{Interval: a.cfg.Interval, Until: a.hosts.until}, a.hosts.hosts, apportion, a.batch, a.hosts.clock, a.logger, a.observer)
	return err
}

// Hosts is how many hosts the loop polls.
func (a *Agent) Hosts() int { return len(a.hosts.hosts) }

// Ready fails until a poll handed its samples on: the collector's
// readiness check.
func (a *Agent) Ready(ctx context.Context) error { return a.observer.Ready(ctx) }

// Run polls until the context ends or, for a finite run, until Duration
// has passed and everything is delivered (finish). Samples the output
// never took make the error, with their number.
func (a *Agent) Run(ctx context.Context) (Result, error) {
	began := time.Now()
	if err := a.loop.Run(ctx); err != nil {
		return Result{}, err
	}
	if err := finish(ctx, a.cfg.DrainTimeout, a.batch, a.out, a.logger); err != nil {
		return Result{}, err
	}
	res := Result{Written: a.out.written.Load(), Fleet: a.hosts.fleet}
	a.logger.Info("collector stopped", "samples", res.Written, "elapsed", time.Since(began).Round(time.Millisecond))
	return res, nil
}

// Close releases the hosts' NVML handles and the simulated fleet's files,
// then stops the shipper and closes the spool.
func (a *Agent) Close() {
	a.hosts.close(a.logger)
	if a.out != nil {
		a.out.close()
	}
}
