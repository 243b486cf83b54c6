package agent

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/gpumeter/gpumeter/collectors"
)

// output is where the poll loop's batches go.
type output struct {
	counted collectors.Appender // the output, counting what it took in written
	written *atomic.Uint64
	lastErr *atomic.Pointer[error]      // the last error the output returned, for the report of what it never took
	drain   func(context.Context) error // waits until what was handed on is delivered
	// waitRoom blocks until the output may take what it refused before
	// (the shipper freed room in the spool); an error says waiting cannot
	// help.
	waitRoom  func(context.Context) error
	checkPoll func(gpus int) error // refuses a poll the output can never take
	close     func()
}

// newOutput counts what out takes; the other parts do nothing until set.
func newOutput(out collectors.Appender) *output {
	o := &output{
		written:   new(atomic.Uint64),
		lastErr:   new(atomic.Pointer[error]),
		drain:     func(context.Context) error { return nil },
		waitRoom:  func(context.Context) error { return errors.New("the sink frees no room by waiting") },
		checkPoll: func(int) error { return nil },
		close:     func() {},
	}
	o.counted = collectors.AppenderFunc(func(ctx context.Context, s []collectors.Sample) error {
		if err := out.Append(ctx, s); err != nil {
			o.lastErr.Store(&err)
			return err
		}
		o.written.Add(uint64(len(s)))
		return nil
	})
	return o
}

// directOutput hands batches straight to out: nothing to drain.
func directOutput(out collectors.Appender) *output { return newOutput(out) }
