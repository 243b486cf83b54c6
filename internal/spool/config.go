package spool

import (
	"errors"
	"fmt"
)

// OverflowPolicy says what Append does when a batch would take the spool
// past Config.MaxBytes.
type OverflowPolicy string

const (
	// OverflowDropOldest deletes whole oldest segments until the batch fits.
	// Unshipped rows in them are lost: counted in
	// gpumeter_spool_dropped_rows_total and logged at Error.
	OverflowDropOldest OverflowPolicy = "drop_oldest"
	// OverflowReject refuses the batch: Append returns ErrFull and the caller
	// decides (the collector keeps or drops it). Nothing on disk is lost.
	OverflowReject OverflowPolicy = "reject"
)

// Defaults. A 10 s poll of an 8-GPU host spools well under 1 KiB a minute,
// so 1 GiB covers weeks of ClickHouse outage; 32 MiB segments keep the
// open-time scan and each deletion small.
const (
	DefaultSegmentBytes int64 = 32 << 20
	DefaultMaxBytes     int64 = 1 << 30
	DefaultOverflow           = OverflowDropOldest

	minSegmentBytes int64 = 4 << 10
	maxSegmentBytes int64 = 1 << 30
)

// Config of a spool directory.
type Config struct {
	// Dir holds the segment files, the cursor and a lock file. Required.
	Dir string `yaml:"dir"`
	// SegmentBytes is the size at which the writer starts a new segment.
	// One batch must fit in one segment.
	SegmentBytes int64 `yaml:"segment_bytes"`
	// MaxBytes bounds all segments together; at least 2 × SegmentBytes so
	// that dropping a segment always makes room.
	MaxBytes int64 `yaml:"max_bytes"`
	// Overflow is the policy once MaxBytes is reached.
	Overflow OverflowPolicy `yaml:"overflow"`
}

// DefaultConfig returns the defaults for a spool in dir.
func DefaultConfig(dir string) Config {
	return Config{
		Dir:          dir,
		SegmentBytes: DefaultSegmentBytes,
		MaxBytes:     DefaultMaxBytes,
		Overflow:     DefaultOverflow,
	}
}

// Validate reports every problem with the config, joined.
func (c Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("dir: missing"))
	}
	if c.SegmentBytes < minSegmentBytes || c.SegmentBytes > maxSegmentBytes {
		errs = append(errs, fmt.Errorf("segment_bytes: %d is outside [%d, %d]", c.SegmentBytes, minSegmentBytes, maxSegmentBytes))
	}
	if c.MaxBytes < 2*c.SegmentBytes {
		errs = append(errs, fmt.Errorf("max_bytes: %d is less than 2 × segment_bytes (%d)", c.MaxBytes, 2*c.SegmentBytes))
	}
	switch c.Overflow {
	case OverflowDropOldest, OverflowReject:
	default:
		errs = append(errs, fmt.Errorf("overflow: %q is not %q or %q", c.Overflow, OverflowDropOldest, OverflowReject))
	}
	return errors.Join(errs...)
}
