package sacct

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/importer"
)

// ReadFiles reports the problems of every file, each naming its file, and
// nothing else; good files alone give importer files and a summary each.
func TestReadFiles(t *testing.T) {
	skus, err := ParseSKUMap(strings.NewReader(skuMapYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{SKUs: skus}
	good := filepath.Join("testdata", "slurm-24.05.txt")
	const header = "Cluster|JobID|Account|Start|End|Elapsed|AllocTRES\n"
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte(header+"c|1|a|2026-11-01T00:00:00|2026-11-01T01:00:00|1h|gres/gpu=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var sums []FileSummary
	files, err := ReadFiles([]string{good}, Options{Location: time.UTC}, cfg, func(s FileSummary) { sums = append(sums, s) })
	if err != nil || len(files) != 1 || files[0].Format != importer.FormatParsed || len(sums) != 1 || sums[0].Samples != len(files[0].Rows) || sums[0].Samples == 0 {
		t.Fatalf("good file: %d files, %+v, %v", len(files), sums, err)
	}

	_, err = ReadFiles([]string{good, bad}, Options{}, cfg, nil)
	var ve *importer.ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, ErrNoTimeZone) || !strings.Contains(err.Error(), "slurm-24.05.txt:2: Start") || !strings.Contains(err.Error(), "bad.txt:2: Elapsed") {
		t.Fatalf("without a zone: %v", err)
	}
	_, err = ReadFiles([]string{bad}, Options{Location: time.UTC}, cfg, nil)
	if !errors.As(err, &ve) || errors.Is(err, ErrNoTimeZone) {
		t.Fatalf("with a zone: %v", err)
	}
	_, err = ReadFiles([]string{filepath.Join(dir, "none.txt")}, Options{}, cfg, nil)
	if err == nil || errors.As(err, &ve) || !strings.Contains(err.Error(), "none.txt") {
		t.Fatalf("a missing file: %v", err)
	}
}
