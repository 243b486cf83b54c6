package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	promcollectors "github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/internal/importer"
	"github.com/gpumeter/gpumeter/internal/server"
)

// collectDeps are what tests replace: the NVML library and the registry.
type collectDeps struct {
	newNVML  func() gonvml.Interface
	registry *prometheus.Registry
}

func runCollect(ctx context.Context, g *globals, args []string) error {
	return collect(ctx, g, args, collectDeps{newNVML: func() gonvml.Interface { return gonvml.New() }})
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
	gpus     int
	seed     int64
	start    string
	speed    float64

	kubeletSocket     string
	podsURL           string
	podsTokenFile     string
	podsInsecure      bool
	procRoot          string
	podLogDir         string
	mapFile           string
	namespaceIsTenant bool
	accountIsTenant   bool
	gpm               bool
	maxPowerWatts     uint64
}

func parseCollectFlags(g *globals, args []string) (collectFlags, error) {
	var f collectFlags
	fs := flag.NewFlagSet("collect", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	kube := attribution.DefaultKubeletConfig()
	cg := attribution.DefaultCgroupConfig()
	fs.DurationVar(&f.interval, "interval", collectors.DefaultInterval, "sampling interval")
	fs.DurationVar(&f.duration, "duration", 0, "stop after this long (simulated time with --simulate); 0 runs until interrupted")
	fs.StringVar(&f.listen, "listen", ":9401", "address of /metrics, /healthz and /readyz; empty disables")
	fs.StringVar(&f.sink, "sink", "clickhouse", "where samples go: clickhouse, jsonl (stdout, the import format) or discard")
	fs.StringVar(&f.host, "host", "", "host name in samples (default: the machine's)")
	fs.IntVar(&f.batchRows, "batch-rows", 0, "samples per ClickHouse insert (default: every poll; 20000 with --simulate)")
	sc, shc := g.cfg.Collector.Spool, g.cfg.Collector.Shipper
	fs.StringVar(&f.spoolDir, "spool", "", "spool directory: samples are fsynced here before shipping (default collector.spool.dir of the config, /var/lib/gpumeter/spool; with --simulate one per DSN under $TMPDIR)")
	fs.Int64Var(&f.spoolMaxBytes, "spool-max-bytes", sc.MaxBytes, "bound on the spool's size")
	fs.StringVar(&f.spoolOverflow, "spool-overflow", string(sc.Overflow), "when the spool is full: drop_oldest or reject")
	fs.IntVar(&f.shipRows, "ship-batch-rows", shc.BatchRows, "rows per ClickHouse insert from the spool (10000-100000)")
	fs.DurationVar(&f.shipFlush, "ship-flush", shc.FlushInterval, "ship a smaller batch after this long")
	fs.DurationVar(&f.shipBackoff, "ship-backoff-max", shc.BackoffMax, "longest wait between retries while ClickHouse is down")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", 10*time.Minute, "at the end of a finite run, how long to wait for the spool to ship (it stays on disk either way)")
	fs.BoolVar(&f.simulate, "simulate", false, "read a simulated DGX fleet instead of NVML")
	fs.IntVar(&f.hosts, "hosts", 2, "simulated hosts")
	fs.IntVar(&f.gpus, "gpus", 8, "GPUs per simulated host")
	fs.Int64Var(&f.seed, "seed", 1, "seed of the simulated fleet")
	fs.StringVar(&f.start, "start", "", "simulated start time, RFC 3339 (default: --duration before the last full hour, or now)")
	fs.Float64Var(&f.speed, "speed", 0, "simulated seconds per wall second; 0 runs as fast as possible (needs --duration)")
	fs.StringVar(&f.kubeletSocket, "kubelet-socket", kube.Socket, "kubelet pod-resources socket; empty disables")
	pl := attribution.DefaultPodLabelsConfig()
	fs.StringVar(&f.podsURL, "kubelet-pods-url", "", "kubelet pod list for label → tenant rules, e.g. https://127.0.0.1:10250/pods; empty disables")
	fs.StringVar(&f.podsTokenFile, "kubelet-token-file", pl.TokenFile, "bearer token for --kubelet-pods-url")
	fs.BoolVar(&f.podsInsecure, "kubelet-insecure-tls", false, "do not verify the kubelet's serving certificate")
	fs.StringVar(&f.procRoot, "proc-root", cg.ProcRoot, "procfs, for PID → pod or Slurm job")
	fs.StringVar(&f.podLogDir, "pod-log-dir", cg.PodLogDir, "kubelet pod log directory, for pod UID → namespace/name")
	fs.StringVar(&f.mapFile, "map-file", "", "attribution map: device, namespace and account → tenant (docs/collector.md)")
	fs.BoolVar(&f.namespaceIsTenant, "namespace-is-tenant", true, "an unmapped namespace is its own tenant")
	fs.BoolVar(&f.accountIsTenant, "account-is-tenant", true, "an unmapped Slurm account is its own tenant")
	fs.BoolVar(&f.gpm, "gpm", true, "read per-MIG SM activity from GPM where supported")
	fs.Uint64Var(&f.maxPowerWatts, "max-power-watts", nvml.DefaultConfig().MaxPowerWatts, "energy deltas above this board power are dropped as bad reads")
	if err := fs.Parse(args); err != nil {
		return f, usageError{err}
	}
	if fs.NArg() > 0 {
		return f, usageErrorf("unexpected arguments %v", fs.Args())
	}
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
		if f.start != "" {
			if _, err := time.Parse(time.RFC3339, f.start); err != nil {
				errs = append(errs, fmt.Errorf("--start: %q is not RFC 3339", f.start))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return f, usageError{err}
	}
	return f, nil
}

// collect runs the collector: NVML or the simulated fleet, attribution,
// apportioning, the sink, and the metrics listener.
func collect(ctx context.Context, g *globals, args []string, deps collectDeps) (err error) {
	f, err := parseCollectFlags(g, args)
	if err != nil {
		return err
	}
	logger := g.logger.With("component", "collector")
	reg := deps.registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(promcollectors.NewGoCollector(), promcollectors.NewProcessCollector(promcollectors.ProcessCollectorOpts{}))
	}
	metrics := newCollectorMetrics(reg)

	// Sink.
	var out collectors.Appender
	var written atomic.Uint64
	drain := func(context.Context) error { return nil }
	checkPoll := func(int) error { return nil }
	switch f.sink {
	case "clickhouse":
		// Samples go to the on-disk spool first; the shipper delivers them
		// to ClickHouse at least once, and survives outages and restarts.
		d, err := startDelivery(ctx, g, f, reg, logger)
		if err != nil {
			return err
		}
		defer d.stop()
		drain = d.drain
		checkPoll = func(gpus int) error {
			if err := d.cfg.CheckPoll(gpus); err != nil {
				return usageErrorf("collector.spool.%v", err)
			}
			return nil
		}
		out = d.spool
	case "jsonl":
		var err error
		if out, err = jsonlSink(g.stdout); err != nil {
			return err
		}
	case "discard":
		out = collectors.AppenderFunc(func(context.Context, []collectors.Sample) error { return nil })
	}
	counted := collectors.AppenderFunc(func(ctx context.Context, s []collectors.Sample) error {
		if err := out.Append(ctx, s); err != nil {
			return err
		}
		written.Add(uint64(len(s)))
		return nil
	})
	flushRows := f.batchRows
	if flushRows == 0 {
		flushRows = 1
		if f.simulate {
			flushRows = 20_000
		}
	}
	batch, err := collectors.NewBatch(collectors.BatchConfig{FlushRows: flushRows, MaxRows: max(flushRows, 1_000_000)}, counted)
	if err != nil {
		return err
	}
	metrics.watchBatch(batch)

	// Sources, attribution, clock.
	nvmlCfg := nvml.DefaultConfig()
	nvmlCfg.GPM, nvmlCfg.MaxPowerWatts = f.gpm, f.maxPowerWatts
	var (
		hosts   []collectors.Host
		clock   collectors.Clock
		until   time.Time
		fleet   *sim.Fleet
		closers []func() error
	)
	defer func() {
		for _, c := range closers {
			if cerr := c(); cerr != nil {
				logger.Warn("close", "err", cerr)
			}
		}
	}()
	if f.simulate {
		// By default a finite run covers the hours up to the last full hour
		// (re-running within the hour writes the same samples again); an
		// open-ended one starts now.
		start := time.Now().UTC().Truncate(f.interval)
		if f.duration > 0 {
			start = time.Now().UTC().Truncate(time.Hour).Add(-f.duration)
		}
		if f.start != "" {
			start, _ = time.Parse(time.RFC3339, f.start)
		}
		root, err := os.MkdirTemp("", "gpumeter-sim-")
		if err != nil {
			return fmt.Errorf("simulated fleet: %w", err)
		}
		closers = append(closers, func() error { return os.RemoveAll(root) })
		fleet, err = sim.New(sim.Config{Hosts: f.hosts, GPUsPerHost: f.gpus, Seed: f.seed, Start: start, Step: f.interval, Root: root})
		if err != nil {
			return usageError{err}
		}
		mapping, err := attribution.ParseMapping(strings.NewReader(fleet.MapFile()))
		if err != nil {
			return fmt.Errorf("simulated fleet map: %w", err)
		}
		if err := checkPoll(f.hosts * f.gpus); err != nil {
			return err
		}
		tenancy := attribution.Tenancy{Mapping: mapping, NamespaceIsTenant: f.namespaceIsTenant, AccountIsTenant: f.accountIsTenant}
		for _, h := range fleet.Hosts() {
			src, err := nvml.New(h.NVML(), nvmlCfg, logger.With("host", h.Name()), metrics)
			if err != nil {
				return err
			}
			closers = append(closers, src.Close)
			cg, err := attribution.NewCgroup(attribution.CgroupConfig{ProcRoot: h.ProcRoot(), PodLogDir: h.PodLogDir()}, tenancy, logger)
			if err != nil {
				return err
			}
			chain := attribution.NewChain(logger,
				attribution.Step{Name: "cgroup", Attributor: cg},
				attribution.Step{Name: "static", Attributor: attribution.NewStatic(mapping)})
			hosts = append(hosts, collectors.Host{Name: h.Name(), Sources: []collectors.NamedSource{{Name: "nvml", Source: src}}, Attributor: chain})
		}
		clock = fleet.Clock(f.speed)
		if f.duration > 0 {
			until = fleet.Start().Add(f.duration).Truncate(time.Second)
		}
	} else {
		name := f.host
		if name == "" {
			if name, err = os.Hostname(); err != nil {
				return fmt.Errorf("host name: %w (pass --host)", err)
			}
		}
		src, err := nvml.New(deps.newNVML(), nvmlCfg, logger, metrics)
		if err != nil {
			return err
		}
		closers = append(closers, src.Close)
		if err := checkPoll(len(src.GPUs())); err != nil {
			return err
		}
		for _, gpu := range src.GPUs() {
			logger.Info("gpu", "gpu_index", gpu.Index, "gpu_uuid", gpu.UUID, "model", gpu.Model, "name", gpu.Name, "pci_bus_id", gpu.PCIBusID)
		}
		mapping := attribution.Mapping{}
		if f.mapFile != "" {
			if mapping, err = attribution.LoadMapping(f.mapFile); err != nil {
				return usageError{err}
			}
		}
		tenancy := attribution.Tenancy{Mapping: mapping, NamespaceIsTenant: f.namespaceIsTenant, AccountIsTenant: f.accountIsTenant}
		if f.podsURL != "" {
			pcfg := attribution.DefaultPodLabelsConfig()
			pcfg.URL, pcfg.TokenFile, pcfg.InsecureSkipVerify = f.podsURL, f.podsTokenFile, f.podsInsecure
			pods, err := attribution.NewKubeletPods(pcfg, logger)
			if err != nil {
				return usageError{err}
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
				return usageError{err}
			}
			closers = append(closers, k.Close)
			steps = append(steps, attribution.Step{Name: "kubelet", Attributor: k})
		}
		if f.procRoot != "" {
			cg, err := attribution.NewCgroup(attribution.CgroupConfig{ProcRoot: f.procRoot, PodLogDir: f.podLogDir}, tenancy, logger)
			if err != nil {
				return usageError{err}
			}
			steps = append(steps, attribution.Step{Name: "cgroup", Attributor: cg})
		}
		steps = append(steps, attribution.Step{Name: "static", Attributor: attribution.NewStatic(mapping)})
		hosts = []collectors.Host{{Name: name, Sources: []collectors.NamedSource{{Name: "nvml", Source: src}}, Attributor: attribution.NewChain(logger, steps...)}}
		clock = collectors.WallClock{}
		if f.duration > 0 {
			until = time.Now().Add(f.duration).Truncate(time.Second) // boundaries are whole seconds
		}
	}

	loop, err := collectors.NewLoop(collectors.LoopConfig{Interval: f.interval, Until: until}, hosts, attribution.Apportion, batch, clock, logger, metrics)
	if err != nil {
		return err
	}

	// Metrics listener, owned here: shut down and waited for on return.
	if f.listen != "" {
		_, stop, err := serveMetrics(f.listen, reg, metrics, logger)
		if err != nil {
			return err
		}
		defer stop()
	}

	began := time.Now()
	logger.Info("collecting", "hosts", len(hosts), "interval", f.interval, "simulate", f.simulate, "sink", f.sink)
	if err := loop.Run(ctx); err != nil {
		return err
	}
	// Flush what is buffered even when interrupted.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := batch.Flush(fctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if ctx.Err() == nil {
		// A finite run ends when everything it spooled is in ClickHouse.
		dctx, cancel := context.WithTimeout(ctx, f.drainTimeout)
		defer cancel()
		logger.Info("collection finished; waiting for the spool to ship")
		if err := drain(dctx); err != nil {
			return fmt.Errorf("samples stay in the spool and ship on the next start: %w", err)
		}
	}
	logger.Info("collector stopped", "samples", written.Load(), "elapsed", time.Since(began).Round(time.Millisecond))
	if fleet != nil && g.stdout != nil && f.sink != "jsonl" {
		printLedger(g.stdout, fleet, written.Load())
	}
	return nil
}

