package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/internal/spool"
	"github.com/gpumeter/gpumeter/internal/store"
)

// delivery is the spool, the shipper goroutine and the store behind it.
type delivery struct {
	spool    *spool.Spool
	cfg      spool.Config
	stop     func()
	shipDone <-chan struct{} // closed when the shipper goroutine returned
}

// drainPoll is how often a drain looks at the spool's backlog.
const drainPoll = 50 * time.Millisecond

// startDelivery opens the store (without requiring ClickHouse to be up:
// the spool holds samples until it is), the spool, and runs the shipper.
func startDelivery(ctx context.Context, g *globals, f collectFlags, reg prometheus.Registerer, logger *slog.Logger) (*delivery, error) {
	dir := f.spoolDir
	if dir == "" {
		dir = g.cfg.Collector.Spool.Dir
		if f.simulate {
			// A spool belongs to one destination: keep simulated runs
			// against different databases apart.
			sum := sha256.Sum256([]byte(g.dsn))
			dir = filepath.Join(os.TempDir(), "gpumeter-sim-spool-"+hex.EncodeToString(sum[:6]))
		}
	}
	scfg := g.cfg.Collector.Spool
	scfg.Dir = dir
	scfg.MaxBytes, scfg.Overflow = f.spoolMaxBytes, spool.OverflowPolicy(f.spoolOverflow)
	if err := scfg.Validate(); err != nil {
		return nil, usageError{err}
	}
	shcfg := g.cfg.Collector.Shipper
	shcfg.BatchRows, shcfg.FlushInterval, shcfg.BackoffMax = f.shipRows, f.shipFlush, f.shipBackoff
	if shcfg.BackoffInitial > shcfg.BackoffMax {
		shcfg.BackoffInitial = shcfg.BackoffMax
	}
	if err := shcfg.Validate(); err != nil {
		return nil, usageError{err}
	}
	cfg, err := store.ParseDSN(g.dsn)
	if err != nil {
		return nil, usageError{err}
	}
	st, err := store.Connect(cfg, g.logger)
	if err != nil {
		return nil, err
	}
	if err := st.Ping(ctx); err != nil {
		logger.Warn("clickhouse unreachable at start; samples wait in the spool", "err", err)
	}
	sp, err := spool.Open(ctx, scfg, logger, reg)
	if err != nil {
		st.Close()
		return nil, err
	}
	sh, err := spool.NewShipper(sp, st, shcfg, logger, reg)
	if err != nil {
		sp.Close()
		st.Close()
		return nil, err
	}
	// The shipper outlives the poll loop (it drains after a finite run), so
	// it has its own context, cancelled by stop.
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
	d := &delivery{spool: sp, cfg: scfg, shipDone: shipDone}
	d.stop = func() {
		stopShip()
		cancel()
		wg.Wait()
		if err := sp.Close(); err != nil {
			logger.Warn("close spool", "err", err)
		}
		st.Close()
	}
	return d, nil
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
