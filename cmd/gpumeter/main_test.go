package main

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// commandLines are every command and subcommand, as typed.
func commandLines() [][]string {
	var out [][]string
	for name := range commands() {
		out = append(out, []string{name})
	}
	out = append(out, []string{"mig", "plan"}, []string{"mig", "apply"}, []string{"slurm", "compare"})
	for _, sub := range []string{"efficiency", "rightsize", "anomalies", "capacity"} {
		out = append(out, []string{"insights", sub})
	}
	sort.Slice(out, func(i, j int) bool { return strings.Join(out[i], " ") < strings.Join(out[j], " ") })
	return out
}

func TestEveryCommandRefusesABadFlagWithExit2(t *testing.T) {
	for _, cmd := range commandLines() {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			code, stdout, stderr := cli(t, append(cmd, "--no-such-flag")...)
			if code != 2 || !strings.Contains(stderr, "no-such-flag") {
				t.Fatalf("exit %d, stderr %q; want 2 naming the flag", code, stderr)
			}
			if stdout != "" {
				t.Errorf("wrote to stdout: %q", stdout)
			}
		})
	}
}

func TestEveryCommandRefusesAStrayArgumentWithExit2(t *testing.T) {
	for _, cmd := range commandLines() {
		name := strings.Join(cmd, " ")
		if name == "import" || name == "mig" || name == "slurm" { // files, and a subcommand, are their arguments
			continue
		}
		t.Run(name, func(t *testing.T) {
			// Before the fix retention ignored its arguments.
			code, _, stderr := cli(t, append(cmd, "stray")...)
			if code != 2 || !strings.Contains(stderr, `stray`) {
				t.Fatalf("exit %d, stderr %q; want 2 naming the argument", code, stderr)
			}
		})
	}
}

func TestEveryCommandHelpListsTheGlobalFlags(t *testing.T) {
	for _, cmd := range append(commandLines(), nil) {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			code, stdout, stderr := cli(t, append(cmd, "--help")...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			for _, want := range []string{"before or after the command", "-clickhouse", "-config", "-log-level"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("help lacks %q:\n%s", want, stderr)
				}
			}
			if stdout != "" {
				t.Errorf("help went to stdout: %q", stdout)
			}
			// A command flag named like a global one would be taken
			// from the command by splitGlobals.
			own, _, _ := strings.Cut(stderr, "global flags")
			for _, line := range strings.Split(own, "\n") {
				for _, g := range []string{"clickhouse", "config", "log-level"} {
					if strings.HasPrefix(strings.TrimSpace(line)+" ", "-"+g+" ") {
						t.Errorf("the command has its own -%s flag, which the global one shadows", g)
					}
				}
			}
		})
	}
}

// Exit 1 is for runtime failures: every command that needs ClickHouse
// says so when it is not there, after its input was found good.
func TestClickHouseDownIsARuntimeFailureWithExit1(t *testing.T) {
	down := "clickhouse://127.0.0.1:1/none"
	dir := t.TempDir()
	samples := filepath.Join(dir, "s.csv")
	os.WriteFile(samples, []byte("host,gpu_uuid,gpu_model,tenant,workload,start,end,gpu_seconds\n"+
		"h,G,H100-SXM5-80GB,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10\n"), 0o600)
	demand := filepath.Join(dir, "d.yaml")
	os.WriteFile(demand, []byte(migDemandYAML), 0o600)
	for _, args := range [][]string{
		{"migrate"},
		{"usage", "--from", "2026-11-01"},
		{"rollup", "--from", "2026-11-01", "--to", "2026-11-02"},
		{"retention"},
		{"serve", "--listen", "127.0.0.1:0"},
		{"mig", "plan", "--from-clickhouse", "--demand", demand},
		{"demo"},
		{"import", samples},
		{"insights", "efficiency", "--period", "2026-11"},
		{"insights", "capacity", "--to", "2026-11-01"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, _, stderr := cli(t, append(args, "--clickhouse", down)...)
			if code != 1 || !strings.Contains(stderr, "127.0.0.1:1") || !strings.Contains(stderr, "is ClickHouse running?") {
				t.Fatalf("exit %d, stderr %q; want 1 naming the server, with the hint", code, stderr)
			}
		})
	}
}

