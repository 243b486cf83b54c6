package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// usageBy sums stored usage (deduplicated) over [from, to) by dims.
func usageBy(t *testing.T, dsn string, from, to time.Time, dims ...usage.Dimension) map[string]uint64 {
	t.Helper()
	ctx := context.Background()
	cfg, err := store.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows, err := s.Usage(ctx, usage.Query{From: from, To: to, GroupBy: dims})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, r := range rows {
		var key []string
		for _, d := range dims {
			switch d {
			case usage.DimSKU:
				key = append(key, r.SKU)
			case usage.DimTenant:
				key = append(key, r.Tenant)
			case usage.DimWorkload:
				key = append(key, r.Workload)
			case usage.DimDepartment:
				key = append(key, r.Department)
			}
		}
		out[strings.Join(key, " ")] += r.GPUMicroseconds
	}
	return out
}

// The 24.05 fixture through the command (internal/sacct's tests derive
// the totals job by job): imported once, the totals by SKU are the jobs'
// allocated GPU-seconds; imported again, nothing is added; imported with
// an account mapped to another tenant, the jobs' devices would be claimed
// twice and the import is refused, nothing stored.
func TestImportFromSacctFixture(t *testing.T) {
	dsn := testDSN(t)
	skus, accounts := harness.TempFile(t, "skus.yaml", harness.SacctSKUMap), harness.TempFile(t, "map", harness.SacctAccounts)
	fixture := filepath.Join("..", "..", "internal", "sacct", "testdata", "slurm-24.05.txt")
	args := []string{"--clickhouse", dsn, "import", "--quiet", "--from-sacct", "--sacct-tz", "UTC", "--sku-map", skus, "--map-file", accounts}
	code, out, stderr := gpumeter(t, append(args, fixture)...)
	if code != 0 || !strings.Contains(out, "222 stored, 0 already stored unchanged") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, stderr)
	}
	if !strings.Contains(stderr, "12 jobs: 8 with GPUs (222 samples), 2 without GPUs, 2 not ended or never started; 4 step lines skipped") {
		t.Errorf("summary: %s", stderr)
	}
	from, to := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	want := map[string]uint64{
		"A100-SXM4-80GB":         20460e6,
		"H100-SXM5-80GB":         752400e6,
		"A100-SXM4-80GB/3g.40gb": 1_542_857_142,
		"A100-SXM4-40GB":         300e6,
	}
	check := func(when string) {
		t.Helper()
		got := usageBy(t, dsn, from, to, usage.DimSKU)
		if len(got) != len(want) {
			t.Errorf("%s: SKUs %v, want %v", when, got, want)
		}
		for sku, w := range want {
			if got[sku] != w {
				t.Errorf("%s: %s = %d µs, want %d", when, sku, got[sku], w)
			}
		}
	}
	check("first import")
	// 4114 runs 2026-11-30T22:00 to 2026-12-02T00:00: November holds 2 h.
	if got := usageBy(t, dsn, from, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), usage.DimWorkload)["slurm/4114"]; got != 8*2*3600e6 {
		t.Errorf("job 4114 in November: %d µs, want 8 GPUs × 2 h", got)
	}
	if got := usageBy(t, dsn, from, to, usage.DimTenant, usage.DimDepartment); got["uni-physics physics-dept"] == 0 || got["geology "] != 600e6*2 {
		t.Errorf("by tenant: %v", got)
	}

	code, out, stderr = gpumeter(t, append(args, fixture)...)
	if code != 0 || !strings.Contains(out, "0 stored, 222 already stored unchanged") {
		t.Fatalf("second import: exit %d\nstdout %s\nstderr %s", code, out, stderr)
	}
	check("second import")

	moved := harness.TempFile(t, "map", "account physics physics-new\naccount chemistry uni-chem chemistry-dept\n")
	args2 := []string{"--clickhouse", dsn, "import", "--quiet", "--from-sacct", "--sacct-tz", "UTC", "--sku-map", skus, "--map-file", moved, fixture}
	code, _, stderr = gpumeter(t, args2...)
	if code != 2 || !strings.Contains(stderr, "slurm-24.05.txt:2: gpu_seconds:") || !strings.Contains(stderr, "nothing was imported") {
		t.Fatalf("import under a remapped account: exit %d, stderr %s", code, stderr)
	}
	check("refused re-import")
}

func TestImportFromSacctRefusesBadInput(t *testing.T) {
	skus := harness.TempFile(t, "skus.yaml", harness.SacctSKUMap)
	good := filepath.Join("..", "..", "internal", "sacct", "testdata", "slurm-24.05.txt")
	const header = "Cluster|JobID|Account|Start|End|Elapsed|AllocTRES\n"
	unpriced := harness.TempFile(t, "unpriced.txt", header+"c|1|a|2026-11-01T00:00:00|2026-11-01T01:00:00|01:00:00|gres/gpu:l40s=1\n")
	malformed := harness.TempFile(t, "malformed.txt", header+"c|1|a|2026-11-01T00:00:00|2026-11-01T01:00:00|01:00:00|gres/gpu=1\nc|2|a|2026-11-01T00:00:00|2026-11-01T01:00:00|1h|gres/gpu=1\n")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no zone for local times", []string{"--from-sacct", "--sku-map", skus, good}, []string{"slurm-24.05.txt:2: Start:", "pass --sacct-tz"}},
		{"problems of every file", []string{"--from-sacct", "--sacct-tz", "UTC", "--sku-map", skus, good, unpriced, malformed},
			[]string{`unpriced.txt:2: AllocTRES: GRES type "l40s" has no SKU`, `malformed.txt:3: Elapsed: "1h" is not a run time`, "nothing was imported"}},
		{"unknown zone", []string{"--from-sacct", "--sacct-tz", "Mars/Olympus", good}, []string{"--sacct-tz"}},
		{"bad sku map", []string{"--from-sacct", "--sacct-tz", "UTC", "--sku-map", harness.TempFile(t, "s.yaml", "gres:\n  a100: a100-sxm4-80gb\n"), good}, []string{"s.yaml:2: gres.a100: write the model as"}},
		{"sacct flags without --from-sacct", []string{"--sacct-tz", "UTC", "x.csv"}, []string{"go with --from-sacct"}},
		{"format with --from-sacct", []string{"--from-sacct", "--format", "csv", good}, []string{"pick one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := gpumeter(t, append([]string{"import", "--dry-run", "--quiet"}, tc.args...)...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr %s", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}
