package spool

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// spoolMetrics are the spool's own counters; the shipper adds the lag.
type spoolMetrics struct {
	appendedBatches  prometheus.Counter
	appendedRows     prometheus.Counter
	appendedBytes    prometheus.Counter
	rejectedBatches  prometheus.Counter
	rejectedRows     prometheus.Counter
	droppedSegments  prometheus.Counter
	droppedRows      prometheus.Counter
	droppedDelivered prometheus.Counter
	corruptRegions   prometheus.Counter
	corruptBytes     prometheus.Counter
	corruptRows      prometheus.Counter
	missingSegments  prometheus.Counter
	cursorResets     prometheus.Counter
	truncatedBytes   prometheus.Counter
	writeErrors      prometheus.Counter
	diskFullErrors   prometheus.Counter
	diskFull         prometheus.Gauge
	all              []prometheus.Collector
}

func newSpoolMetrics(s *Spool) *spoolMetrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gpumeter", Subsystem: "spool", Name: name, Help: help})
	}
	m := &spoolMetrics{
		appendedBatches:  c("appended_batches_total", "Batches appended and fsynced."),
		appendedRows:     c("appended_rows_total", "Samples appended and fsynced."),
		appendedBytes:    c("appended_bytes_total", "Record bytes appended and fsynced."),
		rejectedBatches:  c("rejected_batches_total", "Batches refused with ErrFull under the reject overflow policy."),
		rejectedRows:     c("rejected_rows_total", "Samples refused with ErrFull under the reject overflow policy."),
		droppedSegments:  c("dropped_segments_total", "Segments deleted by the drop_oldest overflow policy."),
		droppedRows:      c("dropped_rows_total", "Unshipped samples in segments deleted by the drop_oldest overflow policy (data lost)."),
		droppedDelivered: c("dropped_rows_delivered_total", "Rows counted in dropped_rows_total that the shipper had delivered before their segment was dropped: loss is dropped_rows_total minus this."),
		corruptRegions:   c("corrupt_regions_total", "Corrupt records or segment headers the reader skipped."),
		corruptBytes:     c("corrupt_bytes_total", "Bytes the reader skipped as corrupt."),
		corruptRows:      c("corrupt_rows_total", "Samples in the records the reader skipped as corrupt, as far as their headers tell (a lower bound; data lost)."),
		missingSegments:  c("missing_segments_total", "Segment files missing between the cursor and the last segment, never deleted by the spool (data lost, rows unknown at open)."),
		cursorResets:     c("cursor_resets_total", "Committed cursors found unreadable or past the spool's data and reset to the start of the spool (retained data is sent again)."),
		truncatedBytes:   c("recovered_truncated_bytes_total", "Bytes of torn tail cut off the last segment when the spool was opened."),
		writeErrors:      c("write_errors_total", "Appends that failed to write or fsync."),
		diskFullErrors:   c("disk_full_total", "Appends refused because the file system (or quota) was full: those batches are not spooled."),
		diskFull: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpumeter", Subsystem: "spool", Name: "disk_full",
			Help: "1 while the last append failed for want of space, 0 once one succeeds."}),
	}
	m.all = []prometheus.Collector{
		m.appendedBatches, m.appendedRows, m.appendedBytes, m.rejectedBatches, m.rejectedRows,
		m.droppedSegments, m.droppedRows, m.droppedDelivered, m.corruptRegions, m.corruptBytes, m.corruptRows, m.missingSegments, m.cursorResets,
		m.truncatedBytes, m.writeErrors,
		m.diskFullErrors, m.diskFull,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpumeter", Subsystem: "spool", Name: "segments", Help: "Segment files in the spool."},
			func() float64 { n, _ := s.usage(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpumeter", Subsystem: "spool", Name: "bytes", Help: "Bytes of segment files in the spool."},
			func() float64 { _, b := s.usage(); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpumeter", Subsystem: "spool", Name: "max_bytes", Help: "Configured bound on the spool's bytes."},
			func() float64 { return float64(s.cfg.MaxBytes) }),
	}
	return m
}

// register adds every collector to reg; a nil reg registers nothing.
func register(reg prometheus.Registerer, cs []prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}
