package sacct

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gpumeter/gpumeter/internal/importer"
)

// ParseFile parses the sacct output in the file at path ("-": standard
// input, named stdin in problems). Its problems name the file; another
// failure is returned with the file's name.
func ParseFile(path string, opts Options) ([]Job, error) {
	name, in := path, io.Reader(os.Stdin)
	if path == "-" {
		name = "stdin"
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		defer f.Close()
		in = f
	}
	jobs, err := Parse(in, opts)
	var ve *importer.ValidationError
	switch {
	case errors.As(err, &ve):
		ve.InFile(name)
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return jobs, nil
}

// FileSummary is what ReadFiles made of one file.
type FileSummary struct {
	Name    string // the file, stdin for "-"
	Samples int
	Summary
}

// ReadFiles parses sacct output files ("-": standard input) and turns
// their jobs into importer files of rows (Samples), for an import. Every
// problem of every file is found before it returns: they come as one
// *importer.ValidationError naming file, line and column, which matches
// ErrNoTimeZone when a file's times had no zone. A file that cannot be
// read ends it at once. summary, when not nil, is called for each good
// file.
func ReadFiles(paths []string, opts Options, cfg Config, summary func(FileSummary)) ([]importer.File, error) {
	var (
		files  []importer.File
		all    importer.ValidationError
		noZone bool
	)
	for _, p := range paths {
		name := p
		if p == "-" {
			name = "stdin"
		}
		var ve *importer.ValidationError
		jobs, err := ParseFile(p, opts)
		var rows []importer.Row
		var sum Summary
		if err == nil {
			if rows, sum, err = Samples(jobs, cfg); err != nil && !errors.As(err, &ve) {
				err = fmt.Errorf("%s: %w", name, err)
			}
		}
		noZone = noZone || errors.Is(err, ErrNoTimeZone)
		switch {
		case errors.As(err, &ve):
			ve.InFile(name)
			all.Problems = append(all.Problems, ve.Problems...)
			all.Truncated = all.Truncated || ve.Truncated
		case err != nil:
			return nil, err
		default:
			if summary != nil {
				summary(FileSummary{Name: name, Samples: len(rows), Summary: sum})
			}
			files = append(files, importer.File{Path: name, Format: importer.FormatParsed, Rows: rows})
		}
	}
	switch {
	case len(all.Problems) == 0:
		return files, nil
	case noZone:
		return nil, noZoneError{&all}
	}
	return nil, &all
}
