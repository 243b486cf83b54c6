package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// flowFixture is a migrated, empty database and a config with one UTC
// customer billed 2.50 EUR per H100 GPU-hour.
func flowFixture(t *testing.T) (dsn, cfgPath, dir string) {
	t.Helper()
	dsn = testDSN(t)
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "book.yaml"), []byte(invoiceCLIBook), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath = filepath.Join(dir, "gpumeter.yaml")
	cfg := `billing:
  issuer: {id: gc, name: GPU Cloud GmbH, number_prefix: "GC-"}
  customers:
    - {tenant: alpha, name: Alpha AG, currency: EUR, time_zone: UTC, book: book.yaml}
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dsn, cfgPath, dir
}

// usageCSV writes a CSV of n whole GPU-hours of alpha on one H100, from
// start on, and returns its path.
func usageCSV(t *testing.T, dir, name string, start time.Time, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("host,gpu_uuid,gpu_model,tenant,workload,start,end,gpu_seconds\n")
	for i := range n {
		h := start.Add(time.Duration(i) * time.Hour)
		fmt.Fprintf(&b, "h1,GPU-1,H100-SXM5-80GB,alpha,train,%s,%s,3600\n", h.Format(time.RFC3339), h.Add(time.Hour).Format(time.RFC3339))
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runOK runs the CLI and fails the test unless it exits 0.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	code, out, stderr := gpumeter(t, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d\n%s%s", args, code, out, stderr)
	}
	return out
}

type flowOutcome struct {
	Tenant, Action, Detail, Total string
	ID                            string `json:"invoice_id"`
}

func invoiceRunJSON(t *testing.T, g []string, args ...string) []flowOutcome {
	t.Helper()
	out := runOK(t, append(append(g, "invoice", "run", "--quiet", "--json"), args...)...)
	var rep struct{ Outcomes []flowOutcome }
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("invoice run --json: %v\n%s", err, out)
	}
	if len(rep.Outcomes) != 1 {
		t.Fatalf("outcomes %+v, want alpha's only", rep.Outcomes)
	}
	return rep.Outcomes
}

// Issue 31, defect 1: a past month imported after later hours closed was
// invoiced at 0.00 (its hours were behind the closed mark but not rolled
// up), and its usage then came back as late usage on the next month's
// invoice. The run rolls the month's pending hours up before it prices.
func TestInvoiceRunRollsUpAMonthImportedAfterLaterHoursClosed(t *testing.T) {
	dsn, cfg, dir := flowFixture(t)
	g := []string{"--clickhouse", dsn, "--config", cfg}
	runOK(t, "--clickhouse", dsn, "import", "--quiet", usageCSV(t, dir, "nov.csv", time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC), 4))
	runOK(t, "--clickhouse", dsn, "rollup", "--scheduled")
	runOK(t, "--clickhouse", dsn, "import", "--quiet", usageCSV(t, dir, "sep.csv", time.Date(2026, 9, 10, 0, 0, 0, 0, time.UTC), 10))

	// 10 GPU-hours at 2.50.
	sep := invoiceRunJSON(t, g, "--period", "2026-09")[0]
	if sep.Action != billing.ActionFinalized || sep.Total != "25.00" {
		t.Fatalf("September: %+v, want finalized at 25.00", sep)
	}
	// October had no usage, and September's is not late: it was billed.
	oct := invoiceRunJSON(t, g, "--period", "2026-10")[0]
	if oct.Action != billing.ActionFinalized || oct.Total != "0.00" {
		t.Fatalf("October: %+v, want finalized at 0.00 (September's usage came back as late usage)", oct)
	}
	var doc struct {
		Lines       []struct{ Kind string }
		Corrections []json.RawMessage
	}
	if err := json.Unmarshal([]byte(runOK(t, append(g, "invoice", "show", oct.ID, "--json")...)), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Lines) != 0 || len(doc.Corrections) != 0 {
		t.Errorf("October's invoice has lines %v and corrections %s, want none", doc.Lines, doc.Corrections)
	}
	nov := invoiceRunJSON(t, g, "--period", "2026-11")[0]
	if nov.Action != billing.ActionFinalized || nov.Total != "10.00" {
		t.Fatalf("November: %+v, want finalized at 10.00", nov)
	}
}

// Issue 31, defect 2: `rollup --from --to` over hours past the grace left
// the closed mark at zero, so the month stayed `waiting` for ever. The
// range rollup now closes what it rolled up, and a waiting run names the
// command to run.
func TestRangeRollupMakesAMonthInvoiceable(t *testing.T) {
	dsn, cfg, dir := flowFixture(t)
	g := []string{"--clickhouse", dsn, "--config", cfg}
	runOK(t, "--clickhouse", dsn, "import", "--quiet", usageCSV(t, dir, "sep.csv", time.Date(2026, 9, 10, 0, 0, 0, 0, time.UTC), 10))

	// Nothing rolled up yet: a dry run (which rolls nothing up) waits and
	// says what to run.
	w := invoiceRunJSON(t, g, "--period", "2026-09", "--dry-run")[0]
	if w.Action != billing.ActionWaiting || !strings.Contains(w.Detail, "gpumeter rollup") {
		t.Fatalf("before any rollup: %+v, want waiting, naming gpumeter rollup", w)
	}

	out := runOK(t, "--clickhouse", dsn, "rollup", "--from", "2026-09-01", "--to", "2026-10-01")
	if !strings.Contains(out, "closed through 2026-10-01T00:00:00Z") {
		t.Errorf("rollup output does not say what is closed now:\n%s", out)
	}
	d := invoiceRunJSON(t, g, "--period", "2026-09", "--dry-run")[0]
	if d.Action != billing.ActionCreated || d.Total != "25.00" {
		t.Fatalf("after rollup --from --to: %+v, want the dry run to price 25.00", d)
	}
	f := invoiceRunJSON(t, g, "--period", "2026-09")[0]
	if f.Action != billing.ActionFinalized || f.Total != "25.00" {
		t.Fatalf("September: %+v, want finalized at 25.00", f)
	}
}

// A range that leaves earlier raw hours behind cannot move the mark: the
// rollup says so, and names the command that closes them.
func TestRangeRollupAfterAGapKeepsTheMark(t *testing.T) {
	dsn, _, dir := flowFixture(t)
	runOK(t, "--clickhouse", dsn, "import", "--quiet", usageCSV(t, dir, "sep.csv", time.Date(2026, 9, 10, 0, 0, 0, 0, time.UTC), 2))
	runOK(t, "--clickhouse", dsn, "import", "--quiet", usageCSV(t, dir, "nov.csv", time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC), 2))
	out := runOK(t, "--clickhouse", dsn, "rollup", "--from", "2026-11-01", "--to", "2026-12-01")
	if !strings.Contains(out, "rollup --scheduled") {
		t.Fatalf("a range after unrolled hours: %s, want it to name rollup --scheduled", out)
	}
	st, ok, err := harness.OpenStore(t, dsn).LoadRollupState(context.Background(), rollup.StateKey)
	if err != nil || (ok && !st.ClosedThrough.IsZero()) {
		t.Fatalf("rollup state %+v %v %v: the mark moved past September's unrolled hours", st, ok, err)
	}
}

// Without any rollup, a real run rolls up itself: import → invoice works.
func TestInvoiceRunRollsUpWhenNothingWasRolledUp(t *testing.T) {
	dsn, cfg, dir := flowFixture(t)
	g := []string{"--clickhouse", dsn, "--config", cfg}
	runOK(t, "--clickhouse", dsn, "import", "--quiet", usageCSV(t, dir, "sep.csv", time.Date(2026, 9, 10, 0, 0, 0, 0, time.UTC), 10))
	f := invoiceRunJSON(t, g, "--period", "2026-09")[0]
	if f.Action != billing.ActionFinalized || f.Total != "25.00" {
		t.Fatalf("September: %+v, want finalized at 25.00", f)
	}
}

// Issue 31, defect 9: `retention --dry-run` names exactly the months the
// real run then drops, and drops nothing.
func TestRetentionDryRun(t *testing.T) {
	dsn, cfg, dir := flowFixture(t)
	g := []string{"--clickhouse", dsn, "--config", cfg}
	runOK(t, "--clickhouse", dsn, "import", "--quiet", usageCSV(t, dir, "sep.csv", time.Date(2026, 9, 10, 0, 0, 0, 0, time.UTC), 10))
	runOK(t, "--clickhouse", dsn, "import", "--quiet", usageCSV(t, dir, "nov.csv", time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC), 4))
	runOK(t, "--clickhouse", dsn, "rollup", "--scheduled")
	for _, p := range []string{"2026-09", "2026-10"} {
		invoiceRunJSON(t, g, "--period", p)
	}
	s := harness.OpenStore(t, dsn)
	ctx := context.Background()
	before, err := s.RawMonths(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// September and October are invoiced; November is not, and October
	// has no raw partition.
	out := runOK(t, "--clickhouse", dsn, "retention", "--raw-days", "30", "--dry-run")
	if want := "would drop raw samples of 2026-09 (partition 202609)\n"; out != want+"dry run: nothing dropped\n" {
		t.Fatalf("retention --dry-run:\n%s\nwant:\n%sdry run: nothing dropped", out, want)
	}
	after, err := s.RawMonths(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the dry run dropped partitions: %v, then %v", before, after)
	}
	dropped, err := s.RawDroppedMonths(ctx)
	if err != nil || len(dropped) != 0 {
		t.Fatalf("the dry run recorded dropped months %v (%v)", dropped, err)
	}
	out = runOK(t, "--clickhouse", dsn, "retention", "--raw-days", "30")
	if out != "dropped raw samples of 2026-09\n" {
		t.Fatalf("retention after the dry run:\n%s", out)
	}
}

// A draft made before more of its month was imported is not numbered as
// it is: finalize rolls the new hours up and refuses the stale draft.
func TestInvoiceFinalizeRefusesADraftMissingImportedHours(t *testing.T) {
	dsn, cfg, dir := flowFixture(t)
	g := []string{"--clickhouse", dsn, "--config", cfg}
	runOK(t, "--clickhouse", dsn, "import", "--quiet", usageCSV(t, dir, "sep1.csv", time.Date(2026, 9, 10, 0, 0, 0, 0, time.UTC), 10))
	if d := invoiceRunJSON(t, g, "--period", "2026-09", "--draft")[0]; d.Action != billing.ActionCreated || d.Total != "25.00" {
		t.Fatalf("draft: %+v", d)
	}
	runOK(t, "--clickhouse", dsn, "import", "--quiet", usageCSV(t, dir, "sep2.csv", time.Date(2026, 9, 20, 0, 0, 0, 0, time.UTC), 2))
	code, out, stderr := gpumeter(t, append(g, "invoice", "finalize", "--period", "2026-09")...)
	if code == 0 || !strings.Contains(stderr, "out of date") {
		t.Fatalf("finalize of a stale draft: exit %d\n%s%s", code, out, stderr)
	}
	if d := invoiceRunJSON(t, g, "--period", "2026-09", "--draft")[0]; d.Action != billing.ActionUpdated || d.Total != "30.00" {
		t.Fatalf("refreshed draft: %+v, want 30.00", d)
	}
	runOK(t, append(g, "invoice", "finalize", "--period", "2026-09")...)
}
