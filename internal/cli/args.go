package cli

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// NoArgs refuses positional arguments.
func NoArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return Usagef("unexpected argument %q", args[0])
	}
	return nil
}

// OneArg wants exactly one positional argument, what.
func OneArg(what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return Usagef("want one %s, got %d", what, len(args))
		}
		return nil
	}
}

// SubcommandArgs refuses a word that names no subcommand.
func SubcommandArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return Usagef("unknown %s %q: want %s", commandWord(c), args[0], subcommandNames(c))
}

// WantSubcommand is the run of a command that only holds subcommands.
func WantSubcommand(c *cobra.Command, _ []string) error {
	return Usagef("want a %s: %s (see %s --help)", commandWord(c), subcommandNames(c), c.CommandPath())
}

// Group makes a command that only holds subs: a word after it that names
// none of them, or none at all, is bad input.
func Group(c *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	c.Args, c.RunE = SubcommandArgs, WantSubcommand
	c.AddCommand(subs...)
	return c
}

func commandWord(c *cobra.Command) string {
	if !c.HasParent() {
		return "command"
	}
	return "subcommand"
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

// flagError makes a flag the command line got wrong bad input, and names
// a word before it that is not a subcommand as such.
func flagError(c *cobra.Command, err error) error {
	if pos := c.Flags().Args(); c.HasSubCommands() && len(pos) > 0 {
		return SubcommandArgs(c, pos)
	}
	var ne *pflag.NotExistError
	if errors.As(err, &ne) && ne.GetSpecifiedShortnames() != "" {
		name, _, _ := strings.Cut(ne.GetSpecifiedShortnames(), "=")
		if c.Flags().Lookup(name) != nil {
			return Usagef("-%s: long flags take two dashes: --%s", name, name)
		}
	}
	return Usagef("%w (see %s --help)", err, c.CommandPath())
}

// asInputErrors makes every refusal of positional arguments bad input,
// cobra's own commands' (help, completion) included.
func asInputErrors(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(c *cobra.Command, args []string) error {
			err := check(c, args)
			if ue := (UsageError{}); err != nil && !errors.As(err, &ue) {
				return UsageError{err}
			}
			return err
		}
	}
	for _, sub := range c.Commands() {
		asInputErrors(sub)
	}
}

// ConfigDefault gives a flag that was not given the config's value: flags
// are defined before the config is loaded.
func ConfigDefault[T any](fs *pflag.FlagSet, name string, p *T, v T) {
	if !fs.Changed(name) {
		*p = v
	}
}

// AnyChanged says whether any of the named flags was given.
func AnyChanged(fs *pflag.FlagSet, names ...string) bool {
	for _, name := range names {
		if fs.Changed(name) {
			return true
		}
	}
	return false
}

// RefuseEmpty refuses the named flags given with an empty value: an unset
// shell variable, say, never a silent "use the default".
func RefuseEmpty(fs *pflag.FlagSet, names ...string) error {
	var empty []string
	for _, name := range names {
		if f := fs.Lookup(name); f != nil && f.Changed && f.Value.String() == "" {
			empty = append(empty, "--"+name)
		}
	}
	if len(empty) > 0 {
		return Usagef("%s: empty value (leave the flag out for the default)", strings.Join(empty, ", "))
	}
	return nil
}
