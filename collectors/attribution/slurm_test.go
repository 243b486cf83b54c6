package attribution

import (
	"testing"

	"github.com/gpumeter/gpumeter/collectors"
)

func TestReadSlurmJob(t *testing.T) {
	cases := []struct {
		name    string
		pid     uint32
		fromEnv bool
		want    SlurmJob
		found   bool
	}{
		{"cgroup v2 job, account from its environment", 201, true,
			SlurmJob{ID: "5150", Step: "0", Account: "physics", User: "ada", FromCgroup: true}, true},
		{"job only in the environment (a container's cgroup root)", 205, true,
			SlurmJob{ID: "7001", Step: "0", Account: "chemistry", User: "bob", Partition: "debug"}, true},
		{"job only in the environment, environment not trusted", 205, false, SlurmJob{}, false},
		{"cgroup job: the batch script's account, not the one a child was started with", 207, true,
			SlurmJob{ID: "7002", Step: "batch", Account: "physics", User: "ada", Partition: "gpu", FromCgroup: true}, true},
		{"the batch script itself; slurmstepd above it is not the job's", 206, true,
			SlurmJob{ID: "7002", Step: "batch", Account: "physics", User: "ada", Partition: "gpu", FromCgroup: true}, true},
		{"environment job: the topmost process with the job id decides", 209, true,
			SlurmJob{ID: "7003", Account: "physics", User: "ada", Partition: "gpu"}, true},
		{"cgroup job with another job's environment: account unknown", 210, true,
			SlurmJob{ID: "7004", Step: "0", FromCgroup: true}, true},
		{"slurmstepd (job cgroup, no job environment) keeps the id", 300, false,
			SlurmJob{ID: "7002", Step: "batch", FromCgroup: true}, true},
		{"a pod is no job", 101, true, SlurmJob{}, false},
		{"a login session is no job", 204, true, SlurmJob{}, false},
		{"no such process", 999, true, SlurmJob{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ReadSlurmJob("testdata/proc", tc.pid, tc.fromEnv)
			if ok != tc.found || got != tc.want {
				t.Fatalf("ReadSlurmJob = %+v, %v; want %+v, %v", got, ok, tc.want, tc.found)
			}
		})
	}
}

func TestCgroupSlurmFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fromEnv bool
		pid     uint32
		want    collectors.Owner
	}{
		{"environment trusted: the job's account is the tenant", true, 205, collectors.Owner{Tenant: "chemistry", Workload: "slurm/7001"}},
		{"environment not trusted: nobody's", false, 205, collectors.Owner{}},
		{"a child started with another account is billed to the job's", true, 207, collectors.Owner{Tenant: "uni", Department: "physics-dept", Workload: "slurm/7002"}},
		{"cgroup job without its own environment: workload only", true, 210, collectors.Owner{Workload: "slurm/7004"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkCgroupOwner(t, CgroupConfig{ProcRoot: "testdata/proc", SlurmEnvironment: tc.fromEnv}, fixtureTenancy, tc.pid, tc.want)
		})
	}
}

func TestParseStatPPID(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want uint32
		ok   bool
	}{
		{"42 (bash) S 7 42 42 0 -1", 7, true},
		{"42 (a) (b) ) S 9 42", 9, true},
		{"42 (x) S", 0, false},
		{"42 (x) S notanumber", 0, false},
		{"garbage", 0, false},
		{"", 0, false},
	} {
		got, ok := parseStatPPID([]byte(tc.stat))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseStatPPID(%q) = %d, %v; want %d, %v", tc.stat, got, ok, tc.want, tc.ok)
		}
	}
}
