package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// What the collectors measured for some of the 24.05 fixture's jobs,
// beside the same fixture imported with --from-sacct (whose allocation
// rows the comparison must leave out): `slurm compare` finds each kind of
// difference, and the allocated hours are sreport's count.
func TestSlurmCompare(t *testing.T) {
	dsn := testDSN(t)
	fixture := filepath.Join("..", "..", "internal", "sacct", "testdata", "slurm-24.05.txt")
	skus := harness.TempFile(t, "skus.yaml", harness.SacctSKUMap)
	if code, _, stderr := gpumeter(t, "--clickhouse", dsn, "import", "--quiet", "--from-sacct", "--sacct-tz", "UTC", "--sku-map", skus, fixture); code != 0 {
		t.Fatalf("import --from-sacct: %s", stderr)
	}
	measure := func(job, gpu, tenant string, start time.Time, d time.Duration) collectors.Sample {
		s := collectors.Sample{Host: "gpu07", GPUUUID: gpu, GPUModel: "A100-SXM4-80GB", SKU: "A100-SXM4-80GB", Tenant: tenant,
			Workload: "slurm/" + job, Start: start, End: start.Add(d), Values: meter.Values{GPUMicroseconds: uint64(d / time.Microsecond)}}
		s.ID = collectors.SampleID(s.Host, s.GPUUUID, s.Tenant, s.Workload, s.Start)
		return s
	}
	at := func(day, h, m int) time.Time { return time.Date(2026, 11, day, h, m, 0, 0, time.UTC) }
	samples := []collectors.Sample{
		// 4101: 2 GPUs × 2:30:30, measured to the second on both.
		measure("4101", "GPU-a", "physics", at(3, 9, 15), 2*time.Hour+30*time.Minute+30*time.Second),
		measure("4101", "GPU-b", "physics", at(3, 9, 15), 2*time.Hour+30*time.Minute+30*time.Second),
		// 4114: 8 GPUs allocated for November's last 2 h, one of them busy.
		measure("4114", "GPU-c", "physics", at(30, 22, 0), 2*time.Hour),
		// A job this export does not hold.
		measure("9999", "GPU-d", "guest", at(10, 0, 0), time.Hour),
	}
	if err := harness.OpenStore(t, dsn).InsertSamples(context.Background(), samples); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := gpumeter(t, "--clickhouse", dsn, "slurm", "compare", "--period", "2026-11", "--sacct", fixture, "--sacct-tz", "UTC", "--json")
	if code != 0 {
		t.Fatalf("slurm compare: exit %d\n%s", code, stderr)
	}
	var got struct {
		Accounts []struct {
			Account   string
			Allocated float64 `json:"allocated_gpu_hours"`
			Measured  float64 `json:"measured_gpu_hours"`
		}
		Differences []struct{ Job, Why string }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// physics: 4101 2 × 2:30:30, 4113 1 h, 4114 8 × 2 h (November's part),
	// 4120 and 4121 30 min each.
	physics := 2*(2.5+30.0/3600) + 1 + 16 + 0.5 + 0.5
	want := map[string][2]float64{"physics": {physics, 2*(2.5+30.0/3600) + 2}, "": {0, 1}}
	for _, a := range got.Accounts {
		w, ok := want[a.Account]
		if !ok {
			continue
		}
		if math.Abs(a.Allocated-w[0]) > 1e-9 || math.Abs(a.Measured-w[1]) > 1e-9 {
			t.Errorf("account %q: allocated %.4f measured %.4f, want %.4f and %.4f", a.Account, a.Allocated, a.Measured, w[0], w[1])
		}
	}
	why := map[string]string{}
	for _, d := range got.Differences {
		why[d.Job] = d.Why
	}
	for job, reason := range map[string]string{"4114": "allocated, less measured", "4105": "allocated, nothing measured",
		"9999": "measured, not in sacct", "4113": "allocated, nothing measured"} {
		if why[job] != reason {
			t.Errorf("job %s: %q, want %q", job, why[job], reason)
		}
	}
	if r, listed := why["4101"]; listed {
		t.Errorf("job 4101 was measured exactly, but is listed: %s", r)
	}

	// The text report names the same.
	code, out, _ = gpumeter(t, "--clickhouse", dsn, "slurm", "compare", "--period", "2026-11", "--sacct", fixture, "--sacct-tz", "UTC")
	if code != 0 || !strings.Contains(out, "(not in sacct)") || !strings.Contains(out, "4114") {
		t.Errorf("text report: exit %d\n%s", code, out)
	}
}

func TestSlurmCompareRefusesBadInput(t *testing.T) {
	good := filepath.Join("..", "..", "internal", "sacct", "testdata", "slurm-24.05.txt")
	broken := harness.TempFile(t, "broken.txt", "Cluster|JobID|Account|Start|End|Elapsed|AllocTRES\nc|1|a|yesterday|2026-11-03T11:45:30|01:00:00|gres/gpu=1\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no period", []string{"--sacct", good}, "--period and --sacct are required"},
		{"bad period", []string{"--period", "2026-13", "--sacct", good}, "--period"},
		{"bad tolerance", []string{"--period", "2026-11", "--sacct", good, "--tolerance", "2"}, "--tolerance"},
		{"bad zone", []string{"--period", "2026-11", "--sacct", good, "--sacct-tz", "Mars/Base"}, "--sacct-tz"},
		{"missing file", []string{"--period", "2026-11", "--sacct", "/nonexistent/sacct.txt"}, "/nonexistent/sacct.txt"},
		{"broken file", []string{"--period", "2026-11", "--sacct", broken, "--sacct-tz", "UTC"}, "broken.txt:2: Start"},
		{"no subcommand", nil, "want a subcommand"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"slurm", "compare"}, tc.args...)
			if tc.args == nil {
				args = []string{"slurm"}
			}
			code, _, stderr := gpumeter(t, args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

// Tenants that are Slurm accounts are charged to their parent account
// (sacctmgr's hierarchy) with --slurm-accounts; the parts still add up.
func TestChargebackBySlurmAccountHierarchy(t *testing.T) {
	dsn := testDSN(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "internal.yaml"), []byte(chargebackCLIBook), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gpumeter.yaml")
	if err := os.WriteFile(cfg, []byte("chargeback:\n  book: internal.yaml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	assoc := harness.TempFile(t, "assoc.txt", "Account|ParentName|User|Cluster\nroot|||hpc1\nsciences|root||hpc1\n"+
		"physics|sciences||hpc1\nphysics||ada|hpc1\nchemistry|sciences||hpc1\nastro|root||hpc1\n")
	var samples []collectors.Sample
	for i, tenant := range []string{"physics", "chemistry", "astro", "guest"} {
		for h := 0; h < 24; h++ {
			start := time.Date(2026, 11, 2, h, 0, 0, 0, time.UTC)
			s := collectors.Sample{Host: "h", GPUUUID: "GPU-" + tenant, GPUModel: "A100-SXM4-80GB", SKU: "A100-SXM4-80GB",
				Tenant: tenant, Department: "from-map", Workload: "w", Start: start, End: start.Add(time.Hour),
				Values: meter.Values{GPUMicroseconds: uint64(i+1) * 900_000_000}}
			s.ID = collectors.SampleID(s.Host, s.GPUUUID, s.Tenant, s.Workload, s.Start)
			samples = append(samples, s)
		}
	}
	if err := harness.OpenStore(t, dsn).InsertSamples(context.Background(), samples); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := gpumeter(t, "--clickhouse", dsn, "rollup", "--scheduled"); code != 0 {
		t.Fatalf("rollup: %s", stderr)
	}
	g := []string{"--clickhouse", dsn, "--config", cfg, "chargeback", "--period", "2026-11", "--format", "json"}
	departments := func(args ...string) map[string]string {
		t.Helper()
		code, out, stderr := gpumeter(t, append(g, args...)...)
		if code != 0 {
			t.Fatalf("chargeback %v: exit %d\n%s", args, code, stderr)
		}
		var rep struct {
			Departments []struct {
				Name    string
				Tenants []struct{ Name string }
			}
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		byTenant := map[string]string{}
		for _, d := range rep.Departments {
			for _, tn := range d.Tenants {
				byTenant[tn.Name] = d.Name
			}
		}
		return byTenant
	}
	plain := departments()
	if plain["physics"] != "from-map" || plain["astro"] != "from-map" {
		t.Fatalf("without --slurm-accounts: %v", plain)
	}
	regrouped := departments("--slurm-accounts", assoc)
	for tenant, dept := range map[string]string{"physics": "sciences", "chemistry": "sciences", "astro": "astro", "guest": "from-map"} {
		if regrouped[tenant] != dept {
			t.Errorf("tenant %s in department %q, want %q (all: %v)", tenant, regrouped[tenant], dept, regrouped)
		}
	}
	// The efficiency section groups the same way.
	code, out, stderr := gpumeter(t, append(g, "--slurm-accounts", assoc, "--efficiency")...)
	if code != 0 {
		t.Fatalf("chargeback --efficiency: exit %d\n%s", code, stderr)
	}
	var eff struct {
		Efficiency []struct{ Department, Tenant string }
	}
	if err := json.Unmarshal([]byte(out), &eff); err != nil || len(eff.Efficiency) == 0 {
		t.Fatalf("efficiency section: %v\n%s", err, out)
	}
	tenantRows := 0
	for _, r := range eff.Efficiency {
		if r.Tenant != "" {
			tenantRows++
		}
		if want := map[string]string{"physics": "sciences", "chemistry": "sciences", "astro": "astro", "guest": "from-map"}[r.Tenant]; r.Tenant != "" && r.Department != want {
			t.Errorf("efficiency row %+v: department %q, want %q", r, r.Department, want)
		}
	}
	if tenantRows != 4 {
		t.Errorf("efficiency section has %d tenant rows, want 4: %+v", tenantRows, eff.Efficiency)
	}
	for _, bad := range [][]string{{"--slurm-level", "0"}, {"--slurm-accounts", harness.TempFile(t, "bad.txt", "Account|User\nx|\n")}} {
		if code, _, stderr := gpumeter(t, append(g, bad...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", bad, code, stderr)
		}
	}
}
