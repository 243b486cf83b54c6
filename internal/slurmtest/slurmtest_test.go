package slurmtest

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/sacct"
)

func TestParseShow(t *testing.T) {
	got := parseShow("JobId=7 JobName=wrap UserId=gpumeter-ada(999) Account=physics JobState=RUNNING Reason=None TRES=cpu=1,node=1,billing=1,gres/gpu=1 JobState=X\n")
	for k, want := range map[string]string{"JobId": "7", "Account": "physics", "JobState": "RUNNING", "TRES": "cpu=1,node=1,billing=1,gres/gpu=1", "UserId": "gpumeter-ada(999)"} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
}

// The harness itself: a job submitted as a test user runs under the
// account asked for, its processes are listed, and accounting records it
// with its GPUs once it ends.
func TestClusterRunsAndAccountsAJob(t *testing.T) {
	c := Start(t)
	id := c.Submit(t, Job{User: UserCarol, Account: "physics", Partition: "debug", Gres: "gpu:h100:1", Script: "sleep 300"})
	job := c.WaitRunning(t, id, 1)
	if job["Account"] != "physics" || job["Partition"] != "debug" || !strings.HasPrefix(job["UserId"], UserCarol+"(") {
		t.Fatalf("job fields: account %q partition %q user %q", job["Account"], job["Partition"], job["UserId"])
	}
	for _, pid := range c.PIDs(t, id) {
		if _, err := os.Stat("/proc/" + strconv.FormatUint(uint64(pid), 10)); err != nil {
			t.Fatalf("listed pid %d: %v", pid, err)
		}
	}
	c.Cancel(t, id)
	out := string(c.WaitAccounted(t, id))
	if !strings.Contains(out, "|gres/gpu:h100=1") && !strings.Contains(out, ",gres/gpu:h100=1") {
		t.Fatalf("sacct lacks the typed GPU in AllocTRES:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Run(ctx, UserAda, "sbatch", "--account=chemistry", "--wrap=true"); err == nil {
		t.Fatal("ada may charge chemistry: the harness's associations are not enforced")
	}
}

// The account hierarchy as the cluster's sacctmgr prints it parses, and
// every account the harness made is in it (chargeback --slurm-accounts).
func TestSacctmgrHierarchyParses(t *testing.T) {
	c := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Run(ctx, "", "sacctmgr", "--parsable2", "show", "assoc", "format=Account,ParentName,User,Cluster")
	if err != nil {
		t.Fatal(err)
	}
	acc, err := sacct.ParseAccounts(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, a := range []string{"physics", "chemistry", "astro"} {
		if d, ok := acc.Ancestor(a, 1); !ok || d != a {
			t.Errorf("account %s: top-level ancestor %q, %v; want itself (the harness puts it under root)\n%s", a, d, ok, out)
		}
	}
}
