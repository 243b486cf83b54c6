// Package slurmtest gives tests a running one-node Slurm cluster: the one
// scripts/slurm.sh starts on loopback (slurmctld, slurmd, slurmdbd, munged,
// MariaDB), with its accounts, users and simulated GPUs (docs/slurm.md).
//
// Start starts the cluster unless it runs already and leaves it running for
// the next test or package, as the ClickHouse of `make test` is left
// running; `scripts/slurm.sh stop` stops it. When the cluster cannot start
// (not root, no apt-get), the test fails under CI=true and is skipped with
// the reason otherwise.
package slurmtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/sacct"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// The cluster's fixed names (scripts/slurm.sh).
const (
	ClusterName = "gpumeter"
	Node        = "gpunode1"
	// Users, and the accounts they may charge (the first is the default).
	UserAda   = "gpumeter-ada"   // physics
	UserBob   = "gpumeter-bob"   // chemistry
	UserCarol = "gpumeter-carol" // chemistry, physics
	UserDan   = "gpumeter-dan"   // astro (the admission test's own account)
)

// Cluster is the running test cluster.
type Cluster struct {
	Dir       string // state, config and logs
	Conf      string // SLURM_CONF
	Proctrack string // "cgroup" or "linuxproc": how jobs' processes are tracked
	env       []string
}

var (
	once       sync.Once
	shared     *Cluster
	startErr   error
	startTaken time.Duration
)

// Start returns the running cluster, starting it once per test binary.
func Start(t testing.TB) *Cluster {
	t.Helper()
	root := harness.RepoRoot(t)
	once.Do(func() {
		began := time.Now()
		shared, startErr = start(root)
		startTaken = time.Since(began)
	})
	if startErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("slurmtest: the Slurm test cluster is required in CI: %v", startErr)
		}
		t.Skipf("slurmtest: SKIPPED, the Slurm test cluster did not start (fails under CI=true): %v", startErr)
	}
	t.Logf("slurmtest: cluster up (proctrack/%s, SLURM_CONF=%s; start took %s)", shared.Proctrack, shared.Conf, startTaken.Round(time.Millisecond))
	return shared
}

// start runs scripts/slurm.sh of the repository at root.
func start(root string) (*Cluster, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("scripts/slurm.sh must run as root (it runs slurmd and creates users)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "slurm.sh"), "start")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("scripts/slurm.sh start: %w\n%s", err, stderr.String())
	}
	envFile := strings.TrimSpace(string(out))
	b, err := os.ReadFile(envFile)
	if err != nil {
		return nil, fmt.Errorf("scripts/slurm.sh start: env file: %w", err)
	}
	c := &Cluster{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		switch k {
		case "SLURM_CONF":
			c.Conf = v
		case "GPUMETER_SLURM_DIR":
			c.Dir = v
		case "GPUMETER_SLURM_PROCTRACK":
			c.Proctrack = v
		}
	}
	if c.Conf == "" || c.Dir == "" {
		return nil, fmt.Errorf("scripts/slurm.sh start: env file %s lacks SLURM_CONF or GPUMETER_SLURM_DIR", envFile)
	}
	c.env = append(os.Environ(), "SLURM_CONF="+c.Conf, "PATH="+os.Getenv("PATH")+":/usr/sbin", "TZ=UTC")
	return c, nil
}

// Env is the environment Slurm's commands need (SLURM_CONF, TZ=UTC).
func (c *Cluster) Env() []string { return append([]string(nil), c.env...) }