func TestGlobalFlagsGoBeforeOrAfterTheCommand(t *testing.T) {
	dsn := testDSN(t)
	down := "clickhouse://127.0.0.1:1/none"
	book := "../../pricing/books/gpu-cloud.yaml"
	qty := "H100-SXM5-80GB:gpu_hours=10"
	fleet := writeTemp(t, "fleet.yaml", migFleetYAML)
	demand := writeTemp(t, "demand.yaml", migDemandYAML)
	day := []string{"--from", "2026-11-01", "--to", "2026-11-02"}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	cases := []struct {
		name string
		args []string
		code int
		msg  string // in stderr
	}{
		{"before the command", cat([]string{"--clickhouse", dsn, "usage"}, day), 0, ""},
		// Before the fix each of these was "flag provided but not defined".
		{"after the command", cat([]string{"usage", "--clickhouse", dsn}, day), 0, ""},
		{"after the command, --flag=value", cat([]string{"usage", "--clickhouse=" + dsn}, day), 0, ""},
		{"after the command, one dash", cat([]string{"usage", "-clickhouse", dsn}, day), 0, ""},
		{"after the command's own flags", cat([]string{"usage"}, day, []string{"--clickhouse", dsn}), 0, ""},
		{"--log-level after quote", []string{"quote", "--log-level", "debug", "--book", book, "--quantity", qty}, 0, ""},
		{"--log-level= after quote", []string{"quote", "--book", book, "--log-level=warn", "--quantity", qty}, 0, ""},
		{"after a subcommand's subcommand", []string{"mig", "plan", "--log-level", "debug", "--fleet", fleet, "--demand", demand}, 0, ""},
		{"--config after the command", cat([]string{"usage", "--config", writeTemp(t, "c.yaml", "clickhouse: {dsn: "+dsn+"}\n")}, day), 0, ""},
		// Given twice, the last one wins, as for any repeated flag.
		{"twice: the one after the command wins", cat([]string{"--clickhouse", down, "usage", "--clickhouse", dsn}, day), 0, ""},
		{"twice: the one after the command wins, even if broken", cat([]string{"--clickhouse", dsn, "usage", "--clickhouse", down}, day), 1, "127.0.0.1:1"},
		{"twice after the command: the last wins", cat([]string{"usage", "--clickhouse", down, "--clickhouse", dsn}, day), 0, ""},
		{"a bad value after the command is still refused", []string{"quote", "--log-level", "loud", "--book", book, "--quantity", qty}, 2, "log-level"},
		{"an empty value after the command is still refused", cat([]string{"usage", "--clickhouse="}, day), 2, "--clickhouse: empty value"},
		{"a global flag at the end without its value", cat([]string{"usage"}, day, []string{"--clickhouse"}), 2, "flag needs an argument: -clickhouse"},
		{"a global flag past -- is the command's argument", []string{"quote", "--book", book, "--quantity", qty, "--", "--log-level", "debug"}, 2, `unexpected argument "--log-level"`},
		{"an unknown flag before the command is refused", []string{"--frobnicate", "usage"}, 2, "flag provided but not defined: -frobnicate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := cli(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.msg) {
				t.Fatalf("exit %d, stderr %q; want %d mentioning %q", code, stderr, tc.code, tc.msg)
			}
		})
	}
}

func TestSplitGlobals(t *testing.T) {
	cases := []struct {
		name          string
		args          []string
		globals, rest string
	}{
		{"none", []string{"--from", "x", "file"}, "", "--from x file"},
		{"separate value", []string{"--from", "x", "--clickhouse", "dsn", "file"}, "--clickhouse dsn", "--from x file"},
		{"joined value", []string{"--config=c.yaml", "-x"}, "--config=c.yaml", "-x"},
		{"after positional arguments", []string{"file", "--log-level", "debug"}, "--log-level debug", "file"},
		{"a look-alike is the command's", []string{"--from-clickhouse", "--clickhouses", "v"}, "", "--from-clickhouse --clickhouses v"},
		{"stops at --", []string{"--log-level", "a", "--", "--log-level", "b"}, "--log-level a", "-- --log-level b"},
		{"missing value left for the parser to refuse", []string{"x", "--config"}, "--config", "x"},
		{"three dashes are not a flag", []string{"---config", "x"}, "", "---config x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, r := splitGlobals(tc.args, map[string]bool{"clickhouse": true, "config": true, "log-level": true})
			if strings.Join(g, " ") != tc.globals || strings.Join(r, " ") != tc.rest {
				t.Errorf("globals %q, rest %q; want %q, %q", g, r, tc.globals, tc.rest)
			}
		})
	}
}

// A schedule in the config file is input: a bad one is exit 2, found
// before ClickHouse is dialled (before the fix: exit 1, after dialling).
func TestServeRefusesABadScheduleWithExit2(t *testing.T) {
	for _, key := range []string{"rollup", "retention"} {
		t.Run(key, func(t *testing.T) {
			conf := writeTemp(t, "c.yaml", key+": {schedule: \"every tuesday\"}\n")
			code, _, stderr := cli(t, "--config", conf, "--clickhouse", "clickhouse://127.0.0.1:1/none", "serve", "--listen", "127.0.0.1:0")
			if code != 2 || !strings.Contains(stderr, key+".schedule") || !strings.Contains(stderr, "every tuesday") {
				t.Fatalf("exit %d, stderr %q; want 2 naming %s.schedule", code, stderr, key)
			}
		})
	}
}
