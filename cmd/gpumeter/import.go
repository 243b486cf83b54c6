package main

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/importer"
	"github.com/gpumeter/gpumeter/internal/sacct"
	"github.com/gpumeter/gpumeter/reports"
)

func newImportCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import [flags] FILE...",
		Short: "import usage samples from CSV or JSON Lines",
		Long: `import stores usage samples from CSV or JSON Lines files (columns:
docs/import.md). Every file is checked first (ids, physical limits, GPU and
MIG capacity, with what is stored too) and nothing is stored unless all of
them are good; importing the same rows again changes nothing, and --replace
corrects stored rows. --from-sacct backfills Slurm jobs' allocated GPUs from
sacct --parsable2 output instead (docs/slurm.md).`,
		Example: "  gpumeter import usage-2026-11.csv\n" +
			"  gpumeter import --dry-run samples.jsonl\n" +
			"  gpumeter import --from-sacct --sku-map skus.yaml --map-file /etc/gpumeter/map november.sacct",
	}
	fs := cmd.Flags()
	format := fs.String("format", "", "csv or jsonl (default: from the file name)")
	batch := fs.Int("batch", 50_000, "rows per insert")
	dryRun := fs.Bool("dry-run", false, "validate only; store nothing")
	quiet := fs.Bool("quiet", false, "no progress output")
	replace := fs.Bool("replace", false, "overwrite stored rows that have a row's sample id but other data (default: refuse them)")
	var sf sacctFlags
	fs.BoolVar(&sf.on, "from-sacct", false, "the files are sacct --parsable2 output (- reads stdin): jobs' allocated GPUs become hourly samples (docs/slurm.md)")
	sf.tz = cli.Zone(fs, "sacct-tz", "with --from-sacct: the time zone sacct printed its times in (e.g. UTC, Europe/Berlin, Local); needed unless the times carry offsets")
	fs.StringVar(&sf.skuMap, "sku-map", "", "with --from-sacct: YAML file mapping GRES types to SKUs (gres: {a100: A100-SXM4-80GB}, untyped: SKU)")
	fs.StringVar(&sf.mapFile, "map-file", "", "with --from-sacct: the collector's map file; its account lines map Slurm accounts to tenants and departments")
	fs.BoolVar(&sf.accountIsTenant, "account-is-tenant", true, "with --from-sacct: an unmapped Slurm account is its own tenant")
	fs.StringVar(&sf.cluster, "cluster", "", "with --from-sacct: the cluster's name, for output without a Cluster column")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if len(args) == 0 {
			return cli.Usagef("no file given")
		}
		if *batch <= 0 || *batch > 1_000_000 {
			return cli.Usagef("--batch %d: want 1..1000000", *batch)
		}
		var files []importer.File
		switch {
		case sf.on && *format != "":
			return cli.Usagef("--format and --from-sacct: pick one")
		case sf.on:
			var err error
			if files, err = sacctFiles(g, sf, args); err != nil {
				return err
			}
		case cli.AnyChanged(fs, "sacct-tz", "sku-map", "map-file", "account-is-tenant", "cluster"):
			return cli.Usagef("--sacct-tz, --sku-map, --map-file, --account-is-tenant and --cluster go with --from-sacct")
		case *format != "" && *format != string(importer.FormatCSV) && *format != string(importer.FormatJSONL):
			return cli.Usagef("--format %q: want csv or jsonl", *format)
		default:
			var err error
			if files, err = importer.Files(importer.Format(*format), args); err != nil {
				return cli.Usage(err)
			}
		}
		// A dry run checks the files on their own; an import also checks them
		// against what is stored, before it stores anything.
		var st importer.Store
		if !*dryRun {
			s, err := openStore(ctx, g)
			if err != nil {
				return err
			}
			defer s.Close()
			st = s
		}
		started := time.Now()
		opts := importer.Options{BatchSize: *batch, DryRun: *dryRun, Replace: *replace}
		if !*quiet {
			opts.Progress = reports.ImportProgress(g.stderr, time.Now)
		}
		res, err := importer.Import(ctx, files, opts, st)
		if err != nil {
			var ve *importer.ValidationError
			if errors.As(err, &ve) {
				return cli.Usagef("%w (nothing was imported)", err)
			}
			return err
		}
		return reports.WriteImportResult(g.stdout, res, len(files), *dryRun, time.Since(started).Round(time.Millisecond))
	}
	return cmd
}

type sacctFlags struct {
	on                       bool
	tz                       **time.Location
	skuMap, mapFile, cluster string
	accountIsTenant          bool
}

// sacctFiles reads sacct output files ("-": stdin) and turns their jobs
// into importer files of parsed rows; every problem of every file is
// reported before anything is imported.
func sacctFiles(g *globals, sf sacctFlags, paths []string) ([]importer.File, error) {
	cfg, err := sacct.LoadConfig(sf.skuMap, sf.mapFile, sf.accountIsTenant)
	if err != nil {
		return nil, cli.Usage(err)
	}
	opts := sacct.Options{Cluster: sf.cluster, Location: *sf.tz}
	files, err := sacct.ReadFiles(paths, opts, cfg, reports.SacctFileSummary(g.stderr))
	var ve *importer.ValidationError
	switch {
	case errors.As(err, &ve) && errors.Is(err, sacct.ErrNoTimeZone):
		return nil, cli.Usagef("%w (nothing was imported; pass --sacct-tz with the zone sacct printed its times in)", err)
	case errors.As(err, &ve):
		return nil, cli.Usagef("%w (nothing was imported)", err)
	case err != nil:
		return nil, cli.Usage(err)
	}
	return files, nil
}
