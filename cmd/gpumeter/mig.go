package main

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/partition"
	"github.com/gpumeter/gpumeter/internal/partition/nvmlapply"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/reports"
)

func newMIGCmd(g *globals, newNVML func(...nvml.LibraryOption) nvml.Interface) *cobra.Command {
	return cli.Group(&cobra.Command{
		Use:   "mig",
		Short: "plan and apply MIG partition layouts",
		Long: `mig plans MIG layouts that serve the tenants' demand (reserved instances
first, then as much pending demand as fits, with NVIDIA's placement rules,
busy instances never touched and as few GPUs changed as possible) and
applies a plan on a host through NVML. docs/partition.md describes the
files.`,
		Example: "  gpumeter mig plan --fleet fleet.yaml --demand demand.yaml --out plan.yaml\n" +
			"  gpumeter mig apply --plan plan.yaml --yes",
	}, newMIGPlanCmd(g), newMIGApplyCmd(g, newNVML))
}

func newMIGPlanCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan (--fleet FILE | --from-clickhouse) --demand FILE [--out PLAN] [--mig-parted FILE]",
		Short: "print target MIG layouts that serve the demand",
		Long: `plan prints target MIG layouts for the fleet (a YAML file, or the newest
samples in ClickHouse) that serve the demand, reserved first. --out writes
the plan that mig apply reads; --mig-parted writes a mig-parted config.
SIGINT or SIGTERM stops the search, and nothing is written.`,
		Example: "  gpumeter mig plan --fleet fleet.yaml --demand demand.yaml --out plan.yaml\n" +
			"  gpumeter --clickhouse clickhouse://127.0.0.1:9000/gpumeter mig plan --from-clickhouse --demand demand.yaml",
		Args: cli.NoArgs,
	}
	fs := cmd.Flags()
	fleetFile := fs.String("fleet", "", "fleet YAML: GPUs and their current MIG instances")
	fromCH := fs.Bool("from-clickhouse", false, "read the fleet from the newest usage samples in ClickHouse (--clickhouse)")
	demandFile := fs.String("demand", "", "demand YAML: reserved and pending instances per tenant (required)")
	out := fs.String("out", "", "write the plan as YAML here (the input of mig apply)")
	migParted := fs.String("mig-parted", "", "write a mig-parted config here")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		switch {
		case (*fleetFile == "") == !*fromCH:
			return cli.Usagef("give exactly one of --fleet FILE and --from-clickhouse")
		case *demandFile == "":
			return cli.Usagef("--demand FILE is required")
		}

		var demand partition.Demand
		if err := partition.ReadChecked(*demandFile, &demand); err != nil {
			return cli.Usagef("--demand: %w", err)
		}
		fleet, skipped, err := migFleet(ctx, g, *fleetFile)
		if err != nil {
			return err
		}
		// ctx is main's signal.NotifyContext: SIGINT or SIGTERM stops the search.
		plan, err := partition.SolveContext(ctx, fleet, demand)
		if err != nil {
			return err
		}
		plan.Skipped = skipped
		// Write the files before printing, so a failed write is not hidden
		// behind a screenful of plan.
		if err := plan.WriteFiles(*out, *migParted); err != nil {
			return err
		}
		return reports.WritePlanWithFiles(g.stdout, plan, *out, *migParted)
	}
	return cmd
}

func newMIGApplyCmd(g *globals, newNVML func(...nvml.LibraryOption) nvml.Interface) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "apply --plan FILE [--yes]",
		Short: "change this host's GPUs to a plan through NVML",
		Long: `apply makes this host's GPUs match a plan written by mig plan --out, through
NVML. Without --yes it is a dry run that prints what it would change. It
refuses, changing nothing, when MIG mode is off, an instance to remove has
processes, or a device is not the planned model.`,
		Example: "  gpumeter mig apply --plan plan.yaml\n  gpumeter mig apply --plan plan.yaml --yes",
		Args:    cli.NoArgs,
	}
	fs := cmd.Flags()
	planFile := fs.String("plan", "", "plan YAML written by mig plan --out (required)")
	yes := fs.Bool("yes", false, "change the GPUs; without it nothing is changed (dry run)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if *planFile == "" {
			return cli.Usagef("--plan FILE is required")
		}
		var plan partition.Plan
		if err := partition.ReadChecked(*planFile, &plan); err != nil {
			return cli.Usagef("--plan: %w", err)
		}

		lib := newNVML()
		shutdown, err := nvmlapply.Init(lib)
		if err != nil {
			return err
		}
		defer shutdown()

		rep, err := nvmlapply.Apply(ctx, lib, plan, nvmlapply.ApplyOptions{Execute: *yes})
		if werr := reports.WriteApply(g.stdout, rep, err == nil); err == nil && werr != nil {
			return fmt.Errorf("write report: %w", werr)
		}
		return err
	}
	return cmd
}

// migFleet is the fleet of a plan: the --fleet file, or else (no file
// given) the newest samples in ClickHouse, without the GPUs that cannot be
// planned (vGPU hosts, models without MIG tables), which it lists.
func migFleet(ctx context.Context, g *globals, file string) (partition.Fleet, []partition.Skipped, error) {
	var fleet partition.Fleet
	if file != "" {
		if err := partition.ReadChecked(file, &fleet); err != nil {
			return fleet, nil, cli.Usagef("--fleet: %w", err)
		}
		return fleet, nil, nil
	}
	st, err := openStore(ctx, g)
	if err != nil {
		return fleet, nil, err
	}
	defer st.Close()
	rows, err := st.FleetSamples(ctx, store.FleetQuery{Window: partition.FleetWindow})
	if err != nil {
		return fleet, nil, err
	}
	fleet, skipped := partition.FleetFromSamples(rows)
	if err := fleet.Validate(); err != nil {
		return fleet, nil, fmt.Errorf("fleet from clickhouse: %w", err)
	}
	return fleet, skipped, nil
}
