package reports

import (
	"fmt"
	"io"
	"time"

	"github.com/gpumeter/gpumeter/internal/importer"
	"github.com/gpumeter/gpumeter/internal/sacct"
)

// ImportProgress prints an import's progress to w: a line per file and
// phase at most once a second by now, and always when a phase ends.
func ImportProgress(w io.Writer, now func() time.Time) func(importer.Progress) {
	var last time.Time
	return func(p importer.Progress) {
		t := now()
		if t.Sub(last) < time.Second && p.Bytes != p.TotalBytes {
			return
		}
		last = t
		pct := 100.0
		if p.TotalBytes > 0 {
			pct = float64(p.Bytes) * 100 / float64(p.TotalBytes)
		}
		fmt.Fprintf(w, "%s: %s %5.1f%% (%d rows)\n", p.File, p.Phase, pct, p.Rows)
	}
}

// WriteImportResult says what an import (or, dryRun, a validation) of n
// files did in elapsed.
func WriteImportResult(w io.Writer, res importer.Result, n int, dryRun bool, elapsed time.Duration) error {
	if dryRun {
		_, err := fmt.Fprintf(w, "validated %d rows in %d file(s) in %s\n", res.Rows, n, elapsed)
		return err
	}
	_, err := fmt.Fprintf(w, "imported %d rows from %d file(s) in %s: %d stored, %d already stored unchanged, %d replaced, %d repeated in the input\n",
		res.Rows, n, elapsed, res.Stored, res.Unchanged, res.Replaced, res.Repeats)
	return err
}

// SacctFileSummary prints what was read of each sacct file to w.
func SacctFileSummary(w io.Writer) func(sacct.FileSummary) {
	return func(f sacct.FileSummary) {
		fmt.Fprintf(w, "%s: %d jobs: %d with GPUs (%d samples), %d without GPUs, %d not ended or never started; %d step lines skipped\n",
			f.Name, f.Jobs, f.WithGPUs, f.Samples, f.WithoutGPUs, f.Unfinished, f.Steps)
	}
}
