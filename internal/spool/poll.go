package spool

import "fmt"

// What one poll of a host can spool, for refusing at start a segment size
// that cannot take one: a GPU yields at most seven MIG instances plus its
// idle row (time-sliced GPUs with many processes yield more, and are split
// across records by collectors.Batch), and a sample encodes in at most
// about 256 bytes with 64-byte names (81 bytes is typical: see
// docs/delivery.md).
const (
	pollRowsPerGPU  = 8
	pollBytesPerRow = 256
)

// CheckPoll reports whether a segment of this config can take one poll of
// a host with gpus GPUs.
func (c Config) CheckPoll(gpus int) error {
	need := int64(segHeaderLen) + recHeaderLen + int64(gpus)*pollRowsPerGPU*pollBytesPerRow
	if c.SegmentBytes < need {
		return fmt.Errorf("segment_bytes: %d cannot take one poll of %d GPUs (up to %d samples): use at least %d",
			c.SegmentBytes, gpus, gpus*pollRowsPerGPU, need)
	}
	return nil
}
