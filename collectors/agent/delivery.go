package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/spool"
)

// delivery is the spool and the shipper goroutine that empties it into
// the sink.
type delivery struct {
	spool    *spool.Spool
	shipDone <-chan struct{} // closed when the shipper goroutine returned
}

// drainPoll is how often a drain looks at the spool's backlog.
const drainPoll = 50 * time.Millisecond

// spoolOutput opens the spool and runs the shipper into sink: samples are
// fsynced to disk first and delivered at least once, across outages and
// restarts. ClickHouse need not be up: the spool holds samples until it is.
func spoolOutput(ctx context.Context, cfg Config, sink Sink, reg prometheus.Registerer, logger *slog.Logger) (*output, error) {
	scfg, shcfg := cfg.Spool, cfg.Shipper
	if err := scfg.Validate(); err != nil {
		return nil, fault.Validation(err)
	}
	// A lower ceiling lowers the first wait too.
	shcfg.BackoffInitial = min(shcfg.BackoffInitial, shcfg.BackoffMax)
	if err := shcfg.Validate(); err != nil {
		return nil, fault.Validation(err)
	}
	if err := sink.Ping(ctx); err != nil {
		logger.Warn("clickhouse unreachable at start; samples wait in the spool", "err", err)
	}
	sp, err := spool.Open(ctx, scfg, logger, reg)
	if err != nil {
		return nil, err
	}
	sh, err := spool.NewShipper(sp, sink, shcfg, logger, reg)
	if err != nil {
		sp.Close()
		return nil, err
	}
	// The shipper outlives the poll loop (it drains after a finite run), so
	// it has its own context, cancelled by close.
	shipCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	shipDone := make(chan struct{})
	go func() {
		defer wg.Done()
		defer close(shipDone)
		if err := sh.Run(shipCtx); err != nil {
			logger.Error("shipper stopped", "err", err)
		}
	}()
	stopShip := context.AfterFunc(ctx, cancel) // an interrupt stops shipping at once
	d := &delivery{spool: sp, shipDone: shipDone}
	o := newOutput(sp)
	o.drain, o.waitRoom = d.drain, d.waitShipped
	o.checkPoll = func(gpus int) error {
		if err := scfg.CheckPoll(gpus); err != nil {
			return fault.Validationf("collector.spool.%v", err)
		}
		return nil
	}
	o.close = sync.OnceFunc(func() {
		stopShip()
		cancel()
		wg.Wait()
		if err := sp.Close(); err != nil {
			logger.Warn("close spool", "err", err)
		}
	})
	return o, nil
}

// drain waits until every spooled sample has been shipped and committed.
func (d *delivery) drain(ctx context.Context) error {
	// Bytes, not rows: the byte backlog is the cursor's distance to the
	// end of the spool, exact even when a corrupt region was skipped
	// (whose rows the reader cannot count).
	return d.waitBacklog(ctx, "", func(bytes int64) bool { return bytes == 0 })
}

// waitBacklog polls the spool's byte backlog until done says so, the
// shipper stops or ctx ends; the error counts the rows not shipped.
func (d *delivery) waitBacklog(ctx context.Context, why string, done func(bytes int64) bool) error {
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		rows, bytes := d.spool.Backlog()
		if done(bytes) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s%d rows not shipped yet: %w", why, rows, ctx.Err())
		case <-d.shipDone:
			return fmt.Errorf("%s%d rows not shipped yet: %w", why, rows, errShipperStopped)
		case <-tick.C:
		}
	}
}

// errShipperStopped: the shipper goroutine returned, so nothing more ships.
var errShipperStopped = errors.New("shipper stopped")

// waitShipped blocks until the shipper has committed something since the
// call, which is what frees room in a full spool (a commit deletes the
// segments behind the cursor; an append deletes them too). It fails at
// once when nothing spooled is left to ship, since waiting cannot free
// room then, and when the shipper stopped or ctx ended.
func (d *delivery) waitShipped(ctx context.Context) error {
	_, before := d.spool.Backlog()
	if before == 0 {
		return errors.New("nothing spooled is left to ship, so waiting frees no room")
	}
	return d.waitBacklog(ctx, "the shipper made no room: ", func(bytes int64) bool { return bytes < before })
}
