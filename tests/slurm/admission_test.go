package slurm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/slurmtest"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// deploy/slurm/job_submit.lua in the Slurm test cluster's slurmctld, asking
// a real `gpumeter serve` whose quota lets tenant uni-astro (account astro)
// run 2 GPUs at once: GPU jobs are admitted while they fit, refused with
// the server's reason when they do not, and carry their admission's id;
// jobs without GPUs and jobs of accounts the config does not name are not
// asked about; with the server gone, on_error decides.
func TestJobSubmitPluginAsksAdmission(t *testing.T) {
	cfg := harness.TempFile(t, "gpumeter.yaml", "quotas:\n  refresh: 1s\n  rules:\n    - tenant: uni-astro\n      concurrent_gpus: {limit: 2}\n")
	r := startAdmission(t, cfg, nil)
	c, accept, refuse, dan, writeConf := r.c, r.accept, r.refuse, r.dan, r.writeConf

	first := accept("1 of 2 GPUs", dan("gpu:a100:1"))
	if note := c.Show(t, first)["AdminComment"]; !strings.HasPrefix(note, "gpumeter_admission=") || len(note) <= len("gpumeter_admission=") {
		t.Errorf("job %s: AdminComment %q, want the admission's id", first, note)
	}
	// Both types in one admission: before, one request per type, and the
	// type asked first stayed held when the other was denied, so "the
	// second GPU" below was refused.
	refuse("two types, 1 + 1 more than fit", dan("gpu:a100:1,gpu:h100:1"), "gpumeter: denied: ")
	refuse("2 more GPUs than fit", dan("gpu:h100:2"), "gpumeter: denied: ")
	accept("a CPU job is not asked about", slurmtest.Job{User: slurmtest.UserDan, Script: "sleep 300"})
	accept("an account the config does not name is not asked about", slurmtest.Job{User: slurmtest.UserAda, Gres: "gpu:a100:1", Script: "sleep 300"})
	accept("the second GPU", dan("gpu:1"))
	refuse("a third GPU", dan("gpu:h100:1"), "gpumeter: denied: ")

	r.stopServer()
	refuse("server gone, on_error deny", dan("gpu:h100:1"), "gpumeter: GPU admission is unavailable")
	writeConf("allow")
	accept("server gone, on_error allow", dan("gpu:h100:1"))
}

// A credit_only customer through job_submit.lua: uni-astro has 5 USD of
// prepaid credit, an A100 costs 2.00 USD an hour and the credit horizon is
// an hour, so 2 A100s are admitted and a third is refused with the
// balance, what is held and what it needs; a CPU job is not asked about.
func TestJobSubmitPluginRefusesWhatCreditCannotPay(t *testing.T) {
	book := harness.TempFile(t, "book.yaml", `version: slurm-credit-1
currency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}
skus:
  A100-SXM4-80GB: {meters: {gpu_hours: {unit_price: "2.00"}}}
  H100-SXM5-80GB: {meters: {gpu_hours: {unit_price: "3.00"}}}
`)
	cfg := harness.TempFile(t, "gpumeter.yaml", fmt.Sprintf(`quotas:
  refresh: 1s
credits:
  horizon: 1h
billing:
  issuer: {id: uni, name: University HPC}
  customers:
    - {tenant: uni-astro, name: Astronomy, currency: USD, time_zone: UTC, book: %q, credits: {settlement: credit_only}}
`, book))
	r := startAdmission(t, cfg, func(dsn string) {
		code, out, stderr := harness.Run(t, "--clickhouse", dsn, "--config", cfg, "credits", "grant", "--tenant", "uni-astro",
			"--kind", "prepaid", "--amount", "5", "--source", "slurm credit test")
		if code != 0 {
			t.Fatalf("credits grant: exit %d: %s%s", code, out, stderr)
		}
	})
	// Admission decides once the refresher has read the balance.
	harness.Eventually(t, "the credit balance to be read", 30*time.Second, func() bool {
		return dryRunAllowed(t, r, `{"tenant":"uni-astro","gpu_model":"A100-SXM4-80GB","count":1,"expected_duration":"1h","dry_run":true}`)
	})
	r.accept("2 A100s, 4.00 of 5.00 USD for the hour", r.dan("gpu:a100:2"))
	r.refuse("a third A100", r.dan("gpu:a100:1"),
		"gpumeter: denied: credit_only: balance 5.00 USD, held 4.00 USD by 1 admitted, needed 2.00 USD for 1 GPU-equivalents of A100-SXM4-80GB over the 1h horizon: the balance cannot cover it")
	r.accept("a CPU job is not asked about", slurmtest.Job{User: slurmtest.UserDan, Script: "sleep 300"})
}

// dryRunAllowed posts body to the rig's /v1/admission as its admin key
// and says whether it was allowed.
func dryRunAllowed(t *testing.T, r *admissionRig, body string) bool {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+r.addr+"/v1/admission", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var d struct {
		Allowed bool `json:"allowed"`
	}
	return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&d) == nil && d.Allowed
}

