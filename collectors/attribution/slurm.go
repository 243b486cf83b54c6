package attribution

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// SlurmJob is what a node's procfs says about the Slurm job of a process.
type SlurmJob struct {
	ID        string // the job id (SLURM_JOB_ID: for an array task, its own id)
	Step      string // "batch", "0", "extern", …; empty when not known
	Account   string
	User      string
	Partition string
	// FromCgroup is true when the job id comes from the process's cgroup
	// (proctrack/cgroup), false when only from its environment.
	FromCgroup bool
}

// Workload is the job's workload in samples: "slurm/<id>".
func (j SlurmJob) Workload() string { return "slurm/" + j.ID }

// maxAncestors bounds the walk up the parent chain.
const maxAncestors = 64

// ReadSlurmJob finds the Slurm job of process pid under procRoot.
//
// The job id comes from /proc/<pid>/cgroup (Slurm's cgroup v1 and v2
// layouts), which the job's user cannot change. Without a job there (no
// proctrack/cgroup, or a container that shows its own cgroup root), and
// when fromEnv allows it, it comes from SLURM_JOB_ID in the environment.
//
// Account, user and partition come from the environment of the job's
// topmost process on the node: the ancestor, nearest slurmstepd, that is
// still in the same job (by cgroup, or by SLURM_JOB_ID when the id came
// from the environment). slurmstepd wrote that environment when it started
// the step; a process further down may have been started with another
// SLURM_JOB_ACCOUNT (`SLURM_JOB_ACCOUNT=other ./train`), which must not
// move its usage to another account. Without a readable ancestor the
// process's own environment is used.
func ReadSlurmJob(procRoot string, pid uint32, fromEnv bool) (SlurmJob, bool) {
	dir := procDir(procRoot, pid)
	var job SlurmJob
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		if ref := ParseCgroup(string(b)); ref.SlurmJob != "" {
			job = SlurmJob{ID: ref.SlurmJob, Step: ref.SlurmStep, FromCgroup: true}
		} else if ref.PodUID != "" {
			return SlurmJob{}, false
		}
	}
	env, envErr := os.ReadFile(filepath.Join(dir, "environ"))
	if job.ID == "" {
		if !fromEnv || envErr != nil {
			return SlurmJob{}, false
		}
		id := environValue(env, "SLURM_JOB_ID")
		if !isDigits(id) {
			return SlurmJob{}, false
		}
		job.ID = id
		job.Step = environValue(env, "SLURM_STEP_ID")
	}
	sameJob := func(p uint32) ([]byte, bool) {
		d := procDir(procRoot, p)
		if job.FromCgroup {
			b, err := os.ReadFile(filepath.Join(d, "cgroup"))
			if err != nil || ParseCgroup(string(b)).SlurmJob != job.ID {
				return nil, false
			}
		}
		e, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil || environValue(e, "SLURM_JOB_ID") != job.ID {
			return nil, false
		}
		return e, true
	}
	// The topmost process of the job: walk up while the parent is in it.
	var leaderEnv []byte
	if e, ok := sameJob(pid); ok {
		leaderEnv = e
	}
	for p, n := pid, 0; n < maxAncestors; n++ {
		pp, ok := parentPID(procRoot, p)
		if !ok || pp <= 1 || pp == p {
			break
		}
		e, ok := sameJob(pp)
		if !ok {
			break
		}
		leaderEnv, p = e, pp
	}
	if leaderEnv == nil && envErr == nil && environValue(env, "SLURM_JOB_ID") == job.ID {
		leaderEnv = env
	}
	if leaderEnv != nil {
		job.Account = environValue(leaderEnv, "SLURM_JOB_ACCOUNT")
		job.User = environValue(leaderEnv, "SLURM_JOB_USER")
		job.Partition = environValue(leaderEnv, "SLURM_JOB_PARTITION")
	}
	return job, true
}

func procDir(procRoot string, pid uint32) string {
	return filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10))
}

// parentPID reads the parent of pid from /proc/<pid>/stat ("pid (comm)
// state ppid …"; comm may hold blanks and parentheses, so the fields
// after the last ')' are read).
func parentPID(procRoot string, pid uint32) (uint32, bool) {
	b, err := os.ReadFile(filepath.Join(procDir(procRoot, pid), "stat"))
	if err != nil {
		return 0, false
	}
	return parseStatPPID(b)
}

func parseStatPPID(stat []byte) (uint32, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(stat[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.ParseUint(string(f[1]), 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(pp), true
}
