package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gpumeter/gpumeter/internal/importer"
)

func runImport(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	format := fs.String("format", "", "csv or jsonl (default: from the file name)")
	batch := fs.Int("batch", 50_000, "rows per insert")
	dryRun := fs.Bool("dry-run", false, "validate only; store nothing")
	quiet := fs.Bool("quiet", false, "no progress output")
	replace := fs.Bool("replace", false, "overwrite stored rows that have a row's sample id but other data (default: refuse them)")
	fs.Usage = func() {
		fmt.Fprintln(g.stderr, "usage: gpumeter import [flags] FILE...  (columns: docs/import.md)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() == 0 {
		return usageErrorf("no file given")
	}
	if *batch <= 0 || *batch > 1_000_000 {
		return usageErrorf("--batch %d: want 1..1000000", *batch)
	}
	var files []importer.File
	for _, p := range fs.Args() {
		f := importer.Format(*format)
		if f == "" {
			var err error
			if f, err = importer.FormatFromName(p); err != nil {
				return usageError{err}
			}
		} else if f != importer.FormatCSV && f != importer.FormatJSONL {
			return usageErrorf("--format %q: want csv or jsonl", f)
		}
		if _, err := os.Stat(p); err != nil {
			return usageError{err}
		}
		files = append(files, importer.File{Path: p, Format: f})
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
		opts.Progress = progressPrinter(g.stderr)
	}
	res, err := importer.Import(ctx, files, opts, st)
	if err != nil {
		var ve *importer.ValidationError
		if errors.As(err, &ve) {
			return usageErrorf("%w (nothing was imported)", err)
		}
		return err
	}
	elapsed := time.Since(started).Round(time.Millisecond)
	if *dryRun {
		fmt.Fprintf(g.stdout, "validated %d rows in %d file(s) in %s\n", res.Rows, len(files), elapsed)
		return nil
	}
	fmt.Fprintf(g.stdout, "imported %d rows from %d file(s) in %s: %d stored, %d already stored unchanged, %d replaced, %d repeated in the input\n",
		res.Rows, len(files), elapsed, res.Stored, res.Unchanged, res.Replaced, res.Repeats)
	return nil
}

// progressPrinter shows progress at most once a second.
func progressPrinter(w io.Writer) func(importer.Progress) {
	var last time.Time
	return func(p importer.Progress) {
		if time.Since(last) < time.Second && p.Bytes != p.TotalBytes {
			return
		}
		last = time.Now()
		pct := 100.0
		if p.TotalBytes > 0 {
			pct = float64(p.Bytes) * 100 / float64(p.TotalBytes)
		}
		fmt.Fprintf(w, "%s: %s %5.1f%% (%d rows)\n", p.File, p.Phase, pct, p.Rows)
	}
}
