package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

// finish runs after the poll loop stopped. It hands what the loop's buffer
// still holds (samples the output refused, such as a full spool, and kept
// for retry) on to the output and, after a finite run, waits until
// everything is delivered: while the spool is full it waits for the
// shipper to free room and tries again, for as long as the shipper makes
// progress, up to drainTimeout. Samples the output never took are lost:
// they are counted (gpumeter_collector_dropped_samples_total), logged at
// Error with their number, and make the returned error. Samples in the
// spool are never lost by stopping: they ship on the next start.
func finish(ctx context.Context, drainTimeout time.Duration, batch *collectors.Batch, out *output, logger *slog.Logger) error {
	var unshipped error
	if ctx.Err() == nil {
		// A finite run ends when everything it produced is in ClickHouse.
		dctx, cancel := context.WithTimeout(ctx, drainTimeout)
		defer cancel()
		if n := batch.Pending(); n > 0 {
			logger.Info("collection finished; spooling the samples kept while the spool was full", "samples", n)
			unshipped = handOnKept(dctx, batch, out)
		}
		if unshipped == nil {
			// Logged once everything is spooled (the soak test relies on that).
			logger.Info("collection finished; waiting for the spool to ship")
			unshipped = out.drain(dctx)
		}
	}
	if batch.Pending() > 0 {
		// One last try, also after an interrupt (the shipper has stopped
		// then): what the spool takes now is kept on disk for the next start.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := batch.Flush(fctx); err != nil {
			logger.Debug("last flush before stopping", "err", err)
		}
	}
	atStop := batch.Abandon()
	if lost := batch.Dropped(); lost > 0 {
		cause := errors.New("unknown cause")
		if p := out.lastErr.Load(); p != nil {
			cause = *p
		}
		logger.Error("samples lost: the sink never took them", "samples", lost, "at_stop", atStop, "err", cause)
		return fmt.Errorf("%d samples lost: the sink never took them (%d of them still buffered when the collector stopped): %w", lost, atStop, cause)
	}
	if unshipped != nil {
		return fmt.Errorf("samples stay in the spool and ship on the next start: %w", unshipped)
	}
	return nil
}

// handOnKept flushes the buffer into the output; each time the output
// refuses, it waits for it to make room (the shipper to commit) and tries
// again. It returns nil once the buffer is empty, or why it gave up.
func handOnKept(ctx context.Context, batch *collectors.Batch, out *output) error {
	for {
		err := batch.Flush(ctx)
		if err == nil {
			return nil
		}
		if werr := out.waitRoom(ctx); werr != nil {
			// The shipper may have freed room between the refused flush and
			// the wait (its last commit emptied the backlog): one more try.
			if batch.Flush(ctx) == nil {
				return nil
			}
			return fmt.Errorf("%d samples not taken by the sink: %w", batch.Pending(), werr)
		}
	}
}
