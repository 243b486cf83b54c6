package demo

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpumeter/gpumeter/internal/importer"
)

var update = flag.Bool("update", false, "rewrite usage.csv from Generate")

func TestBundledDataIsGenerated(t *testing.T) {
	var b bytes.Buffer
	if err := Generate(&b); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("usage.csv", b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(b.Bytes(), UsageCSV) {
		t.Fatal("usage.csv differs from Generate(); run go test ./internal/demo -update and review the diff")
	}
}

// The bundled data set passes every check of an import (capacity per GPU
// and MIG instance included), and reads back as it was written.
func TestUsageCSVPassesTheImportChecks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "usage.csv")
	if err := os.WriteFile(path, UsageCSV, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := importer.Import(context.Background(), []importer.File{{Path: path, Format: importer.FormatCSV}}, importer.Options{DryRun: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != bytes.Count(UsageCSV, []byte("\n"))-1 || res.Repeats != 0 {
		t.Fatalf("%+v", res)
	}
}
