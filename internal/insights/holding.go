package insights

import (
	"errors"
	"fmt"
	"time"
)

// Interval is one sample interval of one tenant on one GPU or GPU instance:
// the row a store query returns from usage_samples (deduplicated, summed
// over the tenant's workloads on that device for that interval start).
type Interval struct {
	Start time.Time
	// DurationMicros is the interval's wall time, end − start.
	DurationMicros int64
	// GPUMicros is gpu_microseconds: GPU-equivalent time held (interval ×
	// share of the GPU), at most DurationMicros.
	GPUMicros int64
	// SMActiveMicros is sm_active_microseconds, GPU-equivalent time with
	// the SMs active, at most GPUMicros.
	SMActiveMicros int64
	// MemPeakBytes is mem_peak_bytes, the framebuffer peak in the interval.
	MemPeakBytes int64
	// SMUnmeasured is the unmeasured bit of SM activity: the hardware did
	// not report it, so SMActiveMicros is 0 for lack of a reading. Such an
	// interval is never idle; it is counted apart.
	SMUnmeasured bool
}

// End is Start plus the duration.
func (iv Interval) End() time.Time {
	return iv.Start.Add(time.Duration(iv.DurationMicros) * time.Microsecond)
}

// Holding is one tenant's use of one GPU, MIG instance or vGPU over time:
// its intervals in time order. A store query gives it cheaply from
// usage_samples FINAL ordered by (gpu_uuid, mig_uuid, tenant, start).
type Holding struct {
	Tenant     string
	Department string
	Host       string
	GPUUUID    string
	// InstanceUUID is the MIG instance (or vGPU instance) UUID; empty for a
	// whole GPU.
	InstanceUUID string
	// SKU is the price-book SKU: "<model>", "<model>/<profile>" or
	// "<model>/vgpu:<type>" (gpucatalog.SKU).
	SKU       string
	Intervals []Interval
}

// maxMicros bounds one interval: a day (collectors sample every few
// seconds; an import may carry hourly rows).
const maxMicros = 24 * 3600 * 1_000_000

// maxTotalMicros bounds the GPU time of all holdings of one input, so that
// no sum the package forms can overflow int64: 2^62 µs is 146,000 GPU-years.
const maxTotalMicros = 1 << 62

// maxIntervals bounds one holding: a year of 1 s intervals.
const maxIntervals = 40_000_000

// Validate reports every problem of the holding: missing names, intervals
// that are empty, negative, out of order or overlapping, a share above the
// whole GPU, SM activity above the time held.
func (h Holding) Validate() error {
	var errs []error
	if h.Tenant == "" {
		errs = append(errs, errors.New("tenant is empty (idle capacity is no holding)"))
	}
	if h.GPUUUID == "" {
		errs = append(errs, errors.New("gpu uuid is empty"))
	}
	if h.SKU == "" {
		errs = append(errs, errors.New("sku is empty"))
	}
	if len(h.Intervals) > maxIntervals {
		errs = append(errs, fmt.Errorf("%d intervals, at most %d", len(h.Intervals), maxIntervals))
		return errors.Join(errs...)
	}
	var prevEnd time.Time
	for i, iv := range h.Intervals {
		where := fmt.Sprintf("intervals[%d]", i)
		if iv.Start.IsZero() {
			errs = append(errs, fmt.Errorf("%s: start is missing", where))
		}
		ok := true
		switch {
		case iv.DurationMicros <= 0:
			errs = append(errs, fmt.Errorf("%s: duration %d µs is not positive", where, iv.DurationMicros))
			ok = false
		case iv.DurationMicros > maxMicros:
			errs = append(errs, fmt.Errorf("%s: duration %d µs exceeds %d", where, iv.DurationMicros, int64(maxMicros)))
			ok = false
		}
		if iv.GPUMicros < 0 || iv.SMActiveMicros < 0 || iv.MemPeakBytes < 0 {
			errs = append(errs, fmt.Errorf("%s: negative quantity", where))
		}
		if ok && iv.GPUMicros > iv.DurationMicros {
			errs = append(errs, fmt.Errorf("%s: gpu %d µs exceeds the interval's %d µs", where, iv.GPUMicros, iv.DurationMicros))
		}
		if iv.SMActiveMicros > iv.GPUMicros {
			errs = append(errs, fmt.Errorf("%s: sm active %d µs exceeds gpu %d µs", where, iv.SMActiveMicros, iv.GPUMicros))
		}
		if iv.SMUnmeasured && iv.SMActiveMicros != 0 {
			errs = append(errs, fmt.Errorf("%s: sm activity unmeasured but %d µs given", where, iv.SMActiveMicros))
		}
		if i > 0 && !iv.Start.IsZero() && iv.Start.Before(prevEnd) {
			errs = append(errs, fmt.Errorf("%s: starts %s, before the previous interval ends (%s)", where, iv.Start.UTC().Format(time.RFC3339Nano), prevEnd.UTC().Format(time.RFC3339Nano)))
		}
		if ok {
			prevEnd = iv.End()
		}
	}
	return errors.Join(errs...)
}

// key names a holding in messages.
func (h Holding) key() string {
	if h.InstanceUUID != "" {
		return fmt.Sprintf("%s on %s/%s", h.Tenant, h.GPUUUID, h.InstanceUUID)
	}
	return fmt.Sprintf("%s on %s", h.Tenant, h.GPUUUID)
}

// validateHoldings validates each holding and that no (gpu, instance,
// tenant) repeats, prefixing problems with name[i].
func validateHoldings(name string, hs []Holding) error {
	type k struct{ gpu, inst, tenant string }
	seen := make(map[k]int, len(hs))
	var errs []error
	var total int64 // of valid durations, each ≤ maxMicros: stops short of wrapping
	for i, h := range hs {
		for _, iv := range h.Intervals {
			if iv.DurationMicros > 0 && iv.DurationMicros <= maxMicros && total <= maxTotalMicros {
				total += iv.DurationMicros
			}
		}
		where := fmt.Sprintf("%s[%d] (%s)", name, i, h.key())
		if err := h.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		kk := k{h.GPUUUID, h.InstanceUUID, h.Tenant}
		if j, dup := seen[kk]; dup {
			errs = append(errs, fmt.Errorf("%s: repeats %s[%d]", where, name, j))
		} else {
			seen[kk] = i
		}
	}
	if total > maxTotalMicros {
		errs = append(errs, fmt.Errorf("%s: more than %d µs of intervals in all", name, int64(maxTotalMicros)))
	}
	return errors.Join(errs...)
}

// validatePeriod checks [from, to) is a non-empty range of whole UTC hours.
func validatePeriod(from, to time.Time) error {
	var errs []error
	if from.IsZero() || to.IsZero() {
		return errors.New("period: from and to are required")
	}
	if !from.Before(to) {
		errs = append(errs, fmt.Errorf("period: to %s is not after from %s", to.UTC().Format(time.RFC3339), from.UTC().Format(time.RFC3339)))
	}
	for _, t := range []time.Time{from, to} {
		if !t.Equal(t.Truncate(time.Hour)) {
			errs = append(errs, fmt.Errorf("period: %s is not a whole hour", t.UTC().Format(time.RFC3339Nano)))
		}
	}
	return errors.Join(errs...)
}
