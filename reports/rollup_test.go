package reports

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/rollup"
)

// After a range is rolled up, the closed state says whether the range may
// be invoiced yet and what closes the rest.
func TestWriteRollupRange(t *testing.T) {
	from, to := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		closed time.Time
		ok     bool
		want   string
	}{
		{"never closed", time.Time{}, false, "closed through nothing: raw samples before 2026-11-01T00:00:00Z are not all rolled up"},
		{"closed before the range", from.Add(-time.Hour), true, "so this range stays open to invoicing"},
		{"closed into the range", from.Add(time.Hour), true, "later hours are within the rollup grace (2h0m0s)"},
		{"closed past the range", to, true, "hourly rollups are closed through 2026-11-02T00:00:00Z\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteRollupRange(&buf, from, to, rollup.State{ClosedThrough: tc.closed}, tc.ok, 2*time.Hour); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(buf.String(), "rolled up 2026-11-01T00:00:00Z .. 2026-11-02T00:00:00Z\n") || !strings.Contains(buf.String(), tc.want) {
				t.Errorf("got %q, want %q", buf.String(), tc.want)
			}
		})
	}
}

func TestWriteRetention(t *testing.T) {
	oct := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		write func(*bytes.Buffer) error
		want  string
	}{
		{"a plan", func(b *bytes.Buffer) error { return WriteRetentionPlan(b, RetentionPlan{Months: []time.Time{oct}}) },
			"would drop raw samples of 2026-10 (partition 202610)\ndry run: nothing dropped\n"},
		{"a plan with the admission log", func(b *bytes.Buffer) error {
			return WriteRetentionPlan(b, RetentionPlan{Months: []time.Time{oct}, LogRows: 7, LogBefore: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)})
		}, "would drop raw samples of 2026-10 (partition 202610)\nwould delete 7 rows of the admission log that ended before 2026-11-24T06:00:00Z\ndry run: nothing dropped\n"},
		{"the admission log alone", func(b *bytes.Buffer) error {
			return WriteRetentionPlan(b, RetentionPlan{LogRows: 1, LogBefore: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)})
		}, "would delete 1 row of the admission log that ended before 2026-11-24T06:00:00Z\ndry run: nothing dropped\n"},
		{"an empty plan", func(b *bytes.Buffer) error { return WriteRetentionPlan(b, RetentionPlan{}) }, nothingToDrop + "\n"},
		{"a run", func(b *bytes.Buffer) error { return WriteRetentionRun(b, []time.Time{oct}, true) }, "dropped raw samples of 2026-10\n"},
		{"a run that dropped nothing", func(b *bytes.Buffer) error { return WriteRetentionRun(b, nil, true) }, nothingToDrop + "\n"},
		{"a run that failed first", func(b *bytes.Buffer) error { return WriteRetentionRun(b, nil, false) }, ""},
	} {
		var buf bytes.Buffer
		if err := tc.write(&buf); err != nil || buf.String() != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, buf.String(), err, tc.want)
		}
	}
}
