package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// TestImportRefusesUnstorableTextAndTimesWithExit2: a row whose text is
// not valid UTF-8 or holds a control character, or whose time lies
// outside what every supported server's DateTime holds, is refused by
// `import --dry-run` and by `import` alike: exit 2, the file, line and
// field named, and nothing of the file stored (a good row beside it
// included). Before the fix the text was stored, and a row at
// 2106-02-07T06:28 passed --dry-run and then failed the import with exit 1.
func TestImportRefusesUnstorableTextAndTimesWithExit2(t *testing.T) {
	dir := t.TempDir()
	const header = "host,gpu_uuid,gpu_model,tenant,department,workload,start,end,gpu_seconds\n"
	const good = "h,G0,H100-SXM5-80GB,acme,research,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10\n"
	const at = "2026-11-01T10:00:00Z,2026-11-01T10:00:10Z"
	for _, tc := range []struct {
		name, file, body, want string
	}{
		{"tenant not UTF-8", "t.csv", header + good + "h,G1,H100-SXM5-80GB,ac\xffme,research,j," + at + ",10\n", "t.csv:3: tenant: not valid UTF-8"},
		{"department with a control character", "d.csv", header + good + "h,G1,H100-SXM5-80GB,acme,res\x1b[31mearch,j," + at + ",10\n", "d.csv:3: department: control character"},
		{"workload with a NUL", "w.jsonl", `{"host":"h","gpu_uuid":"G1","gpu_model":"H100-SXM5-80GB","tenant":"acme","workload":"j\u0000","start":"2026-11-01T10:00:00Z","end":"2026-11-01T10:00:10Z","gpu_seconds":10}` + "\n",
			"w.jsonl:1: workload: control character"},
		{"host not UTF-8 in JSON", "h.jsonl", "{\"host\":\"h\xc3\",\"gpu_uuid\":\"G1\",\"gpu_model\":\"H100-SXM5-80GB\",\"tenant\":\"acme\",\"start\":\"2026-11-01T10:00:00Z\",\"end\":\"2026-11-01T10:00:10Z\",\"gpu_seconds\":10}\n",
			"h.jsonl:1: host: not valid UTF-8"},
		{"a row at the end of DateTime", "late.csv", header + good + "h,G1,H100-SXM5-80GB,acme,research,j,2106-02-07T06:28:00Z,2106-02-07T06:28:10Z,10\n", "late.csv:3: start: "},
		{"a row in 2106", "y2106.csv", header + good + "h,G1,H100-SXM5-80GB,acme,research,j,2105-12-31T23:59:55Z,2106-01-01T00:00:05Z,10\n", "y2106.csv:3: end: "},
		{"a row before 1970", "early.csv", header + good + "h,G1,H100-SXM5-80GB,acme,research,j,1969-12-31T23:59:55Z,1970-01-01T00:00:05Z,10\n", "early.csv:3: start: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := testDSN(t)
			path := filepath.Join(dir, tc.file)
			if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"import", "--quiet", "--dry-run", path}, {"import", "--quiet", path}} {
				code, out, stderr := gpumeter(t, append([]string{"--clickhouse", dsn}, args...)...)
				if code != 2 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "nothing was imported") {
					t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 naming %q", strings.Join(args, " "), code, out, stderr, tc.want)
				}
			}
			rows, err := harness.OpenStore(t, dsn).Usage(context.Background(), usage.Query{From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
				To: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), GroupBy: []usage.Dimension{usage.DimTenant}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 0 {
				t.Errorf("stored %+v", rows)
			}
		})
	}
	// The last second every server holds is still taken.
	dsn := testDSN(t)
	path := filepath.Join(dir, "edge.csv")
	if err := os.WriteFile(path, []byte(header+"h,G1,H100-SXM5-80GB,acme,research,j,2105-12-31T23:59:49Z,2105-12-31T23:59:59Z,10\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := gpumeter(t, "--clickhouse", dsn, "import", "--quiet", path); code != 0 || !strings.Contains(out, "imported 1 rows") {
		t.Errorf("a row ending 2105-12-31T23:59:59Z: exit %d %q %q", code, out, stderr)
	}
}
