// Command gpumeter meters shared GPU fleets: one binary with subcommands.
// This package holds flag parsing and wiring only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/gpumeter/gpumeter/internal/config"
)

// globals are the flags every subcommand shares.
type globals struct {
	configPath string
	dsn        string
	logLevel   string
	stdout     io.Writer
	stderr     io.Writer
	logger     *slog.Logger
	cfg        config.Config
}

type command struct {
	summary string
	run     func(ctx context.Context, g *globals, args []string) error
}

func commands() map[string]command {
	return map[string]command{
		"migrate":    {"apply ClickHouse schema migrations", runMigrate},
		"import":     {"import usage samples from CSV or JSON Lines", runImport},
		"usage":      {"print usage totals by tenant, department, SKU, host or workload", runUsage},
		"demo":       {"load the bundled demo data set and print a summary", runDemo},
		"serve":      {"run the server: HTTP, scheduled rollups and retention", runServe},
		"rollup":     {"recompute hourly rollups for a range, or run the job once", runRollup},
		"retention":  {"drop raw-sample months past the retention window", runRetention},
		"quote":      {"price quantities against a price book (no database)", runQuote},
		"invoice":    {"run, list, show, finalize, void and render invoices", runInvoice},
		"chargeback": {"charge a month's GPU use to departments and tenants", runChargeback},
		"keys":       {"create, list and revoke API keys and portal tokens", runKeys},
		"webhooks":   {"list the webhook outbox and replay events", runWebhooks},
		"mig":        {"plan and apply MIG partition layouts", runMIG},
		"collect":    {"run the GPU collector (NVML, or --simulate)", runCollect},
		"insights":   {"efficiency, right-sizing, anomalies and capacity from metered usage", runInsights},
		"slurm":      {"compare Slurm's allocated GPU-hours (sacct) with measured usage", runSlurm},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("gpumeter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := config.FromEnv(os.Getenv)
	fs.StringVar(&g.configPath, "config", env.ConfigPath, "YAML config file (env "+config.EnvConfig+")")
	fs.StringVar(&g.dsn, "clickhouse", env.ClickHouse, "ClickHouse DSN, native protocol: clickhouse://user:pass@host:9000/db (env "+config.EnvClickHouse+"; default from --config, else local)")
	fs.StringVar(&g.logLevel, "log-level", env.LogLevel, "debug, info, warn or error (env "+config.EnvLogLevel+")")
	fs.Usage = func() { usage(fs) }
	// Global flags go before the command, after it, or both: those before
	// are parsed first, then those after, so the last one given wins.
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	rest := fs.Args()
	if len(rest) == 0 {
		usage(fs)
		return 2
	}
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	after, cmdArgs := splitGlobals(rest[1:], names)
	if err := fs.Parse(after); err != nil {
		return 2
	}
	// An explicitly empty global flag is a mistake (an unset shell
	// variable, say), never a silent "use the default".
	var empty []string
	fs.Visit(func(f *flag.Flag) {
		if f.Value.String() == "" {
			empty = append(empty, "--"+f.Name)
		}
	})
	if len(empty) > 0 {
		fmt.Fprintf(stderr, "gpumeter: %s: empty value (leave the flag out for the default)\n", strings.Join(empty, ", "))
		return 2
	}
	// Precedence: config file, then environment, then flags (the flag
	// defaults above hold the environment).
	cfg, err := config.Load(g.configPath)
	if err != nil {
		fmt.Fprintf(stderr, "gpumeter: %v\n", err)
		return 2
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
		fmt.Fprintf(stderr, "gpumeter: --log-level: %v\n", err)
		return 2
	}
	g.logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	cmd, ok := commands()[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "gpumeter: unknown command %q\n", rest[0])
		usage(fs)
		return 2
	}
	if err := cmd.run(ctx, g, cmdArgs); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			// The command printed its own flags; the shared ones follow.
			fmt.Fprintln(stderr, "\n"+globalFlagsHeading)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "gpumeter %s: %v\n", rest[0], err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

// splitGlobals takes the global flags (names, as -name, --name, either
// with =value or followed by the value) out of a command's arguments,
// wherever they stand, up to a "--" terminator; the rest is left in
// order for the command. A global flag at the end without its value is
// passed on alone, for the flag parser to refuse. A command's own flag
// cannot share a global flag's name, and a command's flag value spelled
// like a global flag must be given as --flag=value.
func splitGlobals(args []string, names map[string]bool) (globals, rest []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return globals, append(rest, args[i:]...)
		}
		name, hasValue := globalFlagName(a)
		if !names[name] {
			rest = append(rest, a)
			continue
		}
		globals = append(globals, a)
		if !hasValue && i+1 < len(args) {
			i++
			globals = append(globals, args[i])
		}
	}
	return globals, rest
}

// globalFlagName returns the name in -name, --name or --name=value, and
// whether the argument holds the value; "" when a is not a flag.
func globalFlagName(a string) (string, bool) {
	if len(a) < 2 || a[0] != '-' {
		return "", false
	}
	a = a[1:]
	if a[0] == '-' {
		a = a[1:]
	}
	if a == "" || a[0] == '-' || a[0] == '=' {
		return "", false
	}
	name, _, hasValue := strings.Cut(a, "=")
	return name, hasValue
}

const globalFlagsHeading = "global flags (before or after the command; given twice, the last one wins):"

// usageError marks bad command-line input (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintln(w, "usage: gpumeter [global flags] <command> [flags] [global flags]")
	fmt.Fprintln(w, "\ncommands:")
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\n"+globalFlagsHeading)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\ngpumeter <command> --help lists the command's flags. Exit status: 0 done,")
	fmt.Fprintln(w, "1 failed while running (ClickHouse down, say), 2 bad flags or input.")
}
