package cli

import (
	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/reports/output"
)

// OutputFlag is -o/--output of a listing command, with --json kept as a
// hidden alias of -o json. Its Format is read before the command runs: a
// bad name is a validation error (exit 2), found before anything is done.
type OutputFlag struct {
	name   string
	asJSON bool
	Format output.Format
}

// AddOutputFlag defines -o (and the hidden --json) on cmd.
func AddOutputFlag(cmd *cobra.Command) *OutputFlag {
	o := &OutputFlag{}
	fs := cmd.Flags()
	fs.StringVarP(&o.name, "output", "o", string(output.Table), "output format: table, wide, json, yaml or csv")
	fs.BoolVar(&o.asJSON, "json", false, "same as -o json")
	_ = fs.MarkHidden("json") // the flag exists: no error
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		f, err := output.Parse(o.name)
		if err != nil {
			return err
		}
		if o.asJSON {
			if cmd.Flags().Changed("output") && f != output.JSON {
				return Usagef("--json and -o %s: give one", f)
			}
			f = output.JSON
		}
		o.Format = f
		return nil
	}
	return o
}
