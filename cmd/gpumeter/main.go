// Command gpumeter meters shared GPU fleets: one binary with subcommands.
// This package holds flag parsing and wiring only.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"unicode"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpumeter/gpumeter/cmd/gpumeter/config"
	"github.com/gpumeter/gpumeter/internal/fault"
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
	root := newRootCmd(g)
	root.SetArgs(append([]string{}, args...)) // never nil: cobra reads os.Args then
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
	}
	return exitCode(err)
}

// exitCode is the exit status an error makes, for every command: 0 none;
// 2 bad input (unknown command or flag, malformed or missing values,
// input that does not validate), found before anything changed; 1 a
// failure while running.
// exitCode is the one place errors become exit statuses: 2 when the
// request was refused (a usageError from the command line, or a domain
// error in any fault category: validation, not found, conflict,
// precondition), 1 when it failed while running (ClickHouse down, say).
func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue), fault.IsRefusal(err):
		return 2
	}
	return 1
}

// usageError marks bad command-line input (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// flagNamed is err, a domain config's refusal, with the field names in its
// message written as the flags that set them (names: field → flag), for a
// reader of the command line. It stays what err is (errors.Is, the fault
// category).
func flagNamed(err error, names map[string]string) error {
	msg := []rune(err.Error())
	var b strings.Builder
	for i := 0; i < len(msg); {
		j := i
		for j < len(msg) && (unicode.IsLower(msg[j]) || unicode.IsDigit(msg[j]) || msg[j] == '_' || msg[j] == '.') {
			j++
		}
		if j == i {
			b.WriteRune(msg[i])
			i++
			continue
		}
		word := strings.TrimRight(string(msg[i:j]), ".")
		if flag, ok := names[word]; ok && (i == 0 || msg[i-1] != '-') {
			b.WriteString(flag + string(msg[i+len([]rune(word)):j]))
		} else {
			b.WriteString(string(msg[i:j]))
		}
		i = j
	}
	return renamed{b.String(), err}
}

type renamed struct {
	msg string
	err error
}

func (r renamed) Error() string { return r.msg }
func (r renamed) Unwrap() error { return r.err }

const rootHelp = `{{.Short}}

Usage: gpumeter [global flags] <command> [flags] [global flags]

Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}

Flags (--config, --clickhouse and --log-level go before or after the command;
given twice, the last one wins):
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}

Examples:
{{.Example}}

{{.Long}}
`

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
		Version: buildVersion(version, commit, buildInfo()),
		Args:    subcommandArgs,
		RunE:    wantSubcommand,
		// run prints errors, once, in its own form.
		SilenceErrors:     true,
		SilenceUsage:      true,
		PersistentPreRunE: g.setup,
	}
	addGlobalFlags(root.PersistentFlags(), g)
	root.SetOut(g.stdout) // help, and the completion command's script
	root.SetErr(g.stderr)
	root.SetFlagErrorFunc(flagError)
	root.SetVersionTemplate("gpumeter {{.Version}}\n")
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "Global Flags:",
		"Global Flags (before or after the command; given twice, the last one wins):", 1))
	root.AddCommand(newMigrateCmd(g), newImportCmd(g), newUsageCmd(g), newDemoCmd(g), newServeCmd(g),
		newRollupCmd(g), newRetentionCmd(g), newQuoteCmd(g), newInvoiceCmd(g), newChargebackCmd(g),
		newKeysCmd(g), newWebhooksCmd(g), newMIGCmd(g, gonvml.New), newInsightsCmd(g), newSlurmCmd(g),
		newCollectCmd(g, collectDeps{newNVML: func() gonvml.Interface { return gonvml.New() }}), newVersionCmd())
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	// cobra's own two, in the style of the others' summaries.
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Short = "help about any command"
		case "completion":
			c.Short = "print the shell completion script (bash, zsh, fish, powershell)"
		}
	}
	// The root's help lists the commands first; the others keep cobra's.
	def := root.HelpTemplate()
	root.SetHelpTemplate(rootHelp)
	for _, c := range root.Commands() {
		c.SetHelpTemplate(def)
	}
	asInputErrors(root)
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
	for c := cmd; c.HasParent(); c = c.Parent() {
		switch c.Name() {
		case "help", "completion", "version", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
			return nil // they need no config, and work without one
		}
	}
	// An explicitly empty global flag is a mistake (an unset shell
	// variable, say), never a silent "use the default".
	var empty []string
	for _, name := range []string{"config", "clickhouse", "log-level"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed && f.Value.String() == "" {
			empty = append(empty, "--"+name)
		}
	}
	if len(empty) > 0 {
		return usageErrorf("%s: empty value (leave the flag out for the default)", strings.Join(empty, ", "))
	}
	cfg, err := config.Load(g.configPath)
	if err != nil {
		return usageError{err}
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
		return usageErrorf("--log-level: %v", err)
	}
	g.logger = slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
	return nil
}

