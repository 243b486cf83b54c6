package reports

import (
	"bytes"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/importer"
)

// At most a line a second, and always the end of a phase.
func TestImportProgress(t *testing.T) {
	at := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	show := ImportProgress(&buf, func() time.Time { return at })
	step := func(d time.Duration, bytes int64) {
		at = at.Add(d)
		show(importer.Progress{File: "a.csv", Phase: "validate", Bytes: bytes, TotalBytes: 400, Rows: int(bytes)})
	}
	step(0, 100)                    // first: shown
	step(500*time.Millisecond, 200) // within the second: not
	step(600*time.Millisecond, 300) // a second after the last shown
	step(100*time.Millisecond, 400) // the end: shown
	want := "a.csv: validate  25.0% (100 rows)\na.csv: validate  75.0% (300 rows)\na.csv: validate 100.0% (400 rows)\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
}
