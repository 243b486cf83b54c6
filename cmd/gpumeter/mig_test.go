package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/partition"
	"github.com/gpumeter/gpumeter/internal/partition/nvmlapply"
	"github.com/gpumeter/gpumeter/tests/harness"
)

const migFleetYAML = `gpus:
  - host: node1
    uuid: GPU-1
    model: H100-SXM5-80GB
    index: 0
    instances:
      - {profile: 3g.40gb, start: 4, uuid: MIG-1, tenant: acme, busy: true}
      - {profile: 1g.10gb, start: 0, uuid: MIG-2}
  - host: node1
    uuid: GPU-2
    model: H100-SXM5-80GB
    index: 1
    mig_disabled: true
`

const migDemandYAML = `tenants:
  - tenant: acme
    reserved:
      - {model: H100-SXM5-80GB, profile: 3g.40gb, count: 2}
  - tenant: beta
    reserved:
      - {profile: 2g.20gb, count: 1}
    pending:
      - {profile: 7g.80gb, count: 1}
`

func writeTemp(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMIGRejectsBadInvocations(t *testing.T) {
	fleet := writeTemp(t, "fleet.yaml", migFleetYAML)
	demand := writeTemp(t, "demand.yaml", migDemandYAML)
	bad := func(name, body string) string { return writeTemp(t, name, body) }
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"no subcommand", []string{"mig"}, "want a subcommand"},
		{"unknown subcommand", []string{"mig", "resize"}, `unknown subcommand "resize"`},
		{"plan without demand", []string{"mig", "plan", "--fleet", fleet}, "--demand FILE is required"},
		{"plan without a fleet source", []string{"mig", "plan", "--demand", demand}, "exactly one of --fleet"},
		{"plan with two fleet sources", []string{"mig", "plan", "--fleet", fleet, "--from-clickhouse", "--demand", demand}, "exactly one of --fleet"},
		{"plan with a stray argument", []string{"mig", "plan", "--fleet", fleet, "--demand", demand, "extra"}, `unexpected argument "extra"`},
		{"plan with an unknown flag", []string{"mig", "plan", "--fleet", fleet, "--demand", demand, "--fast"}, "unknown flag: --fast"},
		{"fleet file missing", []string{"mig", "plan", "--fleet", "/nonexistent/fleet.yaml", "--demand", demand}, "nonexistent/fleet.yaml"},
		{"fleet file empty", []string{"mig", "plan", "--fleet", bad("empty.yaml", ""), "--demand", demand}, "is empty"},
		{"fleet file not YAML", []string{"mig", "plan", "--fleet", bad("f.yaml", "gpus: [unclosed"), "--demand", demand}, "--fleet"},
		{"fleet file with a misspelt key", []string{"mig", "plan", "--fleet", bad("f.yaml", "gpus:\n  - uuid: g\n    modle: H100-SXM5-80GB\n"), "--demand", demand}, "field modle not found"},
		{"fleet with an invalid placement", []string{"mig", "plan", "--fleet",
			bad("f.yaml", "gpus:\n  - {uuid: g, model: H100-SXM5-80GB, instances: [{profile: 3g.40gb, start: 2}]}\n"), "--demand", demand}, "cannot start at slot 2"},
		{"fleet with a wrong type", []string{"mig", "plan", "--fleet", bad("f.yaml", "gpus:\n  - {uuid: g, model: H100-SXM5-80GB, index: first}\n"), "--demand", demand}, "--fleet"},
		{"demand with a bad count", []string{"mig", "plan", "--fleet", fleet, "--demand",
			bad("d.yaml", "tenants:\n  - {tenant: a, reserved: [{profile: 3g.40gb, count: -1}]}\n")}, "count -1 is not positive"},
		{"demand with a count that is not an integer", []string{"mig", "plan", "--fleet", fleet, "--demand",
			bad("d.yaml", "tenants:\n  - {tenant: a, reserved: [{profile: 3g.40gb, count: 1.5}]}\n")}, "d.yaml: tenants[0] (a): reserved[0]: count 1.5 is not an integer"},
		{"demand with a count past the limit", []string{"mig", "plan", "--fleet", fleet, "--demand",
			bad("d.yaml", "tenants:\n  - {tenant: a, pending: [{profile: 3g.40gb, count: 10000000}]}\n")}, "pending[0]: count 10000000 exceeds the limit of 1000000 per line"},
		{"demand with counts whose sum wraps", []string{"mig", "plan", "--fleet", fleet, "--demand",
			bad("d.yaml", "tenants:\n  - {tenant: a, pending: [{profile: 3g.40gb, count: 4611686018427387904}, {profile: 3g.40gb, count: 4611686018427387904}]}\n")},
			"pending[1]: count 4611686018427387904 exceeds the limit"},
		{"fleet with an index twice on a host", []string{"mig", "plan", "--demand", demand, "--fleet",
			bad("f.yaml", "gpus:\n  - {host: n1, uuid: g1, model: H100-SXM5-80GB, index: 0}\n  - {host: n1, uuid: g2, model: H100-SXM5-80GB, index: 0}\n")},
			`f.yaml: gpus[1] (g2): index 0 on host "n1" repeats gpus[0]`},
		{"fleet with a MIG UUID on two GPUs", []string{"mig", "plan", "--demand", demand, "--fleet",
			bad("f.yaml", "gpus:\n  - {uuid: g1, model: H100-SXM5-80GB, instances: [{profile: 7g.80gb, start: 0, uuid: MIG-1}]}\n"+
				"  - {uuid: g2, model: H100-SXM5-80GB, instances: [{profile: 7g.80gb, start: 0, uuid: MIG-1}]}\n")},
			"gpus[1] (g2): instances[0]: uuid MIG-1 repeats gpus[0] instances[0]"},
		{"demand with an unknown profile", []string{"mig", "plan", "--fleet", fleet, "--demand",
			bad("d.yaml", "tenants:\n  - {tenant: a, pending: [{profile: 5g.50gb, count: 1}]}\n")}, `no model has profile "5g.50gb"`},
		{"demand not a mapping", []string{"mig", "plan", "--fleet", fleet, "--demand", bad("d.yaml", "- just\n- a list\n")}, "--demand"},
		{"apply without a plan", []string{"mig", "apply"}, "--plan FILE is required"},
		{"apply with an invalid plan", []string{"mig", "apply", "--plan",
			bad("p.yaml", "gpus:\n  - {uuid: g, model: H100-SXM5-80GB, changed: true, instances: [{profile: 7g.80gb, start: 4, action: create}]}\n")}, "cannot start at slot 4"},
		{"apply with a plan of unknown fields", []string{"mig", "apply", "--plan", bad("p.yaml", "layouts: []\n")}, "field layouts not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := gpumeter(t, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.msg) {
				t.Fatalf("exit %d, stderr %q; want 2 mentioning %q", code, stderr, tc.msg)
			}
		})
	}
}

