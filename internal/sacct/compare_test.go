package sacct

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
)

func TestCompare(t *testing.T) {
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 1, 0)
	at := func(d, h int) time.Time { return from.AddDate(0, 0, d).Add(time.Duration(h) * time.Hour) }
	gpus := func(n int) []GRES { return []GRES{{Type: "a100", Count: n}} }
	jobs := []Job{
		// 2 GPUs × 2 h, measured exactly.
		{JobID: "1", JobIDRaw: "1", Account: "physics", Start: at(2, 9), End: at(2, 11), GPUs: gpus(2)},
		{JobID: "1.batch", JobIDRaw: "1.batch", Account: "physics", Start: at(2, 9), End: at(2, 11), GPUs: gpus(2)},
		// 4 GPUs × 1 h, the job ran on one of them.
		{JobID: "2", JobIDRaw: "2", Account: "physics", Start: at(3, 0), End: at(3, 1), GPUs: gpus(4)},
		// 1 GPU × 3 h, nothing measured (a node without a collector).
		{JobID: "3", JobIDRaw: "3", Account: "chemistry", Start: at(4, 0), End: at(4, 3), GPUs: gpus(1)},
		// Started in October: only November's 2 h count, 1 GPU.
		{JobID: "4", JobIDRaw: "4", Account: "chemistry", Start: from.Add(-5 * time.Hour), End: at(0, 2), GPUs: gpus(1)},
		// Still running at the period's end: counts until then.
		{JobID: "5", JobIDRaw: "5", Account: "astro", Start: to.Add(-time.Hour), GPUs: gpus(1)},
		// No GPUs Slurm knows of (GRES missing from AccountingStorageTRES),
		// but the collector saw 1 h on a GPU.
		{JobID: "6", JobIDRaw: "6", Account: "astro", Start: at(5, 0), End: at(5, 1)},
		// A CPU job: nothing either way.
		{JobID: "7", JobIDRaw: "7", Account: "astro", Start: at(5, 0), End: at(5, 1)},
		// Listed twice by an overlapping export.
		{JobID: "1", JobIDRaw: "1", Account: "physics", Start: at(2, 9), End: at(2, 11), GPUs: gpus(2)},
	}
	h := uint64(time.Hour / time.Microsecond)
	measured := []Measured{
		{JobID: "1", Tenant: "uni-physics", GPUMicroseconds: 4*h - 10_000_000}, // within 5 %
		{JobID: "2", Tenant: "uni-physics", GPUMicroseconds: h},
		{JobID: "4", Tenant: "uni-chem", GPUMicroseconds: 2 * h},
		{JobID: "5", Tenant: "astro", GPUMicroseconds: h / 2},
		{JobID: "5", Tenant: "astro", GPUMicroseconds: h / 2},
		{JobID: "6", Tenant: "astro", GPUMicroseconds: h},
		{JobID: "99", Tenant: "guest", GPUMicroseconds: 3 * h},
	}
	got, err := Compare(CompareInput{From: from, To: to, Jobs: jobs, Measured: measured})
	if err != nil {
		t.Fatal(err)
	}
	wantAccounts := map[string][2]time.Duration{
		"physics":   {8 * time.Hour, 5*time.Hour - 10*time.Second},
		"chemistry": {5 * time.Hour, 2 * time.Hour},
		"astro":     {1 * time.Hour, 2 * time.Hour},
		"":          {0, 3 * time.Hour},
	}
	if len(got.Accounts) != len(wantAccounts) {
		t.Fatalf("accounts %+v", got.Accounts)
	}
	for _, a := range got.Accounts {
		if w := wantAccounts[a.Account]; a.Allocated != w[0] || a.Measured != w[1] {
			t.Errorf("account %q: allocated %s measured %s, want %s and %s", a.Account, a.Allocated, a.Measured, w[0], w[1])
		}
	}
	wantDiffs := []struct{ job, reason string }{
		{"2", ReasonIdleAllocation}, // 3 h apart
		{"3", ReasonNotCollected},   // 3 h apart
		{"99", ReasonNotInSacct},    // 3 h apart
		{"6", ReasonOverAllocation}, // 1 h apart
	}
	if len(got.Differences) != len(wantDiffs) {
		t.Fatalf("differences %+v", got.Differences)
	}
	for i, w := range wantDiffs {
		if d := got.Differences[i]; d.JobID != w.job || d.Reason != w.reason {
			t.Errorf("difference %d: job %s %q, want job %s %q", i, d.JobID, d.Reason, w.job, w.reason)
		}
	}
	if got.Allocated != 14*time.Hour || got.Measured != 12*time.Hour-10*time.Second || got.JobsCompared != 6 || got.MeasuredNotInJob != 1 {
		t.Errorf("totals: allocated %s measured %s, %d jobs compared, %d not in sacct", got.Allocated, got.Measured, got.JobsCompared, got.MeasuredNotInJob)
	}
}

func TestCompareRefusesBadInput(t *testing.T) {
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, in := range []CompareInput{
		{},
		{From: from, To: from},
		{From: from, To: from.Add(time.Hour), Tolerance: 1.5},
		{From: from, To: from.Add(time.Hour), Measured: []Measured{{GPUMicroseconds: 1}}},
	} {
		if _, err := Compare(in); err == nil {
			t.Errorf("%+v: no error", in)
		} else if !strings.Contains(err.Error(), "period") && !strings.Contains(err.Error(), "tolerance") && !strings.Contains(err.Error(), "job id") {
			t.Errorf("%+v: unclear error %v", in, err)
		}
	}
}

// A compare input that fails its checks is a validation error (exit 2 at
// the CLI, 400 at an API); a good one passes.
func TestCompareInputValidateIsValidation(t *testing.T) {
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		in   CompareInput
		want string // "" when valid
	}{
		{"valid", CompareInput{From: from, To: from.AddDate(0, 1, 0), Tolerance: 0.05}, ""},
		{"period backwards", CompareInput{From: from, To: from, Tolerance: 0.05}, "period:"},
		{"tolerance of one", CompareInput{From: from, To: from.AddDate(0, 1, 0), Tolerance: 1}, "tolerance 1"},
		{"measured without a job", CompareInput{From: from, To: from.AddDate(0, 1, 0), Measured: []Measured{{}}}, "measured[0]: job id required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.in.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !fault.IsValidation(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v: want a validation error naming %q", err, tc.want)
			}
		})
	}
}
