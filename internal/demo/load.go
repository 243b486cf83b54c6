package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gpumeter/gpumeter/internal/importer"
	"github.com/gpumeter/gpumeter/internal/usage"
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

// View is one summary `gpumeter demo` prints after the import.
type View struct {
	Title string
	Query usage.Query
}

// Views are the data set's days by tenant, department and SKU.
func Views() []View {
	from, to := Start, Start.Add(Days*24*time.Hour)
	view := func(title string, by ...usage.Dimension) View {
		return View{title, usage.Query{From: from, To: to, GroupBy: by}}
	}
	return []View{
		view("Usage by tenant (idle = capacity nobody held)", usage.DimTenant, usage.DimDepartment),
		view("Usage by department", usage.DimDepartment),
		view("Usage by SKU (MIG instances in GPU-equivalents)", usage.DimSKU),
	}
}
