package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/cmd/gpumeter/config"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// The deployment files (deploy/kubernetes, deploy/systemd,
// docker-compose.yaml) each run gpumeter with a command line of their own.
// deployInvocation is one such command line as the CLI reads it, checked
// by checkDeployCommand against the gpumeter binary.
type deployInvocation struct {
	command string   // the subcommand
	cmdArgs []string // the line without the command's name
	cfg     config.Config
	collect collectLine // set when command is collect
}

// collectLine is what a collect command line sets: the flags it gives, and
// for the others collect's defaults as its --help states them.
type collectLine struct {
	listen, sink, host, spoolDir, kubeletSocket, podLogDir, procRoot, mapFile, podsURL, podsTokenFile, nodeName string
	simulate                                                                                                    bool
}

// recorder collects what a check reports instead of failing the test, so
// that a test can see a check fail; what breaks the check itself (the
// binary does not build) still fails the test.
type recorder struct {
	*testing.T
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// deployUnreachableDSN is a ClickHouse that refuses connections at once: a
// command run against it gets past every input check and fails when it
// dials (exit 1), while bad input fails before (exit 2).
const deployUnreachableDSN = "clickhouse://127.0.0.1:1/gpumeter?dial_timeout=200ms"

// globalFlags are the root's flags, which take a value each.
var globalFlags = map[string]bool{"config": true, "clickhouse": true, "log-level": true}

// checkDeployCommand holds a deployment file's gpumeter command line to
// the CLI, run as the built binary:
//   - run with --help appended, it prints the command's help and exits 0,
//     so the command exists and every flag, global or its own, is one it
//     defines, with a value of the flag's type (durations, numbers,
//     booleans);
//   - then the command's input is checked as the command checks it, by
//     running it against deployUnreachableDSN: serve and migrate must get
//     as far as dialling ClickHouse (exit 1, not 2); collect must take its
//     input (exit 0 or 1, never 2: every rule it has on flag combinations),
//     run for a second of its own time with its spool in a temporary
//     directory, no listener, and a second to drain.
//
// Paths the line names must exist on this machine (the caller rewrites
// them to copies of the deployed files), since the config file is loaded.
func checkDeployCommand(t testing.TB, where string, args []string) deployInvocation {
	t.Helper()
	var inv deployInvocation
	help := append(slices.Clone(args), "--help")
	code, stdout, stderr := harness.Run(t, help...)
	if code != 0 {
		t.Errorf("%s: %q: exit %d: %s", where, args, code, strings.TrimSpace(stderr))
		return inv
	}
	// The command is the first word that is no global flag or its value.
	at := -1
	for i := 0; i < len(args) && at < 0; i++ {
		name, _, hasValue := strings.Cut(strings.TrimPrefix(args[i], "--"), "=")
		switch {
		case strings.HasPrefix(args[i], "--") && globalFlags[name] && !hasValue:
			i++
		case !strings.HasPrefix(args[i], "-"):
			at = i
		}
	}
	if at < 0 {
		t.Errorf("%s: %q names no command", where, args)
		return inv
	}
	inv.command = args[at]
	inv.cmdArgs = slices.Delete(slices.Clone(args), at, at+1)
	if !strings.Contains(stdout, "Usage:\n  gpumeter "+inv.command) {
		t.Errorf("%s: gpumeter %s: want the help of %q:\n%s%s", where, strings.Join(help, " "), inv.command, stdout, stderr)
		return inv
	}

	path, ok := flagValue(args, "config")
	if !ok {
		path = config.FromEnv(os.Getenv).ConfigPath
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return inv
	}
	inv.cfg = cfg
	dry := append(slices.Clone(args), "--clickhouse", deployUnreachableDSN)
	switch inv.command {
	case "collect":
		dry = append(dry, "--spool", t.TempDir(), "--listen=", "--duration", "1s", "--drain-timeout", "1s")
		if code, _, stderr := harness.Run(t, dry...); code != 0 && code != 1 {
			t.Errorf("%s: gpumeter %s: exit %d; want 0 or 1 (2 is bad input):\n%s", where, strings.Join(dry, " "), code, stderr)
		}
		inv.collect = readCollectLine(t, inv.cmdArgs)
	case "serve", "migrate":
		code, _, stderr := harness.Run(t, dry...)
		if code != 1 || !strings.Contains(stderr, "127.0.0.1:1") {
			t.Errorf("%s: gpumeter %s: exit %d; want 1 from dialling the unreachable ClickHouse (2 is bad input):\n%s", where, strings.Join(dry, " "), code, stderr)
		}
	default:
		t.Errorf("%s: no input check for command %q here: add one to checkDeployCommand", where, inv.command)
	}
	return inv
}

var (
	// flagLineRE is a flag's line in a command's help: name, type (none
	// for a boolean) and usage.
	flagLineRE = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)(?: ([a-z0-9]+))?\s{2,}(.*)$`)
	// defaultRE is the default pflag appends to a string flag's usage.
	defaultRE = regexp.MustCompile(`\(default "(.*)"\)$`)
)

// readCollectLine reads what a collect command line sets, defaults from
// collect's own --help.
func readCollectLine(t testing.TB, args []string) collectLine {
	t.Helper()
	code, help, stderr := harness.Run(t, "collect", "--help")
	if code != 0 {
		t.Fatalf("collect --help: exit %d: %s", code, stderr)
	}
	defaults := map[string]string{}
	for _, line := range strings.Split(help, "\n") {
		m := flagLineRE.FindStringSubmatch(line)
		switch {
		case m == nil:
		case m[2] == "":
			defaults[m[1]] = strconv.FormatBool(strings.HasSuffix(m[3], "(default true)"))
		case m[2] == "string":
			if d := defaultRE.FindStringSubmatch(m[3]); d != nil {
				defaults[m[1]] = d[1]
			}
		}
	}
	get := func(name string) string {
		if _, known := defaults[name]; !known && !strings.Contains(help, "--"+name+" ") {
			t.Fatalf("collect --help lists no --%s", name)
		}
		if v, ok := flagValue(args, name); ok {
			return v
		}
		return defaults[name]
	}
	// A boolean flag takes no separate value: --simulate or --simulate=false.
	simulate := defaults["simulate"] == "true"
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--simulate"); ok && (v == "" || v[0] == '=') {
			simulate = v == "" || v == "=true"
		}
	}
	return collectLine{listen: get("listen"), sink: get("sink"), host: get("host"), spoolDir: get("spool"),
		kubeletSocket: get("kubelet-socket"), podLogDir: get("pod-log-dir"), procRoot: get("proc-root"), mapFile: get("map-file"),
		podsURL: get("kubelet-pods-url"), podsTokenFile: get("kubelet-token-file"), nodeName: get("node-name"), simulate: simulate}
}

// flagValue returns the value of the last --name (as --name=value or
// followed by the value) in args, and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	var v string
	var found bool
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		n, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || n != name {
			continue
		}
		found = true
		if hasValue {
			v = value
		} else if i+1 < len(args) {
			i++
			v = args[i]
		}
	}
	return v, found
}

// listenPort is the port of a host:port listen address.
func listenPort(t testing.TB, where, addr string) int32 {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	p, err := strconv.ParseInt(addr[i+1:], 10, 32)
	if i < 0 || err != nil || p <= 0 {
		t.Errorf("%s: listen address %q has no port", where, addr)
		return -1
	}
	return int32(p)
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// dockerfileStage is one FROM … of the Dockerfile with its instructions.
type dockerfileStage struct {
	from, name   string
	instructions []string // "RUN …", "USER …", with continuation lines joined
}

func parseDockerfile(t *testing.T, path string) []dockerfileStage {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages []dockerfileStage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		op, rest, _ := strings.Cut(line, " ")
		if strings.EqualFold(op, "FROM") {
			f := strings.Fields(rest)
			st := dockerfileStage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			return
		}
		if len(stages) == 0 {
			t.Fatalf("%s: %q before the first FROM", path, line)
		}
		stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, strings.ToUpper(op)+" "+strings.TrimSpace(rest))
	}
	for _, l := range strings.Split(string(data), "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\") + " ")
			continue
		}
		cur.WriteString(l)
		flush()
	}
	flush()
	return stages
}

var dockerUserRE = regexp.MustCompile(`^USER ([0-9]+)(?::([0-9]+))?$`)

// imageUID is the numeric uid the runtime image runs as.
func imageUID(t *testing.T) int64 {
	t.Helper()
	stages := parseDockerfile(t, harness.RepoFile(t, "Dockerfile"))
	var uid int64 = -1
	for _, in := range stages[len(stages)-1].instructions {
		if m := dockerUserRE.FindStringSubmatch(in); m != nil {
			uid, _ = strconv.ParseInt(m[1], 10, 64)
		} else if strings.HasPrefix(in, "USER ") {
			t.Errorf("Dockerfile: %q: want a numeric uid (Kubernetes' runAsNonRoot cannot check a name)", in)
		}
	}
	return uid
}

// The image is built in a cgo stage and run from a small one as a non-root
// user, with gpumeter as its entrypoint (which compose and the Kubernetes
// manifests rely on: their commands are gpumeter's arguments).
func TestDeployDockerfile(t *testing.T) {
	stages := parseDockerfile(t, harness.RepoFile(t, "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stage(s); want a build stage and a runtime stage", len(stages))
	}
	build, runtime := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.from, "golang:") || build.name == "" {
		t.Errorf("build stage FROM %s AS %q: want a named golang stage", build.from, build.name)
	}
	var cgo bool
	for _, in := range build.instructions {
		if strings.HasPrefix(in, "RUN ") && strings.Contains(in, "CGO_ENABLED=1") && strings.Contains(in, "go build") {
			cgo = true
		}
	}
	if !cgo {
		t.Errorf("build stage: no RUN with CGO_ENABLED=1 go build (go-nvml needs cgo)")
	}
	if strings.HasPrefix(runtime.from, "golang:") {
		t.Errorf("runtime stage FROM %s: the toolchain image is not a runtime image", runtime.from)
	}
	var copied, entry bool
	for _, in := range runtime.instructions {
		if strings.HasPrefix(in, "COPY --from="+build.name+" ") && strings.HasSuffix(in, " /usr/local/bin/gpumeter") {
			copied = true
		}
		if in == `ENTRYPOINT ["/usr/local/bin/gpumeter"]` {
			entry = true
		}
	}
	if !copied || !entry {
		t.Errorf("runtime stage: binary copied from %q to /usr/local/bin/gpumeter %v, ENTRYPOINT [\"/usr/local/bin/gpumeter\"] %v", build.name, copied, entry)
	}
	if uid := imageUID(t); uid <= 0 {
		t.Errorf("runtime stage runs as uid %d; want a numeric non-root USER", uid)
	}
	ignore, err := os.ReadFile(harness.RepoFile(t, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".git", ".data"} {
		if !strings.Contains("\n"+string(ignore)+"\n", "\n"+p+"\n") {
			t.Errorf(".dockerignore does not leave out %s (COPY . . would send it to the build)", p)
		}
	}
}

// The checks above must be able to fail: a flag the command lacks, a
// subcommand that does not exist, a value collect refuses, and a serve
// whose listen address is bad are each reported.
func TestDeployCommandCheckFails(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"collect", "--spool-dir", "/var/lib/gpumeter/spool"}, "unknown flag: --spool-dir"},
		{[]string{"collects", "--simulate"}, `unknown command "collects"`},
		{[]string{"collect", "--simulate", "--map-file", "/etc/gpumeter/map", "--duration", "1h"}, "the simulated fleet brings its own map"},
		{[]string{"collect", "--interval", "ten"}, `invalid argument "ten" for "--interval"`},
		{[]string{"serve", "--listen", "8080"}, "server.listen"},
		{[]string{"--config", "/nonexistent/gpumeter.yaml", "migrate"}, "/nonexistent/gpumeter.yaml"},
		{[]string{"migrate", "extra"}, `unexpected argument "extra"`},
		{[]string{"--log-level", "debug"}, "names no command"},
	} {
		r := recorder{T: t}
		checkDeployCommand(&r, "case", tc.args)
		if got := strings.Join(r.errs, "\n"); !strings.Contains(got, tc.want) {
			t.Errorf("checkDeployCommand %q reported %q; want it to mention %q", tc.args, got, tc.want)
		}
	}
}