func TestMIGPlanWritesPlanAndMIGPartedConfig(t *testing.T) {
	dir := t.TempDir()
	out, parted := filepath.Join(dir, "plan.yaml"), filepath.Join(dir, "parted.yaml")
	code, stdout, stderr := gpumeter(t, "mig", "plan", "--fleet", writeTemp(t, "fleet.yaml", migFleetYAML),
		"--demand", writeTemp(t, "demand.yaml", migDemandYAML), "--out", out, "--mig-parted", parted)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	// GPU-2 is in whole-GPU mode, so GPU-1 keeps the busy 3g at 4 and
	// trades the idle 1g at 0 for acme's second 3g; beta gets nothing.
	for _, want := range []string{
		"plan: 2 GPUs, 1 to change: 1 instances to create, 1 to destroy",
		"reserved 6 of 8 (75.0%), pending 0 of 7 (0.0%)",
		"- 1g.10gb     @0 MIG-2",
		"+ 3g.40gb     @0 acme",
		"= 3g.40gb     @4 acme busy",
		"beta reserved 2g.20gb x1: no free placement for 2g.20gb on any A100-SXM4-80GB or H100-SXM5-80GB GPU",
		"beta pending 7g.80gb x1: no free placement for 7g.80gb on any A100-SXM4-80GB or H100-SXM5-80GB GPU",
		"wrote plan to " + out,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	var plan partition.Plan
	if err := partition.ReadFile(out, &plan); err != nil {
		t.Fatal(err)
	}
	if err := plan.Validate(); err != nil || plan.Summary.GPUsChanged != 1 {
		t.Errorf("plan file: %v, summary %+v", err, plan.Summary)
	}
	var cfg map[string]any
	b, _ := os.ReadFile(parted)
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	node1 := cfg["mig-configs"].(map[string]any)["node1"].([]any)
	if cfg["version"] != "v1" || len(node1) != 2 {
		t.Errorf("mig-parted config:\n%s", b)
	}
	if !strings.Contains(string(b), `3g.40gb: 2`) || !strings.Contains(string(b), `mig-enabled: false`) {
		t.Errorf("mig-parted config lacks the layouts:\n%s", b)
	}
}

// A signal cancels the root context (main.go); mig plan stops planning,
// writes nothing and fails.
func TestMIGPlanStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(t.TempDir(), "plan.yaml")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"mig", "plan", "--fleet", writeTemp(t, "fleet.yaml", migFleetYAML),
		"--demand", writeTemp(t, "demand.yaml", migDemandYAML), "--out", out}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), context.Canceled.Error()) {
		t.Fatalf("exit %d, stderr %q; want 1 with %q", code, stderr.String(), context.Canceled)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a cancelled plan wrote %s: %v", out, err)
	}
	if stdout.Len() != 0 {
		t.Errorf("a cancelled plan printed:\n%s", stdout.String())
	}
}