// flagError makes a flag the command line got wrong bad input, and names
// a word before it that is not a subcommand as such.
func flagError(c *cobra.Command, err error) error {
	if pos := c.Flags().Args(); c.HasSubCommands() && len(pos) > 0 {
		return subcommandArgs(c, pos)
	}
	var ne *pflag.NotExistError
	if errors.As(err, &ne) && ne.GetSpecifiedShortnames() != "" {
		name, _, _ := strings.Cut(ne.GetSpecifiedShortnames(), "=")
		if c.Flags().Lookup(name) != nil {
			return usageErrorf("-%s: long flags take two dashes: --%s", name, name)
		}
	}
	return usageErrorf("%w (see %s --help)", err, c.CommandPath())
}

// asInputErrors makes every refusal of positional arguments bad input,
// cobra's own commands' (help, completion) included.
func asInputErrors(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(c *cobra.Command, args []string) error {
			err := check(c, args)
			if ue := (usageError{}); err != nil && !errors.As(err, &ue) {
				return usageError{err}
			}
			return err
		}
	}
	for _, sub := range c.Commands() {
		asInputErrors(sub)
	}
}

// subcommandArgs refuses a word that names no subcommand.
func subcommandArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	what := "subcommand"
	if !c.HasParent() {
		what = "command"
	}
	return usageErrorf("unknown %s %q: want %s", what, args[0], subcommandNames(c))
}

// wantSubcommand is the run of a command that only holds subcommands.
func wantSubcommand(c *cobra.Command, _ []string) error {
	what := "subcommand"
	if !c.HasParent() {
		what = "command"
	}
	return usageErrorf("want a %s: %s (see %s --help)", what, subcommandNames(c), c.CommandPath())
}

func subcommandNames(c *cobra.Command) string {
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return strings.Join(names, ", ")
}

// noArgs refuses positional arguments.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unexpected argument %q", args[0])
	}
	return nil
}

// oneArg wants exactly one positional argument, what.
func oneArg(what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageErrorf("want one %s, got %d", what, len(args))
		}
		return nil
	}
}

// configDefault gives a flag that was not given the config's value: flags
// are defined before the config is loaded.
func configDefault[T any](fs *pflag.FlagSet, name string, p *T, v T) {
	if !fs.Changed(name) {
		*p = v
	}
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the build's version and VCS commit",
		Long: `version prints the version and VCS commit the binary was built from (set by
the Makefile's build through -ldflags, else what the Go toolchain recorded).`,
		Example: "  gpumeter version\n  gpumeter --version",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "gpumeter %s\n", cmd.Root().Version)
			return err
		},
	}
}

func buildInfo() *debug.BuildInfo {
	info, _ := debug.ReadBuildInfo()
	return info
}

// buildVersion is "VERSION (commit COMMIT)" from the -ldflags values,
// else from the build info (the main module's version, vcs.revision).
func buildVersion(version, commit string, info *debug.BuildInfo) string {
	if info != nil {
		version = cmp.Or(version, info.Main.Version)
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				commit = cmp.Or(commit, s.Value)
			}
		}
	}
	return fmt.Sprintf("%s (commit %s)", cmp.Or(version, "(devel)"), cmp.Or(commit, "unknown"))
}
