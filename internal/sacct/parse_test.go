package sacct

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/importer"
)

func mustOpen(t testing.TB, name string) *os.File {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestParseSlurm2405(t *testing.T) {
	jobs, err := Parse(mustOpen(t, "slurm-24.05.txt"), Options{Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 16 {
		t.Fatalf("%d lines parsed, want 16", len(jobs))
	}
	first := jobs[0]
	want := Job{Line: 2, Cluster: "hpc1", JobID: "4101", JobIDRaw: "4101", Account: "physics", User: "ada", Partition: "gpu",
		State: "COMPLETED", NodeList: "gpu07", Start: time.Date(2026, 11, 3, 9, 15, 0, 0, time.UTC), End: time.Date(2026, 11, 3, 11, 45, 30, 0, time.UTC),
		Elapsed: 9030 * time.Second, GPUs: []GRES{{"a100", 2}}, RequestedGPUs: 2}
	if !equalJob(first, want) {
		t.Fatalf("first job:\n got %+v\nwant %+v", first, want)
	}
	byID := map[string]Job{}
	for _, j := range jobs {
		byID[j.JobID] = j
	}
	for _, tc := range []struct {
		id    string
		check func(Job) bool
		what  string
	}{
		{"4101.batch", Job.IsStep, "a step"},
		{"4102_3", func(j Job) bool { return j.JobIDRaw == "4105" && !j.IsStep() }, "array task with its raw id"},
		{"4110", func(j Job) bool {
			return j.Start.IsZero() && j.End.IsZero() && j.GPUCount() == 0 && j.RequestedGPUs == 4
		}, "pending: no times, no allocation"},
		{"4111", func(j Job) bool { return !j.Start.IsZero() && j.End.IsZero() }, "running: no end"},
		{"4113", func(j Job) bool { return len(j.GPUs) == 1 && j.GPUs[0] == GRES{"a100_3g.40gb", 1} }, "a MIG GRES type"},
		{"4114", func(j Job) bool { return j.Elapsed == 26*time.Hour && j.GPUCount() == 8 && j.RequestedGPUs == 8 }, "days in Elapsed"},
		{"4116", func(j Job) bool { return j.State == "CANCELLED" && len(j.GPUs) == 1 && j.GPUs[0] == GRES{"", 1} }, "untyped GPUs; state's first word"},
		{"4120+1", func(j Job) bool { return j.JobIDRaw == "4121" }, "het component"},
		{"4121", func(j Job) bool {
			return len(j.GPUs) == 2 && j.GPUs[0] == GRES{"a100", 1} && j.GPUs[1] == GRES{"h100", 1}
		}, "mixed types, gres/gpu first"},
	} {
		j, ok := byID[tc.id]
		if !ok || !tc.check(j) {
			t.Errorf("%s (%s): %+v", tc.id, tc.what, j)
		}
	}
}

func equalJob(a, b Job) bool { return reflect.DeepEqual(a, b) }

func TestParseSlurm2302WithoutClusterColumn(t *testing.T) {
	if _, err := Parse(mustOpen(t, "slurm-23.02.txt"), Options{Location: time.UTC}); err == nil || !strings.Contains(err.Error(), "Cluster: required column missing") {
		t.Fatalf("without --cluster: %v", err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := Parse(mustOpen(t, "slurm-23.02.txt"), Options{Cluster: "old", Location: berlin})
	if err != nil {
		t.Fatal(err)
	}
	j := jobs[0]
	if j.Cluster != "old" || j.JobIDRaw != "" || j.Elapsed != time.Hour || j.RequestedGPUs != -1 {
		t.Fatalf("job %+v", j)
	}
	// 23:30 in Berlin (CET, UTC+1) is 22:30 UTC.
	if want := time.Date(2026, 10, 31, 22, 30, 0, 0, time.UTC); !j.Start.Equal(want) {
		t.Fatalf("start %s, want %s", j.Start, want)
	}
	if !jobs[4].IsStep() || jobs[4].JobID != "7002.interactive" {
		t.Fatalf("interactive step: %+v", jobs[4])
	}
}

func TestParseNeedsAZoneForLocalTimes(t *testing.T) {
	in := "Cluster|JobID|Account|Start|End|Elapsed|AllocTRES\nc|1|a|2026-11-01T00:00:00|1793494800|01:00:00|gres/gpu=1\n"
	_, err := Parse(strings.NewReader(in), Options{})
	if err == nil || !strings.Contains(err.Error(), `line 2: Start: "2026-11-01T00:00:00" has no time zone: give the location`) {
		t.Fatalf("err = %v", err)
	}
	var ve *importer.ValidationError
	if !errors.Is(err, ErrNoTimeZone) || !errors.As(err, &ve) || !fault.IsValidation(err) {
		t.Fatalf("err %v: want ErrNoTimeZone, an importer.ValidationError and a validation error", err)
	}
	in = "Cluster|JobID|Account|Start|End|Elapsed|AllocTRES\nc|1|a|2026-11-01T00:00:00+0000|1793494800|01:00:00|gres/gpu=1\n"
	jobs, err := Parse(strings.NewReader(in), Options{})
	if err != nil || jobs[0].End.Sub(jobs[0].Start) != time.Hour {
		t.Fatalf("times with offsets: %+v, %v", jobs, err)
	}
}

func TestParseTimes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{"2026-12-04T18:53:49", time.Date(2026, 12, 4, 18, 53, 49, 0, time.UTC), false},
		{"2026-12-04T19:53:49+0100", time.Date(2026, 12, 4, 18, 53, 49, 0, time.UTC), false},
		{"2026-12-04T19:53:49+01:00", time.Date(2026, 12, 4, 18, 53, 49, 0, time.UTC), false},
		{"1796410429", time.Unix(1796410429, 0).UTC(), false},
		{"Unknown", time.Time{}, false},
		{"None", time.Time{}, false},
		{"", time.Time{}, false},
		{"12/04-18:53:49", time.Time{}, true},
		{"99999999999999999999", time.Time{}, true},
	} {
		got, err := parseTime(tc.in, time.UTC)
		if (err != nil) != tc.bad || !got.Equal(tc.want) {
			t.Errorf("parseTime(%q) = %s, %v; want %s, bad %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestParseElapsed(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"00:00:07", 7 * time.Second, false},
		{"02:30:30", 9030 * time.Second, false},
		{"1-02:00:00", 26 * time.Hour, false},
		{"12:05", 12*time.Minute + 5*time.Second, false},
		{"45", 45 * time.Second, false},
		{"00:61:00", 0, true},
		{"1-", 0, true},
		{"-01:00:00", 0, true},
		{"INVALID", 0, true},
		{"1:2:3:4", 0, true},
		{"", 0, true},
	} {
		got, err := parseElapsed(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseElapsed(%q) = %s, %v; want %s, bad %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestParseGPUTRES(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []GRES
		bad  string
	}{
		{"billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,node=1", []GRES{{"a100", 1}}, ""},
		{"gres/gpu=3,gres/gpu:a100=1,gres/gpu:a40=2", []GRES{{"a100", 1}, {"a40", 2}}, ""},
		{"gres/gpu=4", []GRES{{"", 4}}, ""},
		{"gres/gpu=4,gres/gpu:a100=1", []GRES{{"a100", 1}, {"", 3}}, ""},
		{"gres/gpu:a100=2", []GRES{{"a100", 2}}, ""},
		{"cpu=4,mem=16G,gres/gpumem=40G,gres/shard=2", nil, ""},
		{"gres/gpu=0,gres/gpu:a100=0", nil, ""},
		{"", nil, ""},
		{"gres/gpu=1,gres/gpu:a100=2", nil, "exceed"},
		{"gres/gpu=x", nil, "not a GPU count"},
		{"gres/gpu=-1", nil, "not a GPU count"},
		{"gres/gpu=1,gres/gpu=1", nil, "twice"},
		{"gres/gpu:=1", nil, "empty GRES type"},
		{"cpu", nil, "name=count"},
	} {
		got, err := parseGPUTRES(tc.in)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("parseGPUTRES(%q) = %v, %v; want error %q", tc.in, got, err, tc.bad)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("parseGPUTRES(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("parseGPUTRES(%q) = %v; want %v", tc.in, got, tc.want)
			}
		}
	}
}

// Every problem names its line and column.
func TestParseProblems(t *testing.T) {
	const header = "Cluster|JobID|Account|Start|End|Elapsed|AllocTRES\n"
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"missing columns", "JobID|Start\n", []string{"line 1: Account: required column missing", "line 1: End: required", "line 1: AllocTRES: required", "line 1: Cluster: required", "line 1: Elapsed: required column missing: Elapsed or ElapsedRaw"}},
		{"column twice", "Cluster|JobID|JobID|Account|Start|End|Elapsed|AllocTRES\n", []string{"line 1: JobID: column twice"}},
		{"field count", header + "c|1|a|2026-11-01T00:00:00|2026-11-01T01:00:00|01:00:00|gres/gpu=1|extra\n", []string{"line 2: 8 fields, the header has 7"}},
		{"bad time and elapsed", header + "c|1|a|yesterday|2026-11-01T01:00:00|1h|gres/gpu=1\n", []string{`line 2: Start: "yesterday" is not a time`, `line 2: Elapsed: "1h" is not a run time`}},
		{"bad job id and tres", header + "c|12a|a|2026-11-01T00:00:00|2026-11-01T01:00:00|01:00:00|gres/gpu=one\n", []string{`line 2: JobID: "12a" is not a job id`, `line 2: AllocTRES: gres/gpu="one": not a GPU count`}},
		{"bad raw id", "Cluster|JobID|JobIDRaw|Account|Start|End|Elapsed|AllocTRES\nc|1_2|x1|a|2026-11-01T00:00:00|2026-11-01T01:00:00|01:00:00|\n", []string{`line 2: JobIDRaw: "x1" is not a job id`}},
		{"problems on several lines", header + "c||a|||00:00:00|\nc|5|a|||x|\n", []string{"line 2: JobID: empty", `line 3: Elapsed: "x"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.in), Options{Location: time.UTC})
			var ve *importer.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
		})
	}
}

func TestParseEmptyAndHeaderOnly(t *testing.T) {
	for _, in := range []string{"", "\n\n", "Cluster|JobID|Account|Start|End|Elapsed|AllocTRES\n"} {
		jobs, err := Parse(strings.NewReader(in), Options{Location: time.UTC})
		if err != nil || len(jobs) != 0 {
			t.Errorf("Parse(%q) = %v, %v; want no jobs", in, jobs, err)
		}
	}
}

func TestParseLongLine(t *testing.T) {
	in := "Cluster|JobID|Account|Start|End|Elapsed|AllocTRES\n" + strings.Repeat("x", MaxLineBytes+1) + "\n"
	if _, err := Parse(strings.NewReader(in), Options{Location: time.UTC}); err == nil || !strings.Contains(err.Error(), "line 2: line longer than 1 MiB") {
		t.Fatalf("err = %v", err)
	}
}
