package deploy

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/tests/harness"
	"go.yaml.in/yaml/v3"
)

// composeService is the part of a service of `docker-compose config`'s
// normalized output that the test checks.
type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Entrypoint  any               `yaml:"entrypoint"`
	Command     any               `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Volumes []string `yaml:"volumes"`
}

// composeConfig validates docker-compose.yaml with docker-compose itself
// (`config` parses, checks and normalizes the file; it needs no Docker
// daemon) and returns its services as docker-compose resolved them.
func composeConfig(t *testing.T) map[string]composeService {
	t.Helper()
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Fatalf("docker-compose not found: run scripts/compose.sh install (make test does): %v", err)
	}
	cmd := exec.Command(bin, "--file", harness.RepoFile(t, "docker-compose.yaml"), "--project-directory", harness.RepoFile(t, "."), "config")
	// Only what docker-compose needs: no COMPOSE_* or variables from the
	// caller's shell shape the result.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("docker-compose config: %v\n%s", err, stderr)
	}
	var doc struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("docker-compose config output: %v\n%s", err, out)
	}
	if len(doc.Services) == 0 {
		t.Fatalf("docker-compose config lists no services:\n%s", out)
	}
	return doc.Services
}

// composeWords is a command or health-check test as a list of words.
func composeWords(t *testing.T, where string, v any) []string {
	t.Helper()
	switch c := v.(type) {
	case nil:
		return nil
	case string:
		if strings.ContainsAny(c, `"'\$`) {
			t.Errorf("%s: %q: quoting in a string command is not checked here; write a list", where, c)
		}
		return strings.Fields(c)
	case []any:
		out := make([]string, len(c))
		for i, w := range c {
			s, ok := w.(string)
			if !ok {
				t.Errorf("%s: word %d is %T", where, i, w)
			}
			out[i] = s
		}
		return out
	}
	t.Errorf("%s: %T", where, v)
	return nil
}

var composeLTSRE = regexp.MustCompile(`^clickhouse/clickhouse-server:([0-9]+)\.([0-9]+)$`)

