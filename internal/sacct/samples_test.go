package sacct

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/internal/meter"
)

const skuMapYAML = `
gres:
  a100: A100-SXM4-80GB
  h100: H100-SXM5-80GB
  a100_3g.40gb: A100-SXM4-80GB/3g.40gb
untyped: A100-SXM4-40GB
`

func testConfig(t testing.TB) Config {
	t.Helper()
	skus, err := ParseSKUMap(strings.NewReader(skuMapYAML))
	if err != nil {
		t.Fatal(err)
	}
	mapping, err := attribution.ParseMapping(strings.NewReader("account physics uni-physics physics-dept\naccount chemistry uni-chem chemistry-dept\n"))
	if err != nil {
		t.Fatal(err)
	}
	return Config{SKUs: skus, Tenancy: attribution.Tenancy{Mapping: mapping, AccountIsTenant: true}}
}

// The 24.05 fixture's GPU time, job by job (docs/slurm.md):
//
//	4101  2 × a100 × 2:30:30       = 18,060 s  A100-SXM4-80GB (3 hours touched: 6 rows)
//	4105  1 × h100 × 0:20 (array)  =  1,200 s  H100-SXM5-80GB (2 rows)
//	4113  1 × 3g.40gb × 1:00 × 3/7 = 1,542.857142 s (1 row)
//	4114  8 × h100 × 1-02:00       = 748,800 s, across a month's end (26 hours: 208 rows)
//	4116  1 × untyped × 0:05       =    300 s  A100-SXM4-40GB (1 row)
//	4120  1 × a100 × 0:30 (het +0) =  1,800 s; 4121 1 × h100 (het +1) = 1,800 s
//	4122  a100 + h100 × 0:10       =    600 s each, account geology (unmapped: its own tenant)
//
// 4110 is pending, 4111 running, 4112 has no GPUs, 4115 ran for 0 s.
func TestSamplesSlurm2405(t *testing.T) {
	jobs, err := Parse(mustOpen(t, "slurm-24.05.txt"), Options{Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	rows, sum, err := Samples(jobs, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	s := func(sec int64) uint64 { return uint64(sec) * 1e6 }
	wantGPU := map[string]uint64{
		"A100-SXM4-80GB":         s(18060 + 1800 + 600),
		"H100-SXM5-80GB":         s(1200 + 748800 + 1800 + 600),
		"A100-SXM4-80GB/3g.40gb": 1_542_857_142,
		"A100-SXM4-40GB":         s(300),
	}
	got := map[string]uint64{}
	byWorkload := map[string]uint64{}
	tenants := map[string]string{}
	for _, r := range rows {
		x := r.Sample
		got[x.SKU] += x.GPUMicroseconds
		byWorkload[x.Workload] += x.GPUMicroseconds
		tenants[x.Workload] = x.Tenant + "/" + x.Department
		if !x.End.After(x.Start) || x.End.Sub(x.Start) > time.Hour || x.Start.Truncate(time.Hour) != x.End.Add(-time.Nanosecond).Truncate(time.Hour) {
			t.Errorf("line %d: row %s..%s is not within one hour", r.Line, x.Start, x.End)
		}
		if x.Host != "hpc1" || !strings.HasPrefix(x.GPUUUID, "SLURM-hpc1-") || x.Unmeasured != meter.UnmeasuredAll {
			t.Errorf("line %d: row %+v", r.Line, x)
		}
	}
	for sku, want := range wantGPU {
		if got[sku] != want || sum.GPUMicroseconds[sku] != want {
			t.Errorf("%s: %d µs (summary %d), want %d", sku, got[sku], sum.GPUMicroseconds[sku], want)
		}
	}
	if len(got) != len(wantGPU) {
		t.Errorf("SKUs %v, want %v", got, wantGPU)
	}
	if len(rows) != 6+2+1+208+1+1+1+2 {
		t.Errorf("%d rows, want 222", len(rows))
	}
	if want := (Summary{Jobs: 12, Steps: 4, Unfinished: 2, WithoutGPUs: 2, WithGPUs: 8}); sum.Jobs != want.Jobs || sum.Steps != want.Steps ||
		sum.Unfinished != want.Unfinished || sum.WithoutGPUs != want.WithoutGPUs || sum.WithGPUs != want.WithGPUs {
		t.Errorf("summary %+v, want %+v", sum, want)
	}
	for wl, want := range map[string]string{"slurm/4101": "uni-physics/physics-dept", "slurm/4105": "uni-chem/chemistry-dept", "slurm/4121": "uni-physics/physics-dept", "slurm/4122": "geology/"} {
		if tenants[wl] != want {
			t.Errorf("%s: tenant %q, want %q", wl, tenants[wl], want)
		}
	}
	if byWorkload["slurm/4114"] != s(748800) || byWorkload["slurm/4105"] != s(1200) {
		t.Errorf("by workload: %v", byWorkload)
	}
	// Every row of the MIG job names the instance's profile.
	for _, r := range rows {
		if r.Sample.Workload == "slurm/4113" && (r.Sample.MIGProfile != "3g.40gb" || r.Sample.MIGUUID == "" || r.Sample.GPUModel != "A100-SXM4-80GB") {
			t.Errorf("MIG row %+v", r.Sample)
		}
	}
}

func TestSamplesSlurm2302(t *testing.T) {
	jobs, err := Parse(mustOpen(t, "slurm-23.02.txt"), Options{Cluster: "old", Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	if _, _, err := Samples(jobs, cfg); err == nil || !strings.Contains(err.Error(), `line 2: AllocTRES: GRES type "v100" has no SKU`) {
		t.Fatalf("v100 without a SKU: %v", err)
	}
	cfg.SKUs.Types["v100"] = "V100-SXM2-32GB"
	rows, sum, err := Samples(jobs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 7001: 4 × 1 h across midnight (2 rows each); 7002: 1 × 45:15.
	if len(rows) != 9 || sum.GPUMicroseconds["V100-SXM2-32GB"] != (4*3600+2715)*1e6 || sum.Steps != 3 || sum.WithoutGPUs != 1 {
		t.Fatalf("%d rows, summary %+v", len(rows), sum)
	}
	if rows[0].Sample.Workload != "slurm/7001" || rows[0].Sample.Host != "old" {
		t.Fatalf("row %+v", rows[0].Sample)
	}
}

func TestSamplesProblems(t *testing.T) {
	const header = "Cluster|JobID|Account|Start|End|Elapsed|AllocTRES|ReqTRES\n"
	for _, tc := range []struct {
		name, line, want string
	}{
		{"GPUs asked for but not accounted", "c|1|physics|2026-11-01T00:00:00|2026-11-01T01:00:00|01:00:00|cpu=1|cpu=1,gres/gpu=2",
			"line 2: AllocTRES: no gres/gpu, but ReqTRES asks for 2 GPUs: add gres/gpu to AccountingStorageTRES"},
		{"unknown type", "c|1|physics|2026-11-01T00:00:00|2026-11-01T01:00:00|01:00:00|gres/gpu:l40s=1|", `line 2: AllocTRES: GRES type "l40s" has no SKU`},
		{"elapsed disagrees", "c|1|physics|2026-11-01T00:00:00|2026-11-01T01:00:00|02:00:00|gres/gpu:a100=1|", "line 2: Elapsed: 2h0m0s, but End - Start is 1h0m0s"},
		{"end before start", "c|1|physics|2026-11-01T02:00:00|2026-11-01T01:00:00|01:00:00|gres/gpu:a100=1|", "line 2: End: 2026-11-01T01:00:00Z is before Start"},
		{"array task without its raw id", "c|1_7|physics|2026-11-01T00:00:00|2026-11-01T01:00:00|01:00:00|gres/gpu:a100=1|", "line 2: JobIDRaw: missing: job 1_7 is an array task"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs, err := Parse(strings.NewReader(header+tc.line+"\n"), Options{Location: time.UTC})
			if err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(t)
			if tc.name == "unknown type" {
				cfg.SKUs.Untyped = ""
			}
			rows, _, err := Samples(jobs, cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) || rows != nil {
				t.Fatalf("rows %d, err %v; want %q", len(rows), err, tc.want)
			}
		})
	}
	jobs, err := Parse(strings.NewReader(header+"c|1|physics|2026-11-01T00:00:00|2026-11-01T01:00:00|01:00:00|gres/gpu=1|\n"), Options{Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.SKUs.Untyped = ""
	if _, _, err := Samples(jobs, cfg); err == nil || !strings.Contains(err.Error(), "1 GPUs without a type: name their SKU as untyped:") {
		t.Fatalf("untyped without a SKU: %v", err)
	}
}

func TestParseSKUMap(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"unknown key", "gres:\n  a100: A100-SXM4-80GB\nuntypd: x\n", "line 3: untypd: unknown key"},
		{"model in another spelling", "gres:\n  a100: a100-sxm4-80gb\n", `line 2: gres.a100: write the model as "A100-SXM4-80GB"`},
		{"profile the model lacks", "gres:\n  mig: A100-SXM4-40GB/3g.40gb\n", "line 2: gres.mig: A100-SXM4-40GB has no MIG profile"},
		{"vGPU", "untyped: A100-SXM4-40GB/vgpu:A100-4C\n", "line 1: untyped: \"A100-SXM4-40GB/vgpu:A100-4C\" is a vGPU SKU"},
		{"type twice", "gres:\n  a100: A100-SXM4-80GB\n  a100: A100-SXM4-40GB\n", "line 3: gres.a100: given twice"},
		{"not a mapping", "- a100\n", "line 1: want a mapping"},
		{"empty", "", "line 1: empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSKUMap(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	m, err := ParseSKUMap(strings.NewReader(skuMapYAML))
	if err != nil || m.Types["h100"] != "H100-SXM5-80GB" || m.Untyped != "A100-SXM4-40GB" || len(m.Types) != 3 {
		t.Fatalf("map %+v, %v", m, err)
	}
}

// What docs/slurm.md shows operators to copy works as it says: the SKU
// map parses, and the sacct command asks for the fields Format lists.
func TestDocsExamples(t *testing.T) {
	b, err := os.ReadFile("../../docs/slurm.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if !strings.Contains(doc, "--format="+Format+" ") {
		t.Errorf("docs/slurm.md's sacct command lacks --format=%s", Format)
	}
	_, rest, ok := strings.Cut(doc, "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/slurm.md lost its SKU map example")
	}
	m, err := ParseSKUMap(strings.NewReader(block))
	if err != nil || m.Types["a100_3g.40gb"] != "A100-SXM4-80GB/3g.40gb" || m.Untyped == "" {
		t.Fatalf("the documented SKU map: %+v, %v", m, err)
	}
}

// Local times across the end of daylight saving time: Berlin's clocks go
// back at 03:00 on 2026-10-25, so 01:30 to 03:30 is three hours, as
// Elapsed says, and becomes three hours of samples; read as UTC, the same
// line disagrees with its Elapsed and is refused.
func TestSamplesAcrossADaylightSavingChange(t *testing.T) {
	in := "Cluster|JobID|Account|Start|End|Elapsed|AllocTRES\nc|1|physics|2026-10-25T01:30:00|2026-10-25T03:30:00|03:00:00|gres/gpu:a100=1\n"
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := Parse(strings.NewReader(in), Options{Location: berlin})
	if err != nil {
		t.Fatal(err)
	}
	rows, sum, err := Samples(jobs, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if sum.GPUMicroseconds["A100-SXM4-80GB"] != 3*3600e6 || len(rows) != 4 || !rows[0].Sample.Start.Equal(time.Date(2026, 10, 24, 23, 30, 0, 0, time.UTC)) {
		t.Fatalf("%d rows, %v, first %s", len(rows), sum.GPUMicroseconds, rows[0].Sample.Start)
	}
	jobs, err = Parse(strings.NewReader(in), Options{Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Samples(jobs, testConfig(t)); err == nil || !strings.Contains(err.Error(), "Elapsed: 3h0m0s, but End - Start is 2h0m0s") {
		t.Fatalf("read in the wrong zone: %v", err)
	}
}
