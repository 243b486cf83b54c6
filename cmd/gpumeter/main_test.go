package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/cmd/gpumeter/config"
)

// commandLines are every command and subcommand, as typed; cobra's own
// help and completion commands are left out.
func commandLines() [][]string {
	var out [][]string
	var walk func(path []string, c *cobra.Command)
	walk = func(path []string, c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			line := append(append([]string{}, path...), sub.Name())
			out = append(out, line)
			walk(line, sub)
		}
	}
	walk(nil, newRootCmd(&globals{cfg: config.Default()}))
	return out
}

func TestCommandLinesCoverTheTree(t *testing.T) {
	var names []string
	for _, c := range commandLines() {
		names = append(names, strings.Join(c, " "))
	}
	for _, want := range []string{"migrate", "invoice render", "keys create", "webhooks replay", "mig apply", "insights capacity", "slurm compare", "version"} {
		if !slices.Contains(names, want) {
			t.Errorf("commandLines lacks %q: %q", want, names)
		}
	}
}

func TestEveryCommandRefusesABadFlagWithExit2(t *testing.T) {
	for _, cmd := range commandLines() {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			code, stdout, stderr := gpumeter(t, append(cmd, "--no-such-flag")...)
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
		switch name {
		case "import", "invoice show", "invoice finalize", "invoice void", "invoice render", "keys revoke", "credits void", "webhooks replay":
			continue // they take files, invoices, keys, grants or events as arguments
		}
		t.Run(name, func(t *testing.T) {
			// Before the fix retention ignored its arguments.
			code, _, stderr := gpumeter(t, append(cmd, "stray")...)
			if code != 2 || !strings.Contains(stderr, `stray`) {
				t.Fatalf("exit %d, stderr %q; want 2 naming the argument", code, stderr)
			}
		})
	}
}

func TestEveryCommandHelpListsTheGlobalFlags(t *testing.T) {
	for _, cmd := range append(commandLines(), nil) {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			code, stdout, stderr := gpumeter(t, append(cmd, "--help")...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			for _, want := range []string{"before or after the command", "--clickhouse", "--config", "--log-level"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("help lacks %q:\n%s", want, stdout)
				}
			}
			if stderr != "" {
				t.Errorf("help went to stderr: %q", stderr)
			}
			if cmd == nil {
				return
			}
			for _, want := range []string{"Usage:\n  gpumeter " + strings.Join(cmd, " "), "Examples:\n  "} {
				if !strings.Contains(stdout, want) {
					t.Errorf("help lacks %q:\n%s", want, stdout)
				}
			}
			// A command flag named like a global one would shadow it.
			own, _, _ := strings.Cut(stdout, "Global Flags")
			for _, line := range strings.Split(own, "\n") {
				for _, g := range []string{"clickhouse", "config", "log-level"} {
					if strings.HasPrefix(strings.TrimSpace(line)+" ", "--"+g+" ") {
						t.Errorf("the command has its own --%s flag, which shadows the global one", g)
					}
				}
			}
		})
	}
}

// The root's help lists the commands with their summaries first, and
// "help COMMAND" is "COMMAND --help".
func TestHelp(t *testing.T) {
	code, stdout, _ := gpumeter(t, "--help")
	lines := strings.Split(stdout, "\n")
	if code != 0 || len(lines) < 10 || !strings.HasPrefix(lines[4], "Commands:") ||
		!strings.Contains(strings.Join(lines[:10], "\n"), "chargeback  charge a month's GPU use to departments and tenants") {
		t.Errorf("exit %d; want the commands with their summaries in the first 10 lines:\n%s", code, stdout)
	}
	code, stdout, _ = gpumeter(t, "help", "invoice")
	_, want, _ := gpumeter(t, "invoice", "--help")
	if code != 0 || stdout != want || !strings.Contains(stdout, "run         invoice a month") {
		t.Errorf("help invoice: exit %d:\n%s\nwant invoice --help:\n%s", code, stdout, want)
	}
	if _, stdout, _ = gpumeter(t, "invoice", "run", "--help"); !strings.Contains(stdout, "      --period string") {
		t.Errorf("flags are shown with --:\n%s", stdout)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := gpumeter(t, args...)
		if code != 0 || !strings.HasPrefix(stdout, "gpumeter ") || !strings.Contains(stdout, " (commit ") {
			t.Errorf("%v: exit %d, %q %q", args, code, stdout, stderr)
		}
	}
}

