package slurm

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/slurmtest"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// usageBy sums stored usage (deduplicated) over [from, to) by tenant and
// workload.
func usageBy(t *testing.T, dsn string, from, to time.Time) map[string]uint64 {
	t.Helper()
	rows, err := harness.OpenStore(t, dsn).Usage(context.Background(), usage.Query{From: from, To: to, GroupBy: []usage.Dimension{usage.DimTenant, usage.DimWorkload}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, r := range rows {
		out[r.Tenant+" "+r.Workload] += r.GPUMicroseconds
	}
	return out
}

// Real jobs in the Slurm test cluster, real sacct output: the import's
// totals per job are the GPU-seconds slurmctld says each job held (its
// GPUs × EndTime - StartTime), under the job's account's tenant.
func TestImportFromSacctOfRealJobs(t *testing.T) {
	c := slurmtest.Start(t)
	dsn := harness.TestDSN(t)
	type spec struct {
		job    slurmtest.Job
		gpus   int
		tenant string
	}
	specs := []spec{
		{slurmtest.Job{User: slurmtest.UserAda, Gres: "gpu:a100:1", Script: "sleep 2"}, 1, "uni-physics"},
		{slurmtest.Job{User: slurmtest.UserBob, Partition: "debug", GPUsPerNode: "h100:2", Script: "sleep 3"}, 2, "uni-chem"},
		{slurmtest.Job{User: slurmtest.UserCarol, Account: "physics", Gres: "gpu:1", Script: "sleep 1"}, 1, "uni-physics"},
		{slurmtest.Job{User: slurmtest.UserCarol, Script: "sleep 1"}, 0, ""},
	}
	var ids []string
	for _, s := range specs {
		ids = append(ids, c.Submit(t, s.job))
	}
	out := c.WaitAccounted(t, ids...)
	sacctOut := harness.TempFile(t, "sacct.txt", string(out))
	skus, accounts := harness.TempFile(t, "skus.yaml", harness.SacctSKUMap), harness.TempFile(t, "map", harness.SacctAccounts)
	args := []string{"--clickhouse", dsn, "import", "--quiet", "--from-sacct", "--sacct-tz", "UTC", "--sku-map", skus, "--map-file", accounts, sacctOut}
	code, stdout, stderr := harness.Run(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s\nsacct:\n%s", code, stdout, stderr, out)
	}
	if !strings.Contains(stderr, "4 jobs: 3 with GPUs") {
		t.Errorf("summary: %s\nsacct:\n%s", stderr, out)
	}
	var first, last time.Time
	want := map[string]uint64{}
	for i, id := range ids {
		job := c.Show(t, id)
		start, err1 := time.Parse("2006-01-02T15:04:05", job["StartTime"])
		end, err2 := time.Parse("2006-01-02T15:04:05", job["EndTime"])
		if err1 != nil || err2 != nil {
			t.Fatalf("job %s: StartTime %q EndTime %q", id, job["StartTime"], job["EndTime"])
		}
		if first.IsZero() || start.Before(first) {
			first = start
		}
		if end.After(last) {
			last = end
		}
		if specs[i].gpus == 0 {
			continue
		}
		if !strings.Contains(job["TRES"], "gres/gpu="+strconv.Itoa(specs[i].gpus)) {
			t.Fatalf("job %s: TRES %s, want %d GPUs", id, job["TRES"], specs[i].gpus)
		}
		want[specs[i].tenant+" slurm/"+id] = uint64(specs[i].gpus) * uint64(end.Sub(start)/time.Microsecond)
	}
	got := usageBy(t, dsn, first.Truncate(time.Hour), last.Add(time.Hour))
	if len(got) != len(want) {
		t.Errorf("stored %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w || w == 0 {
			t.Errorf("%s: %d GPU-µs stored, slurmctld says %d", k, got[k], w)
		}
	}
	// Imported again: nothing new.
	code, stdout, _ = harness.Run(t, args...)
	if code != 0 || !strings.Contains(stdout, " 0 stored,") {
		t.Fatalf("second import: exit %d, %s", code, stdout)
	}
}