func TestMIGPlanFromClickHouse(t *testing.T) {
	dsn := testDSN(t)
	ctx := context.Background()
	st := harness.OpenStore(t, dsn)
	start := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	s := collectors.Sample{
		Host:       "node1",
		GPUUUID:    "GPU-ch",
		GPUModel:   "H100-SXM5-80GB",
		MIGUUID:    "MIG-ch",
		MIGProfile: "4g.40gb",
		SKU:        "H100-SXM5-80GB/4g.40gb",
		Tenant:     "acme",
		Workload:   "pod/a",
		Start:      start,
		End:        start.Add(10 * time.Second),
		Values:     meter.Values{GPUMicroseconds: 1},
	}
	s.ID = collectors.SampleID(s.Host, s.MIGUUID, s.Tenant, s.Workload, s.Start)
	if err := st.InsertSamples(ctx, []collectors.Sample{s}); err != nil {
		t.Fatal(err)
	}
	demand := writeTemp(t, "demand.yaml", "tenants:\n  - {tenant: beta, reserved: [{profile: 3g.40gb, count: 1}]}\n")
	code, stdout, stderr := gpumeter(t, "--clickhouse", dsn, "mig", "plan", "--from-clickhouse", "--demand", demand)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	// The busy 4g's placement is inferred (slot 0), the 3g goes beside it.
	if !strings.Contains(stdout, "+ 3g.40gb     @4 beta") || !strings.Contains(stdout, "= 4g.40gb     @0 acme busy") {
		t.Errorf("output:\n%s", stdout)
	}
}

// mig apply on a machine without the NVIDIA driver says so (exit 1); on a
// GPU host the plan's GPUs are not there, which is also exit 1.
func TestMIGApplyWithoutNVML(t *testing.T) {
	plan := writeTemp(t, "plan.yaml", "gpus:\n  - {uuid: GPU-nowhere, model: H100-SXM5-80GB, changed: false}\n")
	code, _, stderr := gpumeter(t, "mig", "apply", "--plan", plan)
	if code != 1 || !(strings.Contains(stderr, "NVML library (libnvidia-ml.so.1) not found") || strings.Contains(stderr, "is on this host")) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestMIGApplyThroughMockNVML(t *testing.T) {
	srv := dgxh100.New()
	dev := srv.Devices[0].(*server.Device)
	plan := partition.Plan{GPUs: []partition.GPUPlan{{Host: "node1", UUID: dev.UUID, Model: "H100-SXM5-80GB", Changed: true,
		Instances: []partition.PlannedInstance{
			{Profile: "3g.40gb", Start: 0, Action: partition.Create, Tenant: "acme"},
			{Profile: "3g.40gb", Start: 4, Action: partition.Create, Tenant: "acme"},
		}}}}
	path := filepath.Join(t.TempDir(), "plan.yaml")
	if err := partition.WriteFile(path, plan); err != nil {
		t.Fatal(err)
	}
	lib := func(...nvml.LibraryOption) nvml.Interface { return srv }
	apply := func(args ...string) (string, error) {
		var out bytes.Buffer
		g := &globals{stdout: &out, stderr: io.Discard, logger: slog.New(slog.DiscardHandler)}
		err := runCommand(context.Background(), newMIGApplyCmd(g, lib), args)
		return out.String(), err
	}
	instances := func() []nvml.GpuInstancePlacement {
		info, _ := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
		gis, _ := dev.GetGpuInstances(&info)
		var out []nvml.GpuInstancePlacement
		for _, gi := range gis {
			i, _ := gi.GetInfo()
			out = append(out, i.Placement)
		}
		return out
	}

	// The mock starts with MIG off: refused, nothing created.
	if _, err := apply("--plan", path, "--yes"); !errors.Is(err, nvmlapply.ErrRefused) || !strings.Contains(err.Error(), "MIG mode is off") {
		t.Fatalf("apply with MIG off: %v", err)
	}
	dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	out, err := apply("--plan", path)
	if err != nil || !strings.Contains(out, "dry run: nothing changed") || len(instances()) != 0 {
		t.Fatalf("dry run: %v, %d instances, output:\n%s", err, len(instances()), out)
	}
	out, err = apply("--plan", path, "--yes")
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	got := instances()
	if len(got) != 2 || strings.Count(out, "done     create") != 2 {
		t.Errorf("instances %v, output:\n%s", got, out)
	}
	starts := map[uint32]bool{}
	for _, p := range got {
		starts[p.Start] = p.Size == 4
	}
	if !starts[0] || !starts[4] {
		t.Errorf("placements %v, want 3g at 0:4 and 4:4", got)
	}
}