func TestCompletion(t *testing.T) {
	code, stdout, stderr := gpumeter(t, "completion", "bash")
	if code != 0 || !strings.Contains(stdout, "# bash completion V2 for gpumeter") || !strings.Contains(stdout, "__start_gpumeter") {
		t.Fatalf("exit %d, stderr %q, script:\n%.300s", code, stderr, stdout)
	}
	for _, shell := range []string{"zsh", "fish"} {
		if code, stdout, _ := gpumeter(t, "completion", shell); code != 0 || !strings.Contains(stdout, "gpumeter") {
			t.Errorf("completion %s: exit %d", shell, code)
		}
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
		{"serve", "--plain-http", "--listen", "127.0.0.1:0"},
		{"mig", "plan", "--from-clickhouse", "--demand", demand},
		{"demo"},
		{"import", samples},
		{"insights", "efficiency", "--period", "2026-11"},
		{"insights", "capacity", "--to", "2026-11-01"},
		{"credits", "list"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, _, stderr := gpumeter(t, append(args, "--clickhouse", down)...)
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
		// pflag reads -clickhouse as the short flags -c -l -i ...
		{"one dash is refused, naming the long flag", cat([]string{"usage", "-clickhouse", dsn}, day), 2, "-clickhouse: long flags take two dashes: --clickhouse"},
		{"one dash with =value is refused", cat([]string{"-log-level=warn", "usage"}, day), 2, "long flags take two dashes: --log-level"},
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
		{"a global flag at the end without its value", cat([]string{"usage"}, day, []string{"--clickhouse"}), 2, "flag needs an argument: --clickhouse"},
		{"a global flag past -- is the command's argument", []string{"quote", "--book", book, "--quantity", qty, "--", "--log-level", "debug"}, 2, `unexpected argument "--log-level"`},
		{"an unknown flag before the command is refused", []string{"--frobnicate", "usage"}, 2, "unknown flag: --frobnicate"},
		{"a subcommand's flags before it", []string{"mig", "--fleet", fleet, "--demand", demand, "plan", "--log-level", "warn"}, 0, ""},
		{"an unknown command before a flag", []string{"--log-level", "debug", "usages", "--from", "2026-11-01"}, 2, `unknown command "usages"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := gpumeter(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.msg) {
				t.Fatalf("exit %d, stderr %q; want %d mentioning %q", code, stderr, tc.code, tc.msg)
			}
		})
	}
}

// The global flags are taken wherever they stand, up to a "--", and a
// look-alike of one is the command's own flag.
func TestGlobalFlagsParse(t *testing.T) {
	cases := []struct {
		name            string
		args            []string
		dsn, level, pos string
		err             string
	}{
		{"none", []string{"mig", "plan", "--fleet", "x", "--demand", "d"}, "", "", "", ""},
		{"separate value", []string{"mig", "plan", "--fleet", "x", "--clickhouse", "dsn"}, "dsn", "", "", ""},
		{"joined value, before the command", []string{"--log-level=debug", "mig", "plan"}, "", "debug", "", ""},
		{"after a positional argument", []string{"invoice", "show", "GM-1", "--clickhouse", "dsn"}, "dsn", "", "GM-1", ""},
		{"a look-alike is the command's", []string{"mig", "plan", "--from-clickhouse", "--clickhouses", "v"}, "", "", "", "unknown flag: --clickhouses"},
		{"stops at --", []string{"invoice", "show", "--log-level", "a", "--", "--log-level", "b"}, "", "a", "--log-level b", ""},
		{"missing value", []string{"invoice", "show", "x", "--config"}, "", "", "", "flag needs an argument: --config"},
		{"three dashes are not a flag", []string{"invoice", "show", "---config", "x"}, "", "", "", "bad flag syntax: ---config"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := &globals{cfg: config.Default()}
			cmd, rest, err := newRootCmd(g).Find(tc.args)
			if err == nil {
				err = cmd.ParseFlags(rest)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Only what the flags set: the environment may hold defaults.
			if f := cmd.Flags().Lookup("clickhouse"); f.Changed != (tc.dsn != "") || (tc.dsn != "" && g.dsn != tc.dsn) {
				t.Errorf("--clickhouse %q (given: %v), want %q", g.dsn, f.Changed, tc.dsn)
			}
			if f := cmd.Flags().Lookup("log-level"); f.Changed != (tc.level != "") || (tc.level != "" && g.logLevel != tc.level) {
				t.Errorf("--log-level %q (given: %v), want %q", g.logLevel, f.Changed, tc.level)
			}
			if got := strings.Join(cmd.Flags().Args(), " "); got != tc.pos {
				t.Errorf("arguments %q, want %q", got, tc.pos)
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
			code, _, stderr := gpumeter(t, "--config", conf, "--clickhouse", "clickhouse://127.0.0.1:1/none", "serve", "--plain-http", "--listen", "127.0.0.1:0")
			if code != 2 || !strings.Contains(stderr, key+".schedule") || !strings.Contains(stderr, "every tuesday") {
				t.Fatalf("exit %d, stderr %q; want 2 naming %s.schedule", code, stderr, key)
			}
		})
	}
}
