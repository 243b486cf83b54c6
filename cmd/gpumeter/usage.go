package main

import (
	"cmp"
	"errors"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/reports"
)

func newUsageCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "usage --from TIME [--to TIME] [--by DIMS] [--bucket hour|day|month] [-o FORMAT]",
		Short: "print usage totals by tenant, department, SKU, host or workload",
		Long: `usage sums every meter over a range, from deduplicated raw samples (or the
hourly rollups, --source hourly), grouped by the --by dimensions and, with
--bucket, by hour, day or month. Each row names its groups; host and
workload are in raw samples only. TIME is RFC 3339 or YYYY-MM-DD (00:00 UTC).
-o json (or yaml) prints every meter in its price-book unit as exact decimal
text: the input of gpumeter quote --usage; -o table, wide and csv round each
meter to its places.`,
		Example: "  gpumeter usage --from 2026-11-01 --to 2026-12-01 --by tenant,department\n" +
			"  gpumeter usage --from 2026-11-01 --bucket hour --by sku -o json > usage.json",
		Args: cli.NoArgs,
	}
	fs := cmd.Flags()
	from := cli.Time(fs, "from", "start of the range, RFC 3339 or YYYY-MM-DD (required)")
	to := cli.Time(fs, "to", "end of the range, exclusive (default: now)")
	by := fs.String("by", "tenant", "comma-separated grouping: tenant, department, sku, host, workload (host and workload: raw source only)")
	bucket := fs.String("bucket", "", "time bucket: hour, day or month (default: whole range)")
	tenant := fs.String("tenant", "", "only this tenant")
	department := fs.String("department", "", "only this department")
	source := fs.String("source", "raw", "raw (deduplicated samples) or hourly (rollups)")
	out := cli.AddOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if err := cli.Required("from", *from); err != nil {
			return err
		}
		q := usage.Query{From: *from, To: cmp.Or(*to, time.Now().UTC()), Bucket: usage.Bucket(*bucket), Tenant: *tenant,
			Department: *department, Source: usage.Source(*source)}
		if *by != "" {
			for _, d := range strings.Split(*by, ",") {
				q.GroupBy = append(q.GroupBy, usage.Dimension(strings.TrimSpace(d)))
			}
		}
		if err := q.Validate(); err != nil {
			return cli.Usage(err)
		}
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		rows, err := s.Usage(ctx, q)
		if errors.Is(err, store.ErrTimeOutOfRange) {
			return cli.Usage(err)
		}
		if err != nil {
			return err
		}
		return reports.WriteUsage(g.stdout, out.Format, reports.UsageTableOf(rows, q))
	}
	return cmd
}
