package reports

import (
	"fmt"
	"io"
	"time"

	"github.com/gpumeter/gpumeter/internal/importer"
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
