package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/config"
)

// The deployment files (deploy/kubernetes, deploy/systemd,
// docker-compose.yaml) each run gpumeter with a command line of their own.
// deployInvocation is one such command line as the CLI reads it, checked
// by checkDeployCommand.
type deployInvocation struct {
	command string   // the subcommand
	cmdArgs []string // its arguments, global flags taken out
	cfg     config.Config
	collect collectFlags // set when command is collect
}

// reporter is the part of *testing.T the checks use, so that a test can
// record what they report about a bad input instead of failing.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// recorder collects what a check reports.
type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// deployUnreachableDSN is a ClickHouse that refuses connections at once: a
// command run against it gets past every input check and fails when it
// dials (exit 1), while bad input fails before (exit 2).
const deployUnreachableDSN = "clickhouse://127.0.0.1:1/gpumeter?dial_timeout=200ms"

// checkDeployCommand holds a deployment file's gpumeter command line to
// the CLI:
//   - the command exists, and every flag, global or its own, is one it
//     defines, with a value of the flag's type (durations, numbers,
//     booleans); no stray argument is left;
//   - run with --help appended, it prints the command's help and exits 0;
//   - then the command's input is checked as the command checks it:
//     collect through parseCollectFlags (every rule it has on flag
//     combinations), serve and migrate by running them against
//     deployUnreachableDSN, where they must get as far as dialling
//     ClickHouse (exit 1, not 2).
//
// Paths the line names must exist on this machine (the caller rewrites
// them to copies of the deployed files), since the config file is loaded.
func checkDeployCommand(t reporter, where string, args []string) deployInvocation {
	t.Helper()
	var inv deployInvocation
	g := &globals{stdout: io.Discard, stderr: io.Discard, cfg: config.Default()}
	root := newRootCmd(g)
	cmd, rest, err := root.Find(args)
	if err == nil {
		if err = cmd.ParseFlags(rest); err != nil {
			err = flagError(cmd, err)
		}
	}
	if err == nil && cmd.Args != nil {
		err = cmd.Args(cmd, cmd.Flags().Args())
	}
	if err != nil {
		t.Errorf("%s: %q: %v", where, args, err)
		return inv
	}
	if cmd == root {
		t.Errorf("%s: %q names no command", where, args)
		return inv
	}
	inv.command = strings.TrimPrefix(cmd.CommandPath(), "gpumeter ")
	inv.cmdArgs = rest

	help := append(append([]string(nil), args...), "--help")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), help, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "Usage:\n  gpumeter "+inv.command) {
		t.Errorf("%s: gpumeter %s: exit %d; want 0 and the help of %q:\n%s%s", where, strings.Join(help, " "), code, inv.command, stdout.String(), stderr.String())
		return inv
	}

	cfg, err := config.Load(g.configPath)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return inv
	}
	inv.cfg = cfg
	switch inv.command {
	case "collect":
		f, err := parseCollectFlags(&globals{cfg: cfg}, rest)
		if err != nil {
			t.Errorf("%s: collect %q: %v", where, rest, err)
		}
		inv.collect = f
	case "serve", "migrate":
		dry := append(append([]string(nil), args...), "--clickhouse", deployUnreachableDSN)
		stdout.Reset()
		stderr.Reset()
		code := run(context.Background(), dry, &stdout, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), "127.0.0.1:1") {
			t.Errorf("%s: gpumeter %s: exit %d; want 1 from dialling the unreachable ClickHouse (2 is bad input):\n%s", where, strings.Join(dry, " "), code, stderr.String())
		}
	default:
		t.Errorf("%s: no input check for command %q here: add one to checkDeployCommand", where, inv.command)
	}
	return inv
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
func listenPort(t reporter, where, addr string) int32 {
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
	stages := parseDockerfile(t, repoFile(t, "Dockerfile"))
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
	stages := parseDockerfile(t, repoFile(t, "Dockerfile"))
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
	ignore, err := os.ReadFile(repoFile(t, ".dockerignore"))
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
		var r recorder
		checkDeployCommand(&r, "case", tc.args)
		if got := strings.Join(r.errs, "\n"); !strings.Contains(got, tc.want) {
			t.Errorf("checkDeployCommand %q reported %q; want it to mention %q", tc.args, got, tc.want)
		}
	}
}
