package sacct

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// Measured is what the collectors stored for one Slurm job (workload
// "slurm/<job id>") in a period: its GPU time, by tenant.
type Measured struct {
	JobID           string
	Tenant          string
	GPUMicroseconds uint64
}

// CompareInput is a period's sacct jobs beside what the collectors
// measured for the same jobs.
type CompareInput struct {
	From, To time.Time
	Jobs     []Job
	Measured []Measured
	// Tolerance is the share of a job's allocation by which the two counts
	// may differ without the job being listed (default 0.05: a 10 s
	// sampling interval at the job's start and end).
	Tolerance float64
}

// Validate checks the period and the tolerance.
func (in CompareInput) Validate() error {
	var errs []error
	if in.From.IsZero() || !in.To.After(in.From) {
		errs = append(errs, fmt.Errorf("period: from %s must be before to %s", in.From.Format(time.RFC3339), in.To.Format(time.RFC3339)))
	}
	if in.Tolerance < 0 || in.Tolerance >= 1 {
		errs = append(errs, fmt.Errorf("tolerance %v: want a share in [0, 1)", in.Tolerance))
	}
	for i, m := range in.Measured {
		if m.JobID == "" {
			errs = append(errs, fmt.Errorf("measured[%d]: job id required", i))
		}
	}
	return fault.Validation(errors.Join(errs...))
}

// Why a job's counts differ.
const (
	// ReasonIdleAllocation: Slurm counts GPUs the job held, the collector
	// saw less work on them (GPUs allocated but idle, or the job ran on
	// fewer GPUs than it asked for).
	ReasonIdleAllocation = "allocated, less measured"
	// ReasonNotCollected: allocated, and no collector sample names the
	// job (a node without a collector, or processes it could not place).
	ReasonNotCollected = "allocated, nothing measured"
	// ReasonOverAllocation: the collector measured more than Slurm
	// allocated (GPUs outside the job's allocation, GPUs missing from
	// AccountingStorageTRES, MIG instances counted as whole GRES).
	ReasonOverAllocation = "measured more than allocated"
	// ReasonNotInSacct: measured, but the sacct output has no such job (a
	// job outside the export's range, or another cluster's).
	ReasonNotInSacct = "measured, not in sacct"
)

// JobDifference is one job whose counts differ by more than the tolerance.
type JobDifference struct {
	JobID, Account, Tenant string
	Allocated, Measured    time.Duration // GPU time
	Reason                 string
}

// AccountComparison is one account's GPU time both ways.
type AccountComparison struct {
	Account   string
	Jobs      int
	Allocated time.Duration // GPU time Slurm allocated (sreport's count: GRES × time)
	Measured  time.Duration // GPU time the collectors measured for the account's jobs
}

// Comparison says where Slurm's allocation-based count and gpumeter's
// measured count differ.
type Comparison struct {
	From, To         time.Time
	Accounts         []AccountComparison // by account; measured jobs sacct lacks under ""
	Differences      []JobDifference     // by difference, largest first
	Allocated        time.Duration
	Measured         time.Duration
	JobsCompared     int
	JobsWithoutGPUs  int
	MeasuredNotInJob int // measured jobs sacct does not list
}

// Compare sets each job's allocated GPU time in the period (GRES count ×
// the part of [Start, End) inside it; a running job until the period's
// end) beside what the collectors measured for it, by account, and lists
// the jobs whose counts differ by more than the tolerance. Allocation is
// what sreport reports; the measured count is what gpumeter bills.
func Compare(in CompareInput) (Comparison, error) {
	if in.Tolerance == 0 {
		in.Tolerance = 0.05
	}
	if err := in.Validate(); err != nil {
		return Comparison{}, err
	}
	measured := map[string]Measured{}
	for _, m := range in.Measured {
		cur := measured[m.JobID]
		cur.JobID, cur.GPUMicroseconds = m.JobID, cur.GPUMicroseconds+m.GPUMicroseconds
		if cur.Tenant == "" || m.Tenant < cur.Tenant {
			cur.Tenant = m.Tenant
		}
		measured[m.JobID] = cur
	}
	out := Comparison{From: in.From, To: in.To}
	accounts := map[string]*AccountComparison{}
	account := func(name string) *AccountComparison {
		a, ok := accounts[name]
		if !ok {
			a = &AccountComparison{Account: name}
			accounts[name] = a
		}
		return a
	}
	seen := map[string]bool{}
	for _, j := range in.Jobs {
		if j.IsStep() {
			continue
		}
		id := j.JobIDRaw
		if id == "" {
			id = j.JobID
		}
		if seen[id] {
			continue // an overlapping export lists a job twice
		}
		seen[id] = true
		alloc := allocatedIn(j, in.From, in.To)
		m, hasMeasured := measured[id]
		delete(measured, id)
		if alloc == 0 && !hasMeasured {
			if j.GPUCount() == 0 {
				out.JobsWithoutGPUs++
			}
			continue
		}
		got := time.Duration(m.GPUMicroseconds) * time.Microsecond
		a := account(j.Account)
		a.Jobs++
		a.Allocated += alloc
		a.Measured += got
		out.JobsCompared++
		out.Allocated += alloc
		out.Measured += got
		if reason, differs := differ(alloc, got, hasMeasured, in.Tolerance); differs {
			out.Differences = append(out.Differences, JobDifference{JobID: id, Account: j.Account, Tenant: m.Tenant,
				Allocated: alloc, Measured: got, Reason: reason})
		}
	}
	for _, m := range measured {
		got := time.Duration(m.GPUMicroseconds) * time.Microsecond
		a := account("")
		a.Jobs++
		a.Measured += got
		out.Measured += got
		out.MeasuredNotInJob++
		out.Differences = append(out.Differences, JobDifference{JobID: m.JobID, Tenant: m.Tenant, Measured: got, Reason: ReasonNotInSacct})
	}
	for _, a := range accounts {
		out.Accounts = append(out.Accounts, *a)
	}
	slices.SortFunc(out.Accounts, func(a, b AccountComparison) int { return strings.Compare(a.Account, b.Account) })
	slices.SortFunc(out.Differences, func(a, b JobDifference) int {
		da, db := absDiff(a.Allocated, a.Measured), absDiff(b.Allocated, b.Measured)
		if da != db {
			if da > db {
				return -1
			}
			return 1
		}
		return strings.Compare(a.JobID, b.JobID)
	})
	return out, nil
}

func differ(alloc, got time.Duration, hasMeasured bool, tolerance float64) (string, bool) {
	switch {
	case !hasMeasured:
		return ReasonNotCollected, true
	case float64(absDiff(alloc, got)) <= tolerance*float64(alloc):
		return "", false
	case got < alloc:
		return ReasonIdleAllocation, true
	default:
		return ReasonOverAllocation, true
	}
}

func absDiff(a, b time.Duration) time.Duration {
	if a > b {
		return a - b
	}
	return b - a
}

// allocatedIn is the job's GPU time inside [from, to): GRES count × the
// overlap of its run with the period. A job still running counts until to.
func allocatedIn(j Job, from, to time.Time) time.Duration {
	if j.Start.IsZero() || j.GPUCount() == 0 {
		return 0
	}
	start, end := j.Start, j.End
	if end.IsZero() || end.After(to) {
		end = to
	}
	if start.Before(from) {
		start = from
	}
	if !end.After(start) {
		return 0
	}
	return time.Duration(j.GPUCount()) * end.Sub(start)
}
