package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpumeter/gpumeter/internal/importer"
)

// Import stores the bundled data set through st, checked by the importer
// first; importing it again changes no total.
func Import(ctx context.Context, st importer.Store) (importer.Result, error) {
	// The importer reads a file twice (validate, then store).
	dir, err := os.MkdirTemp("", "gpumeter-demo-")
	if err != nil {
		return importer.Result{}, fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "usage.csv")
	if err := os.WriteFile(path, UsageCSV, 0o600); err != nil {
		return importer.Result{}, fmt.Errorf("demo: %w", err)
	}
	return importer.ImportFile(ctx, path, importer.Options{Format: importer.FormatCSV}, st)
}
