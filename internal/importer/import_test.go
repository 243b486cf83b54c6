package importer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/importer"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

func writeCSV(t *testing.T, rows int, badLine int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("host,gpu_uuid,gpu_model,tenant,department,workload,start,end,gpu_seconds,energy_joules\n")
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < rows; i++ {
		st := start.Add(time.Duration(i/4) * 10 * time.Second)
		tenant := []string{"acme", "globex"}[i%2]
		energy := "350.5"
		if i+2 == badLine {
			energy = "-1"
		}
		fmt.Fprintf(&b, "h1,GPU-%d,H100-SXM5-80GB,%s,d-%s,job,%s,%s,10,%s\n", i%4, tenant, tenant,
			st.Format(time.RFC3339), st.Add(10*time.Second).Format(time.RFC3339), energy)
	}
	return file(t, "usage.csv", b.String())
}

func totals(t *testing.T, s *store.Store) map[string]usage.Row {
	t.Helper()
	rows, err := s.Usage(context.Background(), usage.Query{
		From: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		GroupBy: []usage.Dimension{usage.DimTenant}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]usage.Row{}
	for _, r := range rows {
		out[r.Tenant] = r
	}
	return out
}

// wantRefusedStoringNothing checks that an import failed with an error
// saying want and left s without usage.
func wantRefusedStoringNothing(t *testing.T, s *store.Store, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v, want it to say %q", err, want)
	}
	if got := totals(t, s); len(got) != 0 {
		t.Fatalf("a refused import stored %+v", got)
	}
}

func TestImportTwiceKeepsTotals(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	path := writeCSV(t, 10_000, 0)
	var progress []importer.Progress
	opts := importer.Options{Format: importer.FormatCSV, BatchSize: 3_000, Progress: func(p importer.Progress) { progress = append(progress, p) }}
	for i := 0; i < 2; i++ {
		res, err := importer.ImportFile(ctx, path, opts, s)
		if err != nil {
			t.Fatalf("import %d: %v", i, err)
		}
		// The second import finds every row stored unchanged: nothing to send.
		want := importer.Result{Rows: 10_000, Stored: 10_000, Batches: 4}
		if i == 1 {
			want = importer.Result{Rows: 10_000, Unchanged: 10_000}
		}
		if res != want {
			t.Fatalf("import %d: %+v, want %+v", i, res, want)
		}
	}
	got := totals(t, s)
	for _, tenant := range []string{"acme", "globex"} {
		r := got[tenant]
		if r.Samples != 5_000 || r.GPUMicroseconds != 5_000*10_000_000 || r.EnergyMillijoules != 5_000*350_500 {
			t.Errorf("%s after two imports: %+v", tenant, r)
		}
	}
	last := progress[len(progress)-1]
	if last.Phase != "store" || last.Rows != 10_000 || last.Bytes != last.TotalBytes {
		t.Errorf("last progress = %+v", last)
	}
}

func TestImportWithBadRowStoresNothing(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	// The bad row comes after more than one batch's worth of good rows.
	path := writeCSV(t, 5_000, 4_321)
	_, err := importer.ImportFile(ctx, path, importer.Options{Format: importer.FormatCSV, BatchSize: 1_000}, s)
	wantRefusedStoringNothing(t, s, err, "usage.csv:4321: energy_joules")
}

func TestImportRefusesRowsThatWouldCollapseIntoOne(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	// No workload column: two jobs of one tenant on one GPU in one interval
	// would get the same derived id. A verbatim repeat is a replay: fine.
	path := file(t, "jobs.csv", "host,gpu_uuid,gpu_model,tenant,start,end,gpu_seconds\n"+
		"h,G,H100-SXM5-80GB,acme,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10\n"+
		"h,G,H100-SXM5-80GB,acme,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10\n"+
		"h,G,H100-SXM5-80GB,acme,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,5\n")
	_, err := importer.ImportFile(ctx, path, importer.Options{Format: importer.FormatCSV}, s)
	// Line 4 is named as colliding with line 2.
	wantRefusedStoringNothing(t, s, err, "jobs.csv:4: sample_id: same id as "+path+":2")
}

// Rows another parser made (internal/sacct) go through the same checks as
// a file's and store idempotently.
func TestImportParsedRows(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	start := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	row := func(line int, gpu string, seconds int) importer.Row {
		return importer.Row{Line: line, Sample: collectors.Sample{Host: "hpc1", GPUUUID: gpu, GPUModel: "H100-SXM5-80GB",
			Tenant: "uni", Workload: "slurm/1", Start: start, End: start.Add(time.Hour),
			Values: meter.Values{GPUMicroseconds: uint64(seconds) * 1e6}}}
	}
	bad := importer.File{Path: "jobs.sacct", Format: importer.FormatParsed, Rows: []importer.Row{row(2, "SLURM-hpc1-1-0", 3600), row(3, "SLURM-hpc1-1-1", 3601)}}
	_, err := importer.Import(ctx, []importer.File{bad}, importer.Options{}, s)
	wantRefusedStoringNothing(t, s, err, "jobs.sacct:3: gpu_seconds: more than the interval")
	good := importer.File{Path: "jobs.sacct", Format: importer.FormatParsed, Rows: []importer.Row{row(2, "SLURM-hpc1-1-0", 3600), row(3, "SLURM-hpc1-1-1", 1800)}}
	for i, want := range []importer.Result{{Rows: 2, Stored: 2, Batches: 1}, {Rows: 2, Unchanged: 2}} {
		res, err := importer.Import(ctx, []importer.File{good}, importer.Options{}, s)
		if err != nil {
			t.Fatal(err)
		}
		if res != want {
			t.Fatalf("import %d: %+v, want %+v", i+1, res, want)
		}
	}
	if got := totals(t, s)["uni"].GPUMicroseconds; got != 5400*1e6 {
		t.Fatalf("stored %d GPU-µs, want 5400 s", got)
	}
}
