package slurmtest_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/internal/slurmtest"
)

const mapFile = `
account physics   uni-physics physics-dept
account chemistry uni-chem    chemistry-dept
`

// runningJob is a job of the harness and the processes placed on GPUs.
type runningJob struct {
	id           string
	tenant, dept string
	gpus         []int    // node GPU indices Slurm allocated
	leaves       []uint32 // the job's sleep processes, one per GPU
}

var gresIdx = regexp.MustCompile(`IDX:([0-9,\-]+)\)`)

// gpuIndices reads the allocated GPU indices from scontrol's detail
// ("GRES=gpu:h100:2(IDX:2-3)").
func gpuIndices(t *testing.T, gres string) []int {
	t.Helper()
	m := gresIdx.FindStringSubmatch(gres)
	if m == nil {
		t.Fatalf("no GPU indices in GRES=%q", gres)
	}
	var out []int
	for _, part := range strings.Split(m[1], ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			t.Fatalf("GRES=%q: %v", gres, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				t.Fatalf("GRES=%q: %v", gres, err)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out
}

func comm(pid uint32) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// Real jobs submitted with sbatch as three users under two accounts: the
// simulated GPUs report the jobs' own processes as their compute
// processes, and the collector's cgroup attribution, reading the real
// /proc, books each job's GPU time to its account's tenant and department
// under workload slurm/<job id>. One job runs its GPU process with
// SLURM_JOB_ACCOUNT of another account; it stays billed to its own.
func TestRealJobsAttributedToTheirAccounts(t *testing.T) {
	c := slurmtest.Start(t)
	specs := []struct {
		job          slurmtest.Job
		procs        int
		tenant, dept string
	}{
		{slurmtest.Job{User: slurmtest.UserAda, Gres: "gpu:a100:1", Script: "sleep 600"}, 2, "uni-physics", "physics-dept"},
		{slurmtest.Job{User: slurmtest.UserBob, Partition: "debug", GPUsPerNode: "h100:2", Script: "sleep 600 & sleep 600 & wait"}, 3, "uni-chem", "chemistry-dept"},
		{slurmtest.Job{User: slurmtest.UserCarol, Account: "physics", Gres: "gpu:a100:1", Script: "SLURM_JOB_ACCOUNT=chemistry sleep 600"}, 2, "uni-physics", "physics-dept"},
	}
	var jobs []runningJob
	for _, s := range specs {
		id := c.Submit(t, s.job)
		jobs = append(jobs, runningJob{id: id, tenant: s.tenant, dept: s.dept})
	}
	wantAccount := []string{"physics", "chemistry", "physics"}
	wantPartition := []string{"gpu", "debug", "gpu"}
	for i := range jobs {
		j := &jobs[i]
		fields := c.WaitRunning(t, j.id, specs[i].procs)
		j.gpus = gpuIndices(t, fields["GRES"])
		// The batch script's children are listed before they exec sleep.
		slurmtest.Eventually(t, "job "+j.id+"'s sleep processes", func() (bool, string) {
			j.leaves = j.leaves[:0]
			for _, pid := range c.PIDs(t, j.id) {
				if comm(pid) == "sleep" {
					j.leaves = append(j.leaves, pid)
				}
			}
			return len(j.leaves) == len(j.gpus), fmt.Sprintf("%d sleep processes for %d GPUs %v", len(j.leaves), len(j.gpus), j.gpus)
		})
		// What procfs says of the job, account, user and partition.
		for _, pid := range j.leaves {
			got, ok := attribution.ReadSlurmJob("/proc", pid, false)
			want := attribution.SlurmJob{ID: j.id, Step: got.Step, Account: wantAccount[i], User: specs[i].job.User,
				Partition: wantPartition[i], FromCgroup: c.Proctrack == "cgroup"}
			if c.Proctrack != "cgroup" {
				got, ok = attribution.ReadSlurmJob("/proc", pid, true)
				want.Step = got.Step
			}
			if !ok || got != want {
				t.Fatalf("job %s pid %d: ReadSlurmJob = %+v, %v; want %+v", j.id, pid, got, ok, want)
			}
		}
	}

	// Under proctrack/cgroup the jobs are found by cgroup; under
	// proctrack/linuxproc (GPUMETER_SLURM_PROCTRACK) by environment.
	t.Run("the real procfs, proctrack/"+c.Proctrack, func(t *testing.T) {
		checkAttribution(t, jobs, "/proc", true)
	})
	t.Run("environment only, as inside a container", func(t *testing.T) {
		// A procfs whose cgroup files show a container's own root: the
		// job comes from the processes' real environments.
		root := t.TempDir()
		for _, j := range jobs {
			for _, pid := range c.PIDs(t, j.id) {
				dir := filepath.Join(root, strconv.FormatUint(uint64(pid), 10))
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::/\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				for _, f := range []string{"environ", "stat"} {
					if err := os.Symlink(fmt.Sprintf("/proc/%d/%s", pid, f), filepath.Join(dir, f)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		checkAttribution(t, jobs, root, true)
	})
	t.Run("environment not trusted: nothing without cgroups", func(t *testing.T) {
		root := t.TempDir()
		for _, j := range jobs {
			for _, pid := range j.leaves {
				dir := filepath.Join(root, strconv.FormatUint(uint64(pid), 10))
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::/\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(fmt.Sprintf("/proc/%d/environ", pid), filepath.Join(dir, "environ")); err != nil {
					t.Fatal(err)
				}
			}
		}
		checkAttribution(t, jobs, root, false)
	})
}

// checkAttribution runs a simulated 4-GPU host whose GPU i is the node's
// GPU i, with each job's processes on the GPUs Slurm gave the job, through
// the NVML collector, the cgroup attribution (procRoot) and apportioning
// for six intervals, and checks every sample's owner and the totals
// against the simulator's ledger.
func checkAttribution(t *testing.T, jobs []runningJob, procRoot string, fromEnv bool) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	const interval = 10 * time.Second
	h, err := sim.NewHost(sim.HostConfig{Name: slurmtest.Node, Model: "H100-SXM5-80GB", GPUs: 4, Seed: 1, Start: t0, Step: interval})
	if err != nil {
		t.Fatal(err)
	}
	attributed := procRoot == "/proc" || fromEnv
	byPID := map[uint32]runningJob{}
	for _, j := range jobs {
		for k, pid := range j.leaves {
			w := sim.Workload{Tenant: collectors.UnattributedTenant}
			if attributed {
				w = sim.Workload{Tenant: j.tenant, Department: j.dept}
			}
			if _, err := h.Start(sim.Process{PID: pid, GPU: j.gpus[k], MemBytes: 4 << 30, SMUtil: 70, Workload: w}); err != nil {
				t.Fatal(err)
			}
			byPID[pid] = j
		}
	}
	logs := &bytes.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	col, err := nvml.New(h.NVML(), nvml.DefaultConfig(), logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	mapping, err := attribution.ParseMapping(strings.NewReader(mapFile))
	if err != nil {
		t.Fatal(err)
	}
	tenancy := attribution.Tenancy{Mapping: mapping, AccountIsTenant: true}
	cg, err := attribution.NewCgroup(attribution.CgroupConfig{ProcRoot: procRoot, SlurmEnvironment: fromEnv}, tenancy, logger)
	if err != nil {
		t.Fatal(err)
	}
	chain := attribution.NewChain(logger, attribution.Step{Name: "cgroup", Attributor: cg}, attribution.Step{Name: "static", Attributor: attribution.NewStatic(mapping)})
	ctx := context.Background()
	prev := t0
	readings, err := col.Read(ctx, prev, prev)
	if err != nil {
		t.Fatal(err)
	}
	if err := chain.Attribute(ctx, readings); err != nil {
		t.Fatal(err)
	}
	var samples []collectors.Sample
	for range 6 {
		end := prev.Add(interval)
		if err := h.AdvanceTo(end); err != nil {
			t.Fatal(err)
		}
		readings, err := col.Read(ctx, prev, end)
		if err != nil {
			t.Fatal(err)
		}
		if err := chain.Attribute(ctx, readings); err != nil {
			t.Fatal(err)
		}
		for i := range readings {
			samples = attribution.Apportion(samples, h.Name(), prev, end, &readings[i])
		}
		prev = end
	}
	byTenant := map[string]uint64{}
	jobGPUs := map[string]map[string]bool{}
	for _, s := range samples {
		if err := s.Validate(); err != nil {
			t.Fatalf("invalid sample %+v: %v", s, err)
		}
		byTenant[s.Tenant] += s.GPUMicroseconds
		if s.Tenant == "" {
			continue
		}
		id, isJob := strings.CutPrefix(s.Workload, "slurm/")
		if !attributed {
			if s.Tenant != collectors.UnattributedTenant || isJob {
				t.Fatalf("without cgroups or a trusted environment: sample %s/%s on %s", s.Tenant, s.Workload, s.GPUUUID)
			}
			continue
		}
		var job *runningJob
		for i := range jobs {
			if jobs[i].id == id {
				job = &jobs[i]
			}
		}
		if !isJob || job == nil {
			t.Fatalf("sample of tenant %q with workload %q: not one of the jobs", s.Tenant, s.Workload)
		}
		if s.Tenant != job.tenant || s.Department != job.dept {
			t.Fatalf("job %s: sample booked to %s/%s, want %s/%s", job.id, s.Tenant, s.Department, job.tenant, job.dept)
		}
		if jobGPUs[id] == nil {
			jobGPUs[id] = map[string]bool{}
		}
		jobGPUs[id][s.GPUUUID] = true
	}
	if attributed {
		for _, j := range jobs {
			if len(jobGPUs[j.id]) != len(j.gpus) {
				t.Errorf("job %s: samples on %d GPUs, Slurm gave it %d", j.id, len(jobGPUs[j.id]), len(j.gpus))
			}
		}
	}
	ledger := h.Ledger()
	for tenant, want := range ledger.GPUMicroseconds {
		if byTenant[tenant] != want {
			t.Errorf("tenant %q: %d GPU-µs attributed, the simulator ran %d", tenant, byTenant[tenant], want)
		}
	}
	var total uint64
	for _, v := range byTenant {
		total += v
	}
	if want := uint64(4 * 6 * interval / time.Microsecond); total != want {
		t.Errorf("GPU time %d µs, want 4 GPUs × 60 s = %d", total, want)
	}
	if t.Failed() {
		t.Logf("collector log:\n%s", logs)
	}
}