// printLedger prints what the simulator ran, per tenant, to compare with
// `gpumeter usage` over the same range.
func printLedger(w io.Writer, fleet *sim.Fleet, written uint64) {
	l := fleet.Ledger()
	fmt.Fprintf(w, "simulated %d hosts from %s to %s: %d samples written\n",
		len(fleet.Hosts()), fleet.Start().Format(time.RFC3339), fleet.Now().Format(time.RFC3339), written)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tenant\tgpu-seconds\tenergy-kWh\t")
	for _, t := range l.Tenants() {
		name := t
		if name == "" {
			name = "(idle)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t\n", name, microsToSeconds(l.GPUMicroseconds[t]), l.EnergyMillijoules[t]/3.6e9)
	}
	tw.Flush()
}

func microsToSeconds(us uint64) string {
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}

// jsonlSink writes samples as JSON Lines with the importer's writer: the
// format `gpumeter import` reads (docs/import.md).
func jsonlSink(w io.Writer) (collectors.Appender, error) {
	jw, err := importer.NewWriter(w, importer.FormatJSONL)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	return collectors.AppenderFunc(func(_ context.Context, samples []collectors.Sample) error {
		mu.Lock()
		defer mu.Unlock()
		if err := jw.Write(samples); err != nil {
			return err
		}
		// Flushed at every batch: the file is whole whenever the collector stops.
		return jw.Flush()
	}), nil
}

