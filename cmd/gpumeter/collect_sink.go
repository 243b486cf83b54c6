package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/importer"
)

// sink is where the collector's batches go, as --sink chose.
type sink struct {
	counted collectors.Appender // the sink, counting what it took in written
	written *atomic.Uint64
	lastErr *atomic.Pointer[error]      // the last error the sink returned, for the report of what it never took
	drain   func(context.Context) error // waits until what was handed on is delivered
	// waitRoom blocks until the sink may take what it refused before (the
	// shipper freed room in the spool); an error says waiting cannot help.
	waitRoom  func(context.Context) error
	checkPoll func(gpus int) error // refuses a poll the sink can never take
	close     func()
}

func openSink(ctx context.Context, g *globals, f collectFlags, reg prometheus.Registerer, logger *slog.Logger) (sink, error) {
	sk := sink{
		written:   new(atomic.Uint64),
		lastErr:   new(atomic.Pointer[error]),
		drain:     func(context.Context) error { return nil },
		waitRoom:  func(context.Context) error { return errors.New("the sink frees no room by waiting") },
		checkPoll: func(int) error { return nil },
		close:     func() {},
	}
	var out collectors.Appender
	switch f.sink {
	case "clickhouse":
		// Samples go to the on-disk spool first; the shipper delivers them
		// to ClickHouse at least once, and survives outages and restarts.
		d, err := startDelivery(ctx, g, f, reg, logger)
		if err != nil {
			return sink{}, err
		}
		sk.close, sk.drain, sk.waitRoom, out = d.stop, d.drain, d.waitShipped, d.spool
		sk.checkPoll = func(gpus int) error {
			if err := d.cfg.CheckPoll(gpus); err != nil {
				return usageErrorf("collector.spool.%v", err)
			}
			return nil
		}
	case "jsonl":
		var err error
		if out, err = jsonlSink(g.stdout); err != nil {
			return sink{}, err
		}
	case "discard":
		out = collectors.AppenderFunc(func(context.Context, []collectors.Sample) error { return nil })
	}
	sk.counted = collectors.AppenderFunc(func(ctx context.Context, s []collectors.Sample) error {
		if err := out.Append(ctx, s); err != nil {
			sk.lastErr.Store(&err)
			return err
		}
		sk.written.Add(uint64(len(s)))
		return nil
	})
	return sk, nil
}

// jsonlSink writes samples as JSON Lines with the importer's writer: the
// format `gpumeter import` reads (docs/import.md).
func jsonlSink(w io.Writer) (collectors.Appender, error) {
	jw, err := importer.NewWriter(w, importer.FormatJSONL)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	return collectors.AppenderFunc(func(_ context.Context, samples []collectors.Sample) error {
		mu.Lock()
		defer mu.Unlock()
		if err := jw.Write(samples); err != nil {
			return err
		}
		// Flushed at every batch: the file is whole whenever the collector stops.
		return jw.Flush()
	}), nil
}
