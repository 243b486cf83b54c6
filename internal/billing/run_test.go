package billing

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/rollup"
)

// Issue 31, defects 1 and 2: a period waits while its rollups are not
// closed, or while hours of it hold samples the rollup has not taken in
// (a month imported after later hours closed), and the wait names what
// to run.
func TestWaitFor(t *testing.T) {
	sep, err := MonthlyPeriod("2026-09", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	closed := rollup.State{ClosedThrough: hr("2026-12-06T15")}
	cases := []struct {
		name    string
		state   rollup.State
		pending []time.Time
		want    []string // "" for none: the period can be invoiced
	}{
		{"closed, nothing pending", closed, nil, nil},
		{"pending hours in other months only", closed, []time.Time{hr("2026-08-31T23"), hr("2026-10-01T00")}, nil},
		{"a month imported after later hours closed", closed, []time.Time{hr("2026-09-10T00"), hr("2026-09-10T01")},
			[]string{"2 hour(s) of the period, from 2026-09-10T00:00:00Z", "run the scheduled rollup"}},
		{"no rollup has run", rollup.State{}, nil,
			[]string{"closed through nothing (no rollup has run)", "run the scheduled rollup"}},
		{"closed short of the period's end", rollup.State{ClosedThrough: hr("2026-09-30T23")}, nil,
			[]string{"closed through 2026-09-30T23:00:00Z; the period ends 2026-10-01T00:00:00Z", "run the scheduled rollup"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := waitFor(sep, tc.state, tc.pending)
			if (got == "") != (len(tc.want) == 0) {
				t.Fatalf("waitFor = %q, want waiting: %v", got, len(tc.want) > 0)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("waitFor = %q, lacks %q", got, w)
				}
			}
		})
	}
}

// hr reads an hour written 2006-01-02T15 (UTC).
func hr(s string) time.Time {
	t, err := time.Parse("2006-01-02T15", s)
	if err != nil {
		panic(err)
	}
	return t
}
