package main

import (
	"context"
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
	type job struct {
		path   string
		format importer.Format
	}
	var jobs []job
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
		jobs = append(jobs, job{p, f})
	}
	var sink importer.Sink
	if !*dryRun {
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		sink = s
	}
	if len(jobs) > 1 && !*dryRun {
		// All files or none: validate every file before storing any.
		for _, j := range jobs {
			if _, err := importer.ImportFile(ctx, j.path, importer.Options{Format: j.format, DryRun: true}, nil); err != nil {
				return fmt.Errorf("%w (no file was imported)", err)
			}
		}
	}
	for _, j := range jobs {
		started := time.Now()
		opts := importer.Options{Format: j.format, BatchSize: *batch, DryRun: *dryRun}
		if !*quiet {
			opts.Progress = progressPrinter(g.stderr, j.path)
		}
		res, err := importer.ImportFile(ctx, j.path, opts, sink)
		if err != nil {
			return err
		}
		verb := "imported"
		if *dryRun {
			verb = "validated"
		}
		fmt.Fprintf(g.stdout, "%s: %s %d rows in %s\n", j.path, verb, res.Rows, time.Since(started).Round(time.Millisecond))
	}
	return nil
}

// progressPrinter shows progress at most once a second.
func progressPrinter(w io.Writer, name string) func(importer.Progress) {
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
		fmt.Fprintf(w, "%s: %s %5.1f%% (%d rows)\n", name, p.Phase, pct, p.Rows)
	}
}