// serveMetrics serves /metrics, /healthz and /readyz (ready after the first
// successful poll). It returns the address it listens on and the function
// that shuts the server down and waits for it.
func serveMetrics(addr string, reg *prometheus.Registry, m *collectorMetrics, logger *slog.Logger) (string, func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !m.ready.Load() {
			http.Error(w, "no successful poll yet", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	srv := server.DefaultConfig().HTTPServer(mux)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	logger.Info("metrics listening", "addr", lis.Addr().String())
	return lis.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("metrics listener", "err", err)
		}
	}, nil
}

// collectorMetrics is the collector's Prometheus view: it is the loop's
// collectors.Observer and the NVML source's nvml.Metrics.
type collectorMetrics struct {
	polls          *prometheus.CounterVec
	samples        prometheus.Counter
	lastPoll       prometheus.Gauge
	nvmlErrors     *prometheus.CounterVec
	sourceDuration *prometheus.GaugeVec
	sourceUp       *prometheus.GaugeVec
	gpuErrors      *prometheus.CounterVec
	attrErrors     *prometheus.CounterVec
	reg            *prometheus.Registry
	ready          atomic.Bool
}

var (
	_ collectors.Observer = (*collectorMetrics)(nil)
	_ nvml.Metrics        = (*collectorMetrics)(nil)
)