// admissionRig is the Slurm test cluster with job_submit.lua asking a real
// `gpumeter serve` of a config, for jobs of account astro (tenant
// uni-astro).
type admissionRig struct {
	c          *slurmtest.Cluster
	accept     func(what string, j slurmtest.Job) string
	refuse     func(what string, j slurmtest.Job, want string)
	dan        func(gres string) slurmtest.Job
	writeConf  func(onError string)
	stopServer func()
	addr       string // the server's API
	token      string // an admin key's
}

// startAdmission starts the cluster and `gpumeter serve` with the config
// at cfg, after calling before (when given) with the database's DSN, and
// points job_submit.lua at it with on_error deny.
func startAdmission(t *testing.T, cfg string, before func(dsn string)) *admissionRig {
	t.Helper()
	c := slurmtest.Start(t)
	dsn := harness.TestDSN(t)
	if before != nil {
		before(dsn)
	}
	code, token, stderr := harness.Run(t, "--clickhouse", dsn, "keys", "create", "--scope", "admin", "--expires", "1h", "--note", "slurm admission test")
	if code != 0 {
		t.Fatalf("keys create: exit %d: %s", code, stderr)
	}
	addr := harness.FreeAddr(t)
	serve := harness.Start(t, "--clickhouse", dsn, "--config", cfg, "serve", "--plain-http", "--metrics-listen", "127.0.0.1:0", "--audit-queue", t.TempDir(), "--listen", addr)
	stopServer := func() {
		// SIGTERM ends a command as Ctrl-C does (main cancels its context).
		if code := serve.Stop(t, 30*time.Second); code != 0 {
			t.Errorf("serve exit %d: %s", code, serve.Stderr.String())
		}
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stopServer()
		}
	})
	harness.Eventually(t, "serve to be ready", 30*time.Second, func() bool { code, _ := harness.HTTPGet(addr, "/readyz"); return code == 200 })

	// The key goes to a curl config only slurmctld's user reads.
	slurm, err := user.Lookup("slurm")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(slurm.Uid)
	gid, _ := strconv.Atoi(slurm.Gid)
	curlConf := filepath.Join(c.Dir, "etc", "gpumeter-curl.conf")
	if err := os.WriteFile(curlConf, []byte(fmt.Sprintf("header = \"Authorization: Bearer %s\"\n", strings.TrimSpace(token))), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(curlConf, uid, gid); err != nil {
		t.Fatal(err)
	}
	admissionConf := filepath.Join(c.Dir, "etc", "gpumeter-admission.conf")
	writeConf := func(onError string) {
		t.Helper()
		conf := fmt.Sprintf(`return {
  url = "http://%s/v1/admission",
  curl_config = %q,
  timeout_seconds = 2,
  on_error = %q,
  default_duration = "1h",
  accounts = { astro = "uni-astro" },
  unmapped = "skip",
  models = { a100 = "A100-SXM4-80GB", h100 = "H100-SXM5-80GB" },
  untyped_model = "A100-SXM4-80GB",
}
`, addr, curlConf, onError)
		if err := os.WriteFile(admissionConf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeConf("deny")
	t.Cleanup(func() { os.Remove(admissionConf); os.Remove(curlConf) })

	submit := func(j slurmtest.Job) (string, error) {
		args := []string{"--parsable", "--output=/dev/null", "--job-name=gpumeter-admission"}
		if j.Account != "" {
			args = append(args, "--account="+j.Account)
		}
		if j.Gres != "" {
			args = append(args, "--gres="+j.Gres)
		}
		args = append(args, "--time=30", "--wrap="+j.Script)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := c.Run(ctx, j.User, "sbatch", args...)
		id := strings.TrimSpace(string(out))
		if err == nil {
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, _ = c.Run(ctx, "", "scancel", id)
			})
		}
		return id, err
	}
	accept := func(what string, j slurmtest.Job) string {
		t.Helper()
		id, err := submit(j)
		if err != nil {
			t.Fatalf("%s: refused: %v", what, err)
		}
		return id
	}
	refuse := func(what string, j slurmtest.Job, want string) {
		t.Helper()
		id, err := submit(j)
		if err == nil {
			t.Fatalf("%s: accepted as job %s", what, id)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: sbatch said %v; want %q", what, err, want)
		}
	}
	dan := func(gres string) slurmtest.Job {
		return slurmtest.Job{User: slurmtest.UserDan, Gres: gres, Script: "sleep 300"}
	}

	var once sync.Once
	return &admissionRig{c: c, accept: accept, refuse: refuse, dan: dan, writeConf: writeConf, addr: addr, token: strings.TrimSpace(token),
		stopServer: func() { once.Do(func() { stopped = true; stopServer() }) }}
}
