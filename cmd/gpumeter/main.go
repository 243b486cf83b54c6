// Command gpumeter meters shared GPU fleets: one binary with subcommands.
// This package holds flag parsing and wiring only.
package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/gpumeter/gpumeter/cmd/gpumeter/config"
	"github.com/gpumeter/gpumeter/internal/cli"
)

// version and commit are set at build time (the Makefile's build target):
// go build -ldflags "-X main.version=v1.2.0 -X main.commit=$(git rev-parse HEAD)".
var version, commit string

// globals are the flags every subcommand shares, and what the root's setup
// makes of them before a command runs.
type globals struct {
	configPath string
	dsn        string
	logLevel   string
	stdout     io.Writer
	stderr     io.Writer
	logger     *slog.Logger
	cfg        config.Config
	// leases is serve's client of the Lease election; nil: the pod's
	// in-cluster API (tests give a fake API server's).
	leases coordinationclient.CoordinationV1Interface
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// Flag defaults are the built-in config's; a config file's values
	// replace them in the commands, for the flags not given.
	g := &globals{stdout: stdout, stderr: stderr, cfg: config.Default()}
	return cli.Execute(ctx, newRootCmd(g), args, stderr)
}

func newRootCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "gpumeter",
		Short: "gpumeter meters, prices and invoices the use of shared GPU fleets.",
		Long: `Global settings come from the config file, then the environment (` + config.EnvConfig + `,
` + config.EnvClickHouse + `, ` + config.EnvLogLevel + `), then the flags; an empty flag value
(--clickhouse=) is refused, never read as "the default". Long flags take two
dashes (--period, not -period).

Exit status, for every command: 0 done; 2 bad input (unknown command or
flag, malformed values, stray arguments, files that do not validate), found
before anything is changed; 1 a failure while running (ClickHouse
unreachable, a query or write failing, NVML errors).

"gpumeter <command> --help" describes a command, its flags and examples.`,
		Example: "  gpumeter --clickhouse clickhouse://127.0.0.1:9000/gpumeter usage --from 2026-11-01\n" +
			"  gpumeter usage --from 2026-11-01 --clickhouse clickhouse://127.0.0.1:9000/gpumeter\n" +
			"  gpumeter help invoice",
		Version:           cli.Version(version, commit),
		PersistentPreRunE: g.setup,
	}
	addGlobalFlags(root.PersistentFlags(), g)
	cli.Group(root, newMigrateCmd(g), newImportCmd(g), newUsageCmd(g), newDemoCmd(g), newServeCmd(g),
		newRollupCmd(g), newRetentionCmd(g), newQuoteCmd(g), newInvoiceCmd(g), newChargebackCmd(g),
		newKeysCmd(g), newCreditsCmd(g), newWebhooksCmd(g), newMIGCmd(g, gonvml.New), newInsightsCmd(g), newSlurmCmd(g),
		newCollectCmd(g, collectDeps{newNVML: func() gonvml.Interface { return gonvml.New() }}))
	cli.Conventions(root, g.stdout, g.stderr)
	return root
}

// addGlobalFlags defines the global flags on fs, their defaults from the
// environment.
func addGlobalFlags(fs *pflag.FlagSet, g *globals) {
	env := config.FromEnv(os.Getenv)
	fs.StringVar(&g.configPath, "config", env.ConfigPath, "YAML config file (env "+config.EnvConfig+")")
	fs.StringVar(&g.dsn, "clickhouse", env.ClickHouse, "ClickHouse DSN, native protocol: clickhouse://user:pass@host:9000/db (env "+config.EnvClickHouse+"; default from --config, else local)")
	fs.StringVar(&g.logLevel, "log-level", env.LogLevel, "debug, info, warn or error (env "+config.EnvLogLevel+")")
}

// setup loads the config and makes the logger, once, before the command
// runs. Precedence: config file, then environment (the flag defaults),
// then flags.
func (g *globals) setup(cmd *cobra.Command, _ []string) error {
	if cli.NeedsNoConfig(cmd) {
		return nil
	}
	if err := cli.RefuseEmpty(cmd.Flags(), "config", "clickhouse", "log-level"); err != nil {
		return err
	}
	cfg, err := config.Load(g.configPath)
	if err != nil {
		return cli.Usage(err)
	}
	g.cfg = cfg
	if g.dsn == "" {
		g.dsn = cfg.ClickHouse.DSN
	}
	if g.logLevel == "" {
		g.logLevel = cfg.Log.Level
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return cli.Usagef("--log-level: %v", err)
	}
	g.logger = slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
	return nil
}