func newCollectorMetrics(reg *prometheus.Registry) *collectorMetrics {
	m := &collectorMetrics{
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumeter_collector_polls_total", Help: "Polls, by result of handing the samples on (ok or error).",
		}, []string{"result"}),
		samples: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpumeter_collector_samples_total", Help: "Samples emitted by polls.",
		}),
		lastPoll: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpumeter_collector_last_poll_duration_seconds", Help: "Wall time of the last poll.",
		}),
		nvmlErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumeter_collector_nvml_errors_total", Help: "Failed NVML calls, by function and return code.",
		}, []string{"function", "code"}),
		sourceDuration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpumeter_collector_source_duration_seconds", Help: "Duration of the last read of a source.",
		}, []string{"host", "source"}),
		sourceUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpumeter_collector_source_success", Help: "Whether the last read of a source succeeded.",
		}, []string{"host", "source"}),
		gpuErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumeter_collector_gpu_read_errors_total", Help: "Intervals a GPU could not be read (lost, driver errors).",
		}, []string{"host", "gpu_uuid"}),
		attrErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumeter_collector_attribution_errors_total", Help: "Polls whose attribution was incomplete.",
		}, []string{"host"}),
		reg: reg,
	}
	reg.MustRegister(m.polls, m.samples, m.lastPoll, m.nvmlErrors, m.sourceDuration, m.sourceUp, m.gpuErrors, m.attrErrors)
	return m
}

