// Package collectors holds what every GPU-host collector shares: the Sample
// that leaves the host, and the sentinels sources use to say "no data".
package collectors

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/meter"
)

// ErrNotSupported marks a signal the device does not offer. It is logged at
// debug and the signal is left out; it is never billed as zero.
var ErrNotSupported = errors.New("not supported")

// ErrNoData means a source has nothing to report on this host.
var ErrNoData = errors.New("no data")

// Sample is one consumer's usage of one GPU or MIG instance over [Start, End),
// its quantities the embedded meter.Values.
type Sample struct {
	ID uint64 // deterministic, see SampleID

	Host       string
	GPUUUID    string
	GPUModel   string // normalised GPU model, e.g. "H100-SXM5-80GB"
	MIGUUID    string // empty for a whole GPU
	MIGProfile string // e.g. "3g.40gb"; empty for a whole GPU
	SKU        string // price-book SKU: GPUModel, or GPUModel + "/" + MIGProfile

	Tenant     string // empty: idle capacity or unattributed usage
	Department string
	Workload   string // pod (namespace/name), Slurm job, or process

	Start time.Time
	End   time.Time

	meter.Values

	// Unmeasured says which meters the hardware did not report for this
	// interval: their quantities above are 0 because nothing was measured,
	// not because nothing was used ("not supported is not zero").
	Unmeasured meter.Unmeasured
}

// SampleID hashes what identifies a sample: host, device or instance UUID,
// tenant, workload and interval start. Replays of the same interval produce
// the same id, which is what lets ClickHouse collapse duplicates.
func SampleID(host, deviceUUID, tenant, workload string, start time.Time) uint64 {
	// One stack buffer and sha256.Sum256: the collector calls this for
	// every sample of every poll, so it should not allocate.
	var buf [256]byte
	b := buf[:0]
	for _, part := range []string{host, deviceUUID, tenant, workload} {
		// Length-prefix each part so ("ab","c") and ("a","bc") differ.
		b = binary.BigEndian.AppendUint32(b, uint32(len(part)))
		b = append(b, part...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(start.UTC().UnixNano()))
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[:8])
}

// Validate reports every problem with a sample, joined.
func (s Sample) Validate() error {
	var errs []error
	if s.ID == 0 {
		errs = append(errs, errors.New("sample_id: missing"))
	}
	if s.Host == "" {
		errs = append(errs, errors.New("host: missing"))
	}
	if s.GPUUUID == "" {
		errs = append(errs, errors.New("gpu_uuid: missing"))
	}
	if s.SKU == "" {
		errs = append(errs, errors.New("sku: missing"))
	}
	if s.Start.IsZero() || s.End.IsZero() {
		errs = append(errs, errors.New("start/end: missing"))
	} else if !InStorableRange(s.Start) || !InStorableRange(s.End) {
		errs = append(errs, fmt.Errorf("start/end: outside %s .. %s, the range stored times can take",
			MinTime.Format(time.RFC3339), MaxTime.Format(time.RFC3339)))
	} else if !s.End.After(s.Start) {
		errs = append(errs, fmt.Errorf("end: %s is not after start %s", s.End.UTC().Format(time.RFC3339), s.Start.UTC().Format(time.RFC3339)))
	} else if s.End.Sub(s.Start) > MaxInterval {
		errs = append(errs, fmt.Errorf("end: an interval of %s is longer than %s", s.End.Sub(s.Start), MaxInterval))
	}
	if s.Unmeasured&^meter.UnmeasuredAll != 0 {
		errs = append(errs, fmt.Errorf("unmeasured: unknown flags %#x", uint8(s.Unmeasured&^meter.UnmeasuredAll)))
	}
	if s.Tenant == "" && s.Workload != "" {
		// Idle rows have neither; a workload nothing attributed keeps its
		// workload and an explicit tenant of UnattributedTenant.
		errs = append(errs, errors.New("tenant: missing on a row with a workload"))
	}
	return errors.Join(errs...)
}

// MaxInterval bounds one sample's interval. Readers rely on it: a sample
// that overlaps a time starts at most this long before it, which bounds
// the partitions a query by time reads.
const MaxInterval = 31 * 24 * time.Hour

// MinTime and MaxTime bound the times a sample may carry: ClickHouse's
// DateTime holds seconds since 1970 in 32 bits, and silently wraps outside.
var (
	MinTime = time.Unix(0, 0).UTC()
	MaxTime = time.Date(2106, 2, 7, 6, 28, 15, 0, time.UTC)
)

// InStorableRange reports whether t lies within [MinTime, MaxTime].
func InStorableRange(t time.Time) bool { return !t.Before(MinTime) && !t.After(MaxTime) }

// UnattributedTenant is the tenant of usage that no attribution source
// claimed. It is kept as its own row, never dropped.
const UnattributedTenant = "(unattributed)"
