package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/gpumeter/gpumeter/reports"
)

// byDimension is, for every dimension usage --by accepts, the table
// column that shows it and the JSON field that carries it.
var byDimension = []struct {
	dim    usage.Dimension
	column string
	field  func(pricing.UsageRecord) string
}{
	{usage.DimTenant, "TENANT", func(r pricing.UsageRecord) string { return r.Tenant }},
	{usage.DimDepartment, "DEPARTMENT", func(r pricing.UsageRecord) string { return r.Department }},
	{usage.DimSKU, "SKU", func(r pricing.UsageRecord) string { return r.SKU }},
	{usage.DimHost, "HOST", func(r pricing.UsageRecord) string { return r.Host }},
	{usage.DimWorkload, "WORKLOAD", func(r pricing.UsageRecord) string { return r.Workload }},
}

// Every grouping a query accepts names its groups in the table and in
// the JSON rows; no row is anonymous.
func TestUsageTableAndRecordsNameEveryDimension(t *testing.T) {
	row := usage.Row{Tenant: "acme", Department: "research", SKU: "H100-SXM5-80GB", Host: "node-a", Workload: "train-1",
		Samples: 1, Totals: meter.Totals{Values: meter.Values{GPUMicroseconds: 3_600_000_000}}}
	for _, d := range byDimension {
		t.Run(string(d.dim), func(t *testing.T) {
			q := usage.Query{From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC),
				GroupBy: []usage.Dimension{d.dim}}
			if err := q.Validate(); err != nil {
				t.Fatalf("the query is refused: %v", err)
			}
			// The store fills only the grouped column.
			r := usage.Row{Samples: row.Samples, Totals: row.Totals}
			want := map[usage.Dimension]string{usage.DimTenant: row.Tenant, usage.DimDepartment: row.Department,
				usage.DimSKU: row.SKU, usage.DimHost: row.Host, usage.DimWorkload: row.Workload}[d.dim]
			switch d.dim {
			case usage.DimTenant:
				r.Tenant = want
			case usage.DimDepartment:
				r.Department = want
			case usage.DimSKU:
				r.SKU = want
			case usage.DimHost:
				r.Host = want
			case usage.DimWorkload:
				r.Workload = want
			}
			var buf bytes.Buffer
			if err := reports.WriteUsageTable(&buf, reports.UsageTableOf([]usage.Row{r}, q)); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(buf.String(), "\n")
			if !strings.Contains(lines[0], d.column) || !strings.Contains(lines[1], want) {
				t.Errorf("table lacks the %s column or %q:\n%s", d.column, want, buf.String())
			}
			if got := d.field(reports.UsageRecords([]usage.Row{r})[0]); got != want {
				t.Errorf("JSON record %s = %q, want %q", d.dim, got, want)
			}
		})
	}
}

// usage --by each dimension over real samples: the table has the column
// and each group's name, the JSON each row's field; quote reads usage
// --json by host and prices it as it prices the same usage by SKU alone.
func TestUsageByEveryDimension(t *testing.T) {
	dsn := testDSN(t)
	csv := filepath.Join(t.TempDir(), "usage.csv")
	// acme's job runs on both hosts, so rows by SKU and host split one
	// hour and SKU in two, which quote must add up again.
	os.WriteFile(csv, []byte("host,gpu_uuid,gpu_model,mig_uuid,mig_profile,sku,tenant,department,workload,start,end,gpu_seconds\n"+
		"node-a,GA,H100-SXM5-80GB,,,H100-SXM5-80GB,acme,research,train-1,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10\n"+
		"node-a,GA,H100-SXM5-80GB,,,H100-SXM5-80GB,acme,research,train-1,2026-11-01T10:00:10Z,2026-11-01T10:00:20Z,10\n"+
		"node-b,GC,H100-SXM5-80GB,,,H100-SXM5-80GB,acme,research,train-1,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10\n"+
		"node-b,GB,H100-SXM5-80GB,MIG-1,3g.40gb,H100-SXM5-80GB/3g.40gb,beta,ops,infer-7,2026-11-01T10:00:00Z,2026-11-01T10:00:14Z,6\n"), 0o600)
	if code, out, stderr := gpumeter(t, "--clickhouse", dsn, "import", "--quiet", csv); code != 0 {
		t.Fatalf("import: %d %s %s", code, out, stderr)
	}
	runUsage := func(t *testing.T, args ...string) string {
		t.Helper()
		code, out, stderr := gpumeter(t, append([]string{"--clickhouse", dsn, "usage", "--from", "2026-11-01", "--to", "2026-11-02"}, args...)...)
		if code != 0 {
			t.Fatalf("usage %v: exit %d: %s", args, code, stderr)
		}
		return out
	}
	groups := map[usage.Dimension][]string{
		usage.DimTenant:     {"acme", "beta"},
		usage.DimDepartment: {"ops", "research"},
		usage.DimSKU:        {"H100-SXM5-80GB", "H100-SXM5-80GB/3g.40gb"},
		usage.DimHost:       {"node-a", "node-b"},
		usage.DimWorkload:   {"infer-7", "train-1"},
	}
	for _, d := range byDimension {
		t.Run(string(d.dim), func(t *testing.T) {
			table := runUsage(t, "--by", string(d.dim))
			lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
			if len(lines) != 4 || !strings.Contains(lines[0], d.column) {
				t.Fatalf("want a header with %s, two rows and a total:\n%s", d.column, table)
			}
			var recs []pricing.UsageRecord
			if err := json.Unmarshal([]byte(runUsage(t, "--by", string(d.dim), "--json")), &recs); err != nil {
				t.Fatal(err)
			}
			if len(recs) != 2 {
				t.Fatalf("want 2 JSON rows, got %+v", recs)
			}
			for i, name := range groups[d.dim] {
				if got := d.field(recs[i]); got != name {
					t.Errorf("JSON row %d: %s %q, want %q", i, d.dim, got, name)
				}
				if !strings.Contains(lines[1+i], name) {
					t.Errorf("table row %d lacks %q:\n%s", i, name, table)
				}
			}
		})
	}

	dir := t.TempDir()
	quote := func(t *testing.T, by string) string {
		t.Helper()
		f := filepath.Join(dir, strings.ReplaceAll(by, ",", "-")+".json")
		os.WriteFile(f, []byte(runUsage(t, "--json", "--bucket", "hour", "--by", by)), 0o600)
		code, out, stderr := runCLI("--book", exampleBook, "--usage", f, "--json")
		if code != 0 {
			t.Fatalf("quote --usage (usage --by %s): exit %d: %s", by, code, stderr)
		}
		var r quoteJSON
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r.Total
	}
	if bySKU, byHost := quote(t, "sku"), quote(t, "sku,host,workload"); bySKU != byHost || bySKU == "" {
		t.Errorf("quote of usage by sku %s, by sku, host and workload %s: want the same", bySKU, byHost)
	}
}
