package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/server/tlstest"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// systemdUnit is a unit file: section → key → values in file order (a key
// such as SystemCallFilter= may be given more than once).
type systemdUnit map[string]map[string][]string

func parseSystemdUnit(t *testing.T, path string) systemdUnit {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := systemdUnit{}
	section := ""
	var cont string
	for n, line := range strings.Split(string(data), "\n") {
		line = cont + strings.TrimSpace(line)
		cont = ""
		if strings.HasSuffix(line, "\\") {
			cont = strings.TrimSuffix(line, "\\") + " "
			continue
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q is not key=value in a section", path, n+1, line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return u
}

// last is the value that counts for a key given once or more.
func (u systemdUnit) last(section, key string) (string, bool) {
	v := u[section][key]
	if len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

// systemdExecStart splits ExecStart= into words. The units use no
// quoting, no prefixes, no $VARIABLE and no %specifier, so the command
// line the test checks is exactly the one systemd runs.
func systemdExecStart(t *testing.T, name string, u systemdUnit) []string {
	t.Helper()
	execs := u["Service"]["ExecStart"]
	if len(execs) != 1 {
		t.Fatalf("%s: %d ExecStart= lines; want 1", name, len(execs))
	}
	// %d, the credentials' directory, is the one specifier the caller
	// expands (systemdCredentials).
	if strings.ContainsAny(strings.ReplaceAll(execs[0], "%d/", ""), `"'$%\`) || strings.ContainsAny(execs[0][:1], "-@+!:") {
		t.Fatalf("%s: ExecStart=%s: quoting, prefixes, variables and specifiers are not checked here", name, execs[0])
	}
	return strings.Fields(execs[0])
}

// systemdUnits are the unit files of deploy/systemd by name.
// systemdCredentials writes stand-ins for the unit's LoadCredential=
// files, which must be under /etc/gpumeter/: a TLS pair made here, the
// key for an id ending in .key, the certificate otherwise. It returns
// each id's stand-in file.
func systemdCredentials(t *testing.T, u systemdUnit) map[string]string {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile := tlstest.NewCA(t, "stand-in CA").Server(t, "gpumeter.example.com").Write(t, dir, "pair")
	creds := map[string]string{}
	for _, lc := range u["Service"]["LoadCredential"] {
		id, src, ok := strings.Cut(lc, ":")
		if !ok || !within(src, "/etc/gpumeter") {
			t.Errorf("LoadCredential=%s: want ID:/etc/gpumeter/...", lc)
			continue
		}
		creds[id] = certFile
		if strings.HasSuffix(id, ".key") {
			creds[id] = keyFile
		}
	}
	return creds
}

var systemdUnits = []string{"gpumeter-collector.service", "gpumeter-server.service"}

// The units run commands the CLI accepts, with the hardening each says it
// has: both read-only on the file system, without new privileges, homes or
// a shared /tmp, restricted to the socket families they use and restarted
// on failure; the collector as root with only the capabilities its /proc
// and GPM reads need and its spool under its StateDirectory; the server as
// a dynamic user with no capability at all.
func TestSystemdUnits(t *testing.T) {
	for _, name := range systemdUnits {
		t.Run(name, func(t *testing.T) {
			u := parseSystemdUnit(t, harness.RepoFile(t, "deploy/systemd/"+name))
			for key, want := range map[string]string{
				"ProtectSystem":   "strict",
				"NoNewPrivileges": "yes",
				"ProtectHome":     "yes",
				"PrivateTmp":      "yes",
				"Restart":         "on-failure",
				"Type":            "simple",
			} {
				if got, _ := u.last("Service", key); got != want {
					t.Errorf("%s=%q; want %q", key, got, want)
				}
			}
			if env, _ := u.last("Service", "EnvironmentFile"); strings.TrimPrefix(env, "-") != "/etc/gpumeter/gpumeter.env" {
				t.Errorf("EnvironmentFile=%q; want /etc/gpumeter/gpumeter.env (the DSN's password stays out of the unit)", env)
			}
			fams, ok := u.last("Service", "RestrictAddressFamilies")
			if !ok || fams == "" || strings.HasPrefix(fams, "~") {
				t.Errorf("RestrictAddressFamilies=%q; want an allow list", fams)
			}
			for _, f := range strings.Fields(fams) {
				if !slices.Contains([]string{"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}, f) {
					t.Errorf("RestrictAddressFamilies allows %s, which gpumeter does not use", f)
				}
			}
			caps, ok := u.last("Service", "CapabilityBoundingSet")
			if !ok {
				t.Error("no CapabilityBoundingSet=")
			}
			if wanted, _ := u.last("Install", "WantedBy"); wanted != "multi-user.target" {
				t.Errorf("WantedBy=%q", wanted)
			}

			argv := systemdExecStart(t, name, u)
			if argv[0] != "/usr/local/bin/gpumeter" {
				t.Errorf("ExecStart runs %s; want /usr/local/bin/gpumeter", argv[0])
			}
			// The config the unit names is the example beside it; the
			// credentials are stand-ins in a directory of their own.
			creds := systemdCredentials(t, u)
			args := slices.Clone(argv[1:])
			for i, a := range args {
				if strings.HasPrefix(a, "/etc/gpumeter/") {
					args[i] = harness.RepoFile(t, "deploy/systemd/"+strings.TrimPrefix(a, "/etc/gpumeter/"))
				}
				if id, ok := strings.CutPrefix(a, "%d/"); ok {
					if _, loaded := creds[id]; !loaded {
						t.Errorf("ExecStart names credential %s, which no LoadCredential= loads", id)
					}
					args[i] = creds[id]
				}
			}
			inv := checkDeployCommand(t, name, args)
			user, hasUser := u.last("Service", "User")
			dynamic, _ := u.last("Service", "DynamicUser")
			switch inv.command {
			case "collect":
				if hasUser || dynamic == "yes" {
					t.Errorf("the collector runs as root (docs/collector.md); User=%q DynamicUser=%q", user, dynamic)
				}
				for _, c := range strings.Fields(caps) {
					if !slices.Contains([]string{"CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE", "CAP_SYS_ADMIN"}, c) {
						t.Errorf("CapabilityBoundingSet keeps %s, which the collector does not use", c)
					}
				}
				if caps == "" || strings.HasPrefix(caps, "~") {
					t.Errorf("CapabilityBoundingSet=%q; want the collector's few capabilities as an allow list", caps)
				}
				state, _ := u.last("Service", "StateDirectory")
				spool := inv.collect.spoolDir
				if spool == "" {
					spool = inv.cfg.Collector.Spool.Dir
				}
				if state == "" || !within(spool, filepath.Join("/var/lib", state)) {
					t.Errorf("the spool %s is not under StateDirectory=%q (/var/lib/%s), the only place ProtectSystem=strict lets it write", spool, state, state)
				}
				if inv.collect.simulate || inv.collect.sink != "clickhouse" {
					t.Errorf("--simulate %v, --sink %q: the unit must meter the host into ClickHouse", inv.collect.simulate, inv.collect.sink)
				}
			case "serve":
				if dynamic != "yes" && !hasUser {
					t.Errorf("the server runs as root: want DynamicUser=yes or a User=")
				}
				if caps != "" {
					t.Errorf("CapabilityBoundingSet=%q; the server needs none", caps)
				}
				state, _ := u.last("Service", "StateDirectory")
				queue := inv.cfg.Server.AuditQueue.Dir
				if v, ok := flagValue(inv.cmdArgs, "audit-queue"); ok {
					queue = v
				}
				if queue != "" && (state == "" || !within(queue, filepath.Join("/var/lib", state))) {
					t.Errorf("the audit queue %s is not under StateDirectory=%q (/var/lib/%s), the only place ProtectSystem=strict lets it write", queue, state, state)
				}
				// TLS with the credentials systemd copies for the dynamic
				// user, never plain HTTP on the host's addresses.
				if _, plain := flagValue(argv, "plain-http"); plain || inv.cfg.Server.PlainHTTP {
					t.Errorf("serve with --plain-http: the API crosses the network unencrypted; want --tls-cert and --tls-key")
				}
				for _, flag := range []string{"tls-cert", "tls-key"} {
					if v, _ := flagValue(argv, flag); !strings.HasPrefix(v, "%d/") {
						t.Errorf("--%s %q: want a credential (%%d/...) from LoadCredential=, which the dynamic user can read", flag, v)
					}
				}
			default:
				t.Errorf("unit runs gpumeter %s; want collect or serve", inv.command)
			}
		})
	}
}

// systemdAnalyze finds systemd-analyze. Where it is missing the checks
// that need it are skipped, except under CI=true, where that fails.
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("systemd-analyze not found (Debian's systemd package): %v", err)
		}
		t.Skipf("systemd-analyze not found; CI=true fails here: %v", err)
	}
	return p
}

// systemdVerifiable copies a unit into dir with its ExecStart binary
// pointed at a file that exists: systemd-analyze verify refuses a unit
// whose binary is missing, and /usr/local/bin/gpumeter is not installed on
// a test machine. The test binary stands in (verify only checks that the
// path is an executable file); the arguments stay as they are.
func systemdVerifiable(t *testing.T, name, text, dir string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "ExecStart=/usr/local/bin/gpumeter ") {
		t.Fatalf("%s: no ExecStart=/usr/local/bin/gpumeter to stand in for", name)
	}
	text = strings.ReplaceAll(text, "ExecStart=/usr/local/bin/gpumeter ", "ExecStart="+self+" ")
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// systemdVerify runs systemd-analyze verify on a unit file. It exits 0 on
// unknown keys and unparsable values, which it only prints, so any output
// at all counts as a problem.
func systemdVerify(analyze, path string) (string, bool) {
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	return strings.TrimSpace(string(out)), err == nil && len(strings.TrimSpace(string(out))) == 0
}

// Both units pass systemd-analyze verify without a word, and their
// exposure by systemd-analyze security stays at the level their hardening
// gives (0 to 10, lower is tighter): a hardening line dropped raises it.
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze := systemdAnalyze(t)
	threshold := map[string]string{
		"gpumeter-collector.service": "35", // root with three capabilities and the host's devices: 3.2 with systemd 252
		"gpumeter-server.service":    "15", // a dynamic user with nothing: 1.4 with systemd 252
	}
	for _, name := range systemdUnits {
		t.Run(name, func(t *testing.T) {
			text, err := os.ReadFile(harness.RepoFile(t, "deploy/systemd/"+name))
			if err != nil {
				t.Fatal(err)
			}
			p := systemdVerifiable(t, name, string(text), t.TempDir())
			if out, ok := systemdVerify(analyze, p); !ok {
				t.Errorf("systemd-analyze verify %s:\n%s", name, out)
			}
			// --threshold is the exposure × 10; over it the command fails.
			out, err := exec.Command(analyze, "security", "--offline=yes", "--no-pager", "--threshold="+threshold[name], p).CombinedOutput()
			if err != nil {
				lines := strings.Split(strings.TrimSpace(string(out)), "\n")
				t.Errorf("systemd-analyze security %s: exposure above %s/10: %v\n%s", name, threshold[name], err, lines[len(lines)-1])
			}
		})
	}
}

// The verify check fails on what verify only warns about: a misspelt key,
// a bad value, a missing binary.
func TestSystemdVerifyCatchesBadUnits(t *testing.T) {
	analyze := systemdAnalyze(t)
	text, err := os.ReadFile(harness.RepoFile(t, "deploy/systemd/gpumeter-server.service"))
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{
		"typo.service":    strings.Replace(string(text), "ProtectHome=yes", "ProtectHomes=yes", 1),
		"value.service":   strings.Replace(string(text), "ProtectSystem=strict", "ProtectSystem=strictly", 1),
		"missing.service": strings.Replace(string(text), "ExecStart=/usr/local/bin/gpumeter ", "ExecStart=/nonexistent/gpumeter ", 1),
	} {
		if bad == string(text) {
			t.Fatalf("%s: the unit no longer has what this case changes", name)
		}
		dir := t.TempDir()
		p := filepath.Join(dir, name)
		if name != "missing.service" {
			p = systemdVerifiable(t, name, bad, dir)
		} else if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, ok := systemdVerify(analyze, p); ok {
			t.Errorf("%s passed verify:\n%s", name, out)
		}
	}
}
