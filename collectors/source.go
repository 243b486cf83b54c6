package collectors

import (
	"context"
	"time"
)

// Source reads the GPUs of one host. A GPU that cannot be read comes back
// with GPUReading.Err set so that the other GPUs still count; the error
// return is for the source as a whole (the driver is gone).
//
// Read is called once per interval with the interval's bounds; the first
// call, with start == end, only sets the baselines of counters and its
// result is discarded.
type Source interface {
	Read(ctx context.Context, start, end time.Time) ([]GPUReading, error)
}

// Attributor fills GPUReading.Claims, MIGInstance.Claims and Process.Owner
// where they are still empty. Attributors run in order; each leaves what an
// earlier one set alone.
type Attributor interface {
	Attribute(ctx context.Context, gpus []GPUReading) error
}

// Appender takes the samples of one poll (the spool, a batch in front of
// the store, a test). The slice is reused after Append returns: an
// implementation that keeps samples copies them.
type Appender interface {
	Append(ctx context.Context, samples []Sample) error
}

// AppenderFunc adapts a function to Appender.
type AppenderFunc func(ctx context.Context, samples []Sample) error

// Append calls f.
func (f AppenderFunc) Append(ctx context.Context, samples []Sample) error { return f(ctx, samples) }

// ApportionFunc turns one GPU's attributed reading for [start, end) into
// samples appended to dst.
type ApportionFunc func(dst []Sample, host string, start, end time.Time, gpu *GPUReading) []Sample

// Clock is the loop's time: the wall clock on a GPU host, simulated time
// for the simulated fleet.
type Clock interface {
	Now() time.Time
	// WaitUntil returns once the clock has reached t, or with ctx's error.
	WaitUntil(ctx context.Context, t time.Time) error
}

// WallClock is the real clock.
type WallClock struct{}

// Now returns the current time.
func (WallClock) Now() time.Time { return time.Now() }

// WaitUntil blocks until t or until ctx is done.
func (WallClock) WaitUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
