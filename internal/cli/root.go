package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

const rootHelp = `{{.Short}}

Usage: {{.Name}} [global flags] <command> [flags] [global flags]

Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}

Flags (global flags go before or after the command; given twice, the last one wins):
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}

Examples:
{{.Example}}

{{.Long}}
`

// Conventions makes root, with its subcommands added, behave like every
// gpumeter command line: help on stdout, the root's help listing the
// commands with their summaries, errors printed once by Execute, bad flags
// and stray words bad input, a version command and flag, and cobra's help
// and completion commands.
func Conventions(root *cobra.Command, stdout, stderr io.Writer) {
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetOut(stdout) // help, and the completion command's script
	root.SetErr(stderr)
	root.SetFlagErrorFunc(flagError)
	root.SetVersionTemplate(root.Name() + " {{.Version}}\n")
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "Global Flags:",
		"Global Flags (before or after the command; given twice, the last one wins):", 1))
	root.AddCommand(newVersionCmd(root.Name()))
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
}

// Execute runs root on args, prints an error once, and returns the exit
// status.
func Execute(ctx context.Context, root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(append([]string{}, args...)) // never nil: cobra reads os.Args then
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
	}
	return ExitCode(err)
}

// NeedsNoConfig says whether cmd is one that works without a config
// (help, completion, version), so a root's setup can pass it by.
func NeedsNoConfig(cmd *cobra.Command) bool {
	for c := cmd; c.HasParent(); c = c.Parent() {
		switch c.Name() {
		case "help", "completion", "version", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
			return true
		}
	}
	return false
}

func newVersionCmd(name string) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the build's version and VCS commit",
		Long: `version prints the version and VCS commit the binary was built from (set by
the Makefile's build through -ldflags, else what the Go toolchain recorded).`,
		Example: "  " + name + " version\n  " + name + " --version",
		Args:    NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", name, cmd.Root().Version)
			return err
		},
	}
}

// Version is "VERSION (commit COMMIT)" from the -ldflags values, else from
// the build info the Go toolchain recorded (the main module's version,
// vcs.revision).
func Version(version, commit string) string {
	info, _ := debug.ReadBuildInfo()
	return buildVersion(version, commit, info)
}

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