// docker-compose.yaml passes `docker-compose config`; ClickHouse is a
// current LTS release; every gpumeter service runs a command the CLI
// accepts, against the compose ClickHouse with its credentials; migrate
// runs once after ClickHouse is healthy and the server and the collector
// start after it succeeded; and each long-running service's health check
// asks /readyz on the port it listens on.
func TestComposeFile(t *testing.T) {
	services := composeConfig(t)
	ch, ok := services["clickhouse"]
	if !ok {
		t.Fatal("no clickhouse service")
	}
	m := composeLTSRE.FindStringSubmatch(ch.Image)
	if m == nil {
		t.Fatalf("clickhouse image %q: want clickhouse/clickhouse-server:YY.M", ch.Image)
	}
	year, _ := strconv.Atoi(m[1])
	month, _ := strconv.Atoi(m[2])
	// LTS releases are the .3 and .8 of each year; 24.8 is the oldest
	// line production supports (DESIGN.md).
	if (month != 3 && month != 8) || year*100+month < 2408 {
		t.Errorf("clickhouse image %s: not an LTS release of 24.8 or newer", ch.Image)
	}
	if ch.Healthcheck == nil || len(ch.Healthcheck.Test) == 0 {
		t.Error("clickhouse has no health check, which migrate's service_healthy waits for")
	}
	wantDSN := (&url.URL{Scheme: "clickhouse", User: url.UserPassword(ch.Environment["CLICKHOUSE_USER"], ch.Environment["CLICKHOUSE_PASSWORD"]),
		Host: "clickhouse:9000", Path: "/" + ch.Environment["CLICKHOUSE_DB"]}).String()

	byCommand := map[string]string{}
	for name, s := range services {
		where := "docker-compose.yaml service " + name
		for dep, d := range s.DependsOn {
			target, ok := services[dep]
			switch {
			case !ok:
				t.Errorf("%s: depends on %s, which is not a service", where, dep)
			case d.Condition == "service_healthy" && (target.Healthcheck == nil || len(target.Healthcheck.Test) == 0):
				t.Errorf("%s: waits for %s to be healthy, which has no health check", where, dep)
			case d.Condition != "service_healthy" && d.Condition != "service_completed_successfully":
				t.Errorf("%s: depends on %s with condition %q; want service_healthy or service_completed_successfully", where, dep, d.Condition)
			}
		}
		if s.Build == nil {
			continue // an image of its own (ClickHouse)
		}
		if s.Entrypoint != nil {
			t.Errorf("%s: overrides the image's entrypoint (gpumeter)", where)
		}
		args := composeWords(t, where, s.Command)
		if dsn := s.Environment["GPUMETER_CLICKHOUSE"]; dsn != wantDSN {
			t.Errorf("%s: GPUMETER_CLICKHOUSE=%q; want %q (the clickhouse service and its credentials)", where, dsn, wantDSN)
		}
		inv := checkDeployCommand(t, where, args)
		if prev, dup := byCommand[inv.command]; dup {
			t.Errorf("%s and %s both run %s", where, prev, inv.command)
		}
		byCommand[inv.command] = name
		switch inv.command {
		case "migrate":
			if d, ok := s.DependsOn["clickhouse"]; !ok || d.Condition != "service_healthy" {
				t.Errorf("%s: migrate must wait for clickhouse to be healthy", where)
			}
			if s.Healthcheck != nil {
				t.Errorf("%s: a one-shot service needs no health check", where)
			}
		case "serve", "collect":
			var listen string
			if inv.command == "serve" {
				listen, _ = flagValue(inv.cmdArgs, "listen")
				if listen == "" {
					listen = inv.cfg.Server.Listen
				}
			} else {
				listen = inv.collect.listen
				if !inv.collect.simulate {
					t.Errorf("%s: the compose collector must be the simulated fleet (no GPU in compose)", where)
				}
				spool := inv.collect.spoolDir
				var onVolume bool
				for _, v := range s.Volumes {
					if parts := strings.Split(v, ":"); len(parts) >= 2 && within(spool, parts[1]) {
						onVolume = true
					}
				}
				if spool == "" || !onVolume {
					t.Errorf("%s: spool %q is on no volume: a restart would lose what is not shipped yet", where, spool)
				}
			}
			if host, _, _ := net.SplitHostPort(listen); host == "127.0.0.1" || host == "localhost" {
				t.Errorf("%s: listens on %s, loopback inside its container", where, listen)
			}
			checkComposeHealthcheck(t, where, s, listenPort(t, where, listen))
		}
	}
	for _, cmd := range []string{"migrate", "serve", "collect"} {
		name, ok := byCommand[cmd]
		if !ok {
			t.Errorf("no service runs gpumeter %s", cmd)
			continue
		}
		if cmd == "migrate" {
			continue
		}
		if d, ok := services[name].DependsOn[byCommand["migrate"]]; !ok || d.Condition != "service_completed_successfully" {
			t.Errorf("service %s must start after migrate completed successfully", name)
		}
	}
}

var composeTCPRE = regexp.MustCompile(`/dev/tcp/127\.0\.0\.1/([0-9]+)`)

// checkComposeHealthcheck runs a service's health check (bash speaking
// HTTP through /dev/tcp, the image has no curl) against a stand-in server
// on this machine: it must pass when /readyz answers 200 and fail when it
// answers 503, and it must knock on the port the service listens on.
func checkComposeHealthcheck(t *testing.T, where string, s composeService, port int32) {
	t.Helper()
	if s.Healthcheck == nil {
		t.Errorf("%s: no health check", where)
		return
	}
	test := s.Healthcheck.Test
	if len(test) != 4 || test[0] != "CMD" || test[1] != "bash" || test[2] != "-c" {
		t.Errorf("%s: health check %q: want [CMD bash -c SCRIPT]", where, test)
		return
	}
	m := composeTCPRE.FindStringSubmatch(test[3])
	if m == nil || m[1] != strconv.Itoa(int(port)) || !strings.Contains(test[3], "GET /readyz ") {
		t.Errorf("%s: health check %q does not ask /readyz on port %d", where, test[3], port)
		return
	}
	for _, status := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/readyz" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(status)
		}))
		_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
		script := composeTCPRE.ReplaceAllString(test[3], "/dev/tcp/127.0.0.1/"+p)
		err := exec.Command("bash", "-c", script).Run()
		srv.Close()
		if (err == nil) != (status == http.StatusOK) {
			t.Errorf("%s: health check against /readyz answering %d: %v", where, status, fmt.Sprint(err))
		}
	}
}
