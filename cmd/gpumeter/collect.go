package main

import (
	"context"
	"errors"
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	promcollectors "github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/agent"
	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/importer"
	"github.com/gpumeter/gpumeter/internal/server"
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
kubelet's pod resources with DRA claims resolved through the node's
ResourceSlices, HAMi's pod annotations, process cgroups of pods and Slurm
jobs, the map file, libvirt domains), and splits each interval into samples
that add up exactly. Samples go through an on-disk spool to ClickHouse
(--sink), at least once; metrics, /healthz and /readyz are on --listen. --simulate runs a
deterministic simulated DGX fleet instead of NVML and prints what it ran. The
spool and shipper flags' defaults are the config's collector section
(docs/collector.md, docs/delivery.md).`,
		Example: "  gpumeter --config /etc/gpumeter/gpumeter.yaml collect --spool /var/lib/gpumeter/spool --listen :9401\n" +
			"  gpumeter collect --simulate --hosts 2 --duration 6h --start 2026-11-05T00:00:00Z --listen \"\"" +
			"\n  gpumeter collect --simulate --hosts 0 --kube --hami-billing granted --duration 1h --sink jsonl --listen \"\"",
		Args: cli.NoArgs,
	}
	fs := cmd.Flags()
	var f agent.Flags
	f.Register(fs, g.cfg.Collector)
	listen := fs.String("listen", ":9401", "address of /metrics, /healthz and /readyz; empty disables")
	sink := fs.String("sink", "clickhouse", "where samples go: clickhouse, jsonl (stdout, the import format) or discard")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := f.Config(fs, g.cfg.Collector, g.dsn)
		switch *sink {
		case "clickhouse", "jsonl", "discard":
		default:
			err = errors.Join(cli.Usagef("--sink: %q is not clickhouse, jsonl or discard", *sink), err)
		}
		if err != nil {
			return err
		}
		return runCollect(cmd.Context(), g, cfg, *listen, *sink, deps)
	}
	return cmd
}

// runCollect runs the collector: the flags as the agent's config, the
// output --sink names, the metrics listener, and the ledger of a simulated
// run.
func runCollect(ctx context.Context, g *globals, cfg agent.Config, listen, sink string, deps collectDeps) error {
	reg := deps.registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(promcollectors.NewGoCollector(), promcollectors.NewProcessCollector(promcollectors.ProcessCollectorOpts{}))
	}
	ad := agent.Deps{NVML: deps.newNVML, Registry: reg}
	switch sink {
	case "clickhouse":
		// Samples go through the on-disk spool; the store need not be
		// reachable now.
		dsn, err := store.ParseDSN(g.dsn)
		if err != nil {
			return cli.Usage(err)
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
	a, err := agent.New(ctx, cfg, ad, g.logger)
	if err != nil {
		return err
	}
	defer a.Close()
	logger := g.logger.With("component", "collector")
	if listen != "" {
		srv := server.New(server.DefaultConfig(), reg, logger, server.Check{Name: "poll", Ready: a.Ready})
		srv.MountMetrics(reg)
		_, stop, err := srv.Start(ctx, listen)
		if err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		defer func() {
			if err := stop(); err != nil {
				logger.Warn("metrics listener", "err", err)
			}
		}()
	}
	logger.Info("collecting", "hosts", a.Hosts(), "interval", cfg.Interval, "simulate", cfg.Simulate != nil, "sink", sink)
	res, err := a.Run(ctx)
	if err != nil {
		return err
	}
	if res.Fleet != nil && g.stdout != nil && sink != "jsonl" {
		if err := reports.WriteSimLedger(g.stdout, reports.SimLedgerOf(res.Fleet, res.Written)); err != nil {
			return fmt.Errorf("print the ledger: %w", err)
		}
	}
	return nil
}
