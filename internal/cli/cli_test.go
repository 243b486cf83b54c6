package cli

import (
	"errors"
	"fmt"
	"runtime/debug"
	"testing"

	"github.com/gpumeter/gpumeter/internal/fault"
)

func TestBuildVersion(t *testing.T) {
	info := &debug.BuildInfo{Main: debug.Module{Version: "v0.9.0"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abc"}}}
	for _, tc := range []struct {
		version, commit string
		info            *debug.BuildInfo
		want            string
	}{
		{"v1.2.0", "deadbeef", info, "v1.2.0 (commit deadbeef)"},
		{"", "", info, "v0.9.0 (commit 0123abc)"},
		{"", "", nil, "(devel) (commit unknown)"},
	} {
		if got := buildVersion(tc.version, tc.commit, tc.info); got != tc.want {
			t.Errorf("buildVersion(%q, %q, %v) = %q, want %q", tc.version, tc.commit, tc.info, got, tc.want)
		}
	}
}

// Every command's exit status comes from ExitCode alone.
func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{Usagef("--period: bad"), 2},
		{fmt.Errorf("invoice run: %w", Usagef("--period: bad")), 2},
		{fault.NotFoundf("invoice %q", "x"), 2},
		{fault.Preconditionf("not rolled up"), 2},
		{errors.New("dial tcp 127.0.0.1:1: connection refused"), 1},
	} {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// A domain config's refusal reads in flag names, and stays what it was.
func TestFlagNamed(t *testing.T) {
	cause := fault.Validation(errors.New("simulate.speed: 0 needs a duration.\nbatch_rows: -1 is negative; ship.batch_rows and --duration stay"))
	got := FlagNamed(cause, map[string]string{"simulate.speed": "--speed", "duration": "--duration", "batch_rows": "--batch-rows"})
	want := "--speed: 0 needs a --duration.\n--batch-rows: -1 is negative; ship.batch_rows and --duration stay"
	if got.Error() != want || !fault.IsValidation(got) {
		t.Errorf("got %q (validation %v), want %q", got, fault.IsValidation(got), want)
	}
}
