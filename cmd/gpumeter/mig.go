package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/partition"
	"github.com/gpumeter/gpumeter/internal/partition/nvmlapply"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/reports"
)

// fleetWindow is how far behind the newest sample a GPU's own newest sample
// may be and still count as part of the fleet (collectors sample every 10 s).
const fleetWindow = 10 * time.Minute

func newMIGCmd(g *globals, newNVML func(...nvml.LibraryOption) nvml.Interface) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mig",
		Short: "plan and apply MIG partition layouts",
		Long: `mig plans MIG layouts that serve the tenants' demand (reserved instances
first, then as much pending demand as fits, with NVIDIA's placement rules,
busy instances never touched and as few GPUs changed as possible) and
applies a plan on a host through NVML. docs/partition.md describes the
files.`,
		Example: "  gpumeter mig plan --fleet fleet.yaml --demand demand.yaml --out plan.yaml\n" +
			"  gpumeter mig apply --plan plan.yaml --yes",
		Args: subcommandArgs,
		RunE: wantSubcommand,
	}
	cmd.AddCommand(newMIGPlanCmd(g), newMIGApplyCmd(g, newNVML))
	return cmd
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
		Args: noArgs,
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
			return usageErrorf("give exactly one of --fleet FILE and --from-clickhouse")
		case *demandFile == "":
			return usageErrorf("--demand FILE is required")
		}

		var demand partition.Demand
		if err := readYAML(*demandFile, &demand); err != nil {
			return usageErrorf("--demand: %w", err)
		}
		if err := demand.Validate(); err != nil {
			return usageErrorf("--demand %s: %w", *demandFile, err)
		}
		var (
			fleet   partition.Fleet
			skipped []partition.Skipped
		)
		if *fromCH {
			st, err := openStore(ctx, g)
			if err != nil {
				return err
			}
			defer st.Close()
			rows, err := st.FleetSamples(ctx, store.FleetQuery{Window: fleetWindow})
			if err != nil {
				return err
			}
			// vGPU hosts and models without MIG tables are left out; the plan
			// lists them with the reason.
			fleet, skipped = partition.FleetFromSamples(rows)
			if err := fleet.Validate(); err != nil {
				return fmt.Errorf("fleet from clickhouse: %w", err)
			}
		} else {
			if err := readYAML(*fleetFile, &fleet); err != nil {
				return usageErrorf("--fleet: %w", err)
			}
			if err := fleet.Validate(); err != nil {
				return usageErrorf("--fleet %s: %w", *fleetFile, err)
			}
		}

		// ctx is main's signal.NotifyContext: SIGINT or SIGTERM stops the search.
		plan, err := partition.SolveContext(ctx, fleet, demand)
		if err != nil {
			return err
		}
		plan.Skipped = skipped
		// Write the files before printing, so a failed write is not hidden
		// behind a screenful of plan.
		if *out != "" {
			if err := writeYAML(*out, plan); err != nil {
				return err
			}
		}
		if *migParted != "" {
			cfg, err := plan.MIGParted()
			if err != nil {
				return err
			}
			if err := writeYAML(*migParted, cfg); err != nil {
				return err
			}
		}
		if err := reports.WritePlan(g.stdout, plan); err != nil {
			return fmt.Errorf("write plan: %w", err)
		}
		if *out != "" {
			fmt.Fprintf(g.stdout, "\nwrote plan to %s (apply it on each host: gpumeter mig apply --plan %s)\n", *out, *out)
		}
		if *migParted != "" {
			fmt.Fprintf(g.stdout, "wrote mig-parted config to %s\n", *migParted)
		}
		return nil
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
		Args:    noArgs,
	}
	fs := cmd.Flags()
	planFile := fs.String("plan", "", "plan YAML written by mig plan --out (required)")
	yes := fs.Bool("yes", false, "change the GPUs; without it nothing is changed (dry run)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if *planFile == "" {
			return usageErrorf("--plan FILE is required")
		}
		var plan partition.Plan
		if err := readYAML(*planFile, &plan); err != nil {
			return usageErrorf("--plan: %w", err)
		}
		if err := plan.Validate(); err != nil {
			return usageErrorf("--plan %s: %w", *planFile, err)
		}

		lib := newNVML()
		switch ret := lib.Init(); ret {
		case nvml.SUCCESS:
		case nvml.ERROR_LIBRARY_NOT_FOUND:
			return errors.New("NVML library (libnvidia-ml.so.1) not found: run mig apply on a GPU host with the NVIDIA driver installed")
		default:
			return fmt.Errorf("initialise NVML: %v", ret)
		}
		defer lib.Shutdown()

		rep, err := nvmlapply.Apply(ctx, lib, plan, nvmlapply.ApplyOptions{Execute: *yes})
		if werr := reports.WriteApply(g.stdout, rep, err == nil); err == nil && werr != nil {
			return fmt.Errorf("write report: %w", werr)
		}
		return err
	}
	return cmd
}

// readYAML decodes one YAML document, rejecting unknown fields so that a
// misspelt key is an error, not a silently ignored setting.
func readYAML(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s is empty", path)
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeYAML(path string, v any) error {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