// watchBatch exports the batch's backlog and drops.
func (m *collectorMetrics) watchBatch(b *collectors.Batch) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gpumeter_collector_pending_samples", Help: "Samples buffered, not yet handed to the sink.",
		}, func() float64 { return float64(b.Pending()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gpumeter_collector_dropped_samples_total", Help: "Samples dropped because the buffer was full while the sink failed.",
		}, func() float64 { return float64(b.Dropped()) }),
	)
}

func (m *collectorMetrics) NVMLError(function, code string) {
	m.nvmlErrors.WithLabelValues(function, code).Inc()
}

func (m *collectorMetrics) SourceRead(host, source string, d time.Duration, err error) {
	m.sourceDuration.WithLabelValues(host, source).Set(d.Seconds())
	up := 1.0
	if err != nil {
		up = 0
	}
	m.sourceUp.WithLabelValues(host, source).Set(up)
}

func (m *collectorMetrics) GPUFailed(host, gpuUUID string, _ error) {
	m.gpuErrors.WithLabelValues(host, gpuUUID).Inc()
}

func (m *collectorMetrics) AttributionFailed(host string, _ error) {
	m.attrErrors.WithLabelValues(host).Inc()
}

func (m *collectorMetrics) Polled(d time.Duration, samples int, err error) {
	m.lastPoll.Set(d.Seconds())
	m.samples.Add(float64(samples))
	if err != nil {
		m.polls.WithLabelValues("error").Inc()
		return
	}
	m.polls.WithLabelValues("ok").Inc()
	m.ready.Store(true)
}