// Run runs a Slurm command (as root, or as user when not empty) and returns
// its standard output.
func (c *Cluster) Run(ctx context.Context, user string, name string, args ...string) ([]byte, error) {
	if user != "" {
		args = append([]string{"-u", user, "--", name}, args...)
		name = "runuser"
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.env
	cmd.Dir = filepath.Join(c.Dir, "jobs")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Job is what to submit.
type Job struct {
	User      string
	Account   string // empty: the user's default
	Partition string // empty: the default (gpu)
	// GPU requests, as sbatch takes them: Gres "gpu:a100:1", GPUsPerNode
	// "h100:2".
	Gres, GPUsPerNode string
	Script            string // the batch script's body (after #!/bin/sh)
}

// Submit submits a batch job and returns its id.
func (c *Cluster) Submit(t testing.TB, j Job) string {
	t.Helper()
	args := []string{"--parsable", "--output=/dev/null", "--job-name=gpumeter-test"}
	if j.Account != "" {
		args = append(args, "--account="+j.Account)
	}
	if j.Partition != "" {
		args = append(args, "--partition="+j.Partition)
	}
	if j.Gres != "" {
		args = append(args, "--gres="+j.Gres)
	}
	if j.GPUsPerNode != "" {
		args = append(args, "--gpus-per-node="+j.GPUsPerNode)
	}
	args = append(args, "--wrap="+j.Script)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.Run(ctx, j.User, "sbatch", args...)
	if err != nil {
		t.Fatalf("slurmtest: submit: %v", err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		t.Fatalf("slurmtest: sbatch printed %q, not a job id", out)
	}
	t.Cleanup(func() { c.cancel(id) })
	return id
}

func (c *Cluster) cancel(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = c.Run(ctx, "", "scancel", id)
}

// Cancel cancels a job.
func (c *Cluster) Cancel(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Run(ctx, "", "scancel", id); err != nil {
		t.Fatalf("slurmtest: %v", err)
	}
}

// Show returns `scontrol show job -d -o ID` as key=value fields.
func (c *Cluster) Show(t testing.TB, id string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Run(ctx, "", "scontrol", "show", "job", "-d", "-o", id)
	if err != nil {
		t.Fatalf("slurmtest: %v", err)
	}
	return parseShow(string(out))
}

// parseShow splits scontrol's one-line output into fields. Values hold no
// blanks except Command= and WorkDir= paths, which the tests do not read.
func parseShow(s string) map[string]string {
	fields := map[string]string{}
	for _, f := range strings.Fields(s) {
		if k, v, ok := strings.Cut(f, "="); ok {
			if _, dup := fields[k]; !dup {
				fields[k] = v
			}
		}
	}
	return fields
}

// Eventually polls cond every 100 ms until it returns true or a minute
// passes, then fails with what it last said.
func Eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slurmtest: %s: not within a minute; last: %s", what, last)
		}
		<-tick.C
	}
}

// WaitRunning waits until the job runs and its batch step's processes are
// up (listed by scontrol listpids), and returns the job's fields.
func (c *Cluster) WaitRunning(t testing.TB, id string, procs int) map[string]string {
	t.Helper()
	var job map[string]string
	Eventually(t, "job "+id+" running", func() (bool, string) {
		job = c.Show(t, id)
		if job["JobState"] != "RUNNING" {
			return false, "JobState=" + job["JobState"] + " Reason=" + job["Reason"]
		}
		pids := c.PIDs(t, id)
		return len(pids) >= procs, fmt.Sprintf("%d of %d processes", len(pids), procs)
	})
	return job
}

// PIDs lists a job's processes (scontrol listpids), in the order listed.
func (c *Cluster) PIDs(t testing.TB, id string) []uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Run(ctx, "", "scontrol", "listpids", id)
	if err != nil {
		// A job whose step has not started yet has no pids to list.
		return nil
	}
	var pids []uint32
	for i, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 2 || f[1] != id {
			continue
		}
		if pid, err := strconv.ParseUint(f[0], 10, 32); err == nil {
			pids = append(pids, uint32(pid))
		}
	}
	return pids
}

// WaitAccounted waits until sacct reports every job ended (an end time and
// a final state), and returns `sacct --parsable2` output for them with the
// fields the import reads.
func (c *Cluster) WaitAccounted(t testing.TB, ids ...string) []byte {
	t.Helper()
	var out []byte
	Eventually(t, "jobs "+strings.Join(ids, ",")+" in accounting", func() (bool, string) {
		var err error
		out, err = c.Sacct(ids...)
		if err != nil {
			return false, err.Error()
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		col := map[string]int{}
		for i, h := range strings.Split(lines[0], "|") {
			col[h] = i
		}
		ended := 0
		for _, line := range lines[1:] {
			f := strings.Split(line, "|")
			if len(f) != len(col) {
				continue
			}
			end, state := f[col["End"]], f[col["State"]]
			if end != "" && end != "Unknown" && state != "RUNNING" && state != "PENDING" {
				ended++
			}
		}
		return ended == len(ids), fmt.Sprintf("%d of %d ended:\n%s", ended, len(ids), out)
	})
	return out
}

// SacctFormat is the field list the import documents (docs/slurm.md).
const SacctFormat = sacct.Format

// Sacct runs `sacct --parsable2` for the given jobs, every user, jobs only
// (no steps), in UTC.
func (c *Cluster) Sacct(ids ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Run(ctx, "", "sacct", "--allusers", "--parsable2", "--allocations",
		"--format="+SacctFormat, "--jobs="+strings.Join(ids, ","))
}
