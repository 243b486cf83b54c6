package collectors

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// BatchConfig configures a Batch.
type BatchConfig struct {
	// FlushRows: Append forwards once this many samples are buffered (1:
	// every poll goes out at once).
	FlushRows int
	// MaxRows bounds what is kept while the downstream appender fails; the
	// oldest samples beyond it are dropped and counted.
	MaxRows int
}

// Validate reports every problem with the config.
func (c BatchConfig) Validate() error {
	var errs []error
	if c.FlushRows < 1 {
		errs = append(errs, fmt.Errorf("flush rows: %d is below 1", c.FlushRows))
	}
	if c.MaxRows < c.FlushRows {
		errs = append(errs, fmt.Errorf("max rows: %d is below flush rows %d", c.MaxRows, c.FlushRows))
	}
	return errors.Join(errs...)
}

// Batch buffers samples in front of an appender: it forwards them in
// batches of at least FlushRows, keeps them when the appender fails and
// offers them again with the next batch (the store deduplicates by sample
// id, so a retry never counts twice). It holds samples in memory only; the
// on-disk spool replaces it where losing a buffer on a crash matters.
type Batch struct {
	cfg BatchConfig
	out Appender

	mu      sync.Mutex
	buf     []Sample
	dropped uint64
}

// NewBatch returns a Batch in front of out.
func NewBatch(cfg BatchConfig, out Appender) (*Batch, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	if out == nil {
		return nil, errors.New("batch: appender missing")
	}
	return &Batch{cfg: cfg, out: out}, nil
}

// Append buffers samples and forwards the buffer once it is full enough.
func (b *Batch) Append(ctx context.Context, samples []Sample) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, samples...)
	if over := len(b.buf) - b.cfg.MaxRows; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.dropped += uint64(over)
	}
	if len(b.buf) < b.cfg.FlushRows {
		return nil
	}
	return b.flushLocked(ctx)
}

// Flush forwards whatever is buffered.
func (b *Batch) Flush(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked(ctx)
}

func (b *Batch) flushLocked(ctx context.Context) error {
	if len(b.buf) == 0 {
		return nil
	}
	if err := b.out.Append(ctx, b.buf); err != nil {
		return fmt.Errorf("flush %d samples (kept for retry): %w", len(b.buf), err)
	}
	b.buf = b.buf[:0]
	return nil
}

// Pending is the number of buffered samples.
func (b *Batch) Pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buf)
}

// Dropped is the number of samples dropped because MaxRows was reached.
func (b *Batch) Dropped() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}
