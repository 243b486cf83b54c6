package collectors

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrBatchTooLarge is returned (wrapped) by an Appender that cannot take
// so many samples in one call, such as a spool whose segment is smaller
// than the batch's encoding. A Batch then splits what it forwards.
var ErrBatchTooLarge = errors.New("batch too large for one append")

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

	mu        sync.Mutex
	buf       []Sample
	dropped   uint64
	chunkRows int // most samples per downstream Append; 0 until one was too large
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
	n := len(b.buf)
	sent, err := b.forward(ctx, b.buf)
	// What went out is gone from the buffer, so a retry never sends it
	// again; what did not stays, in order.
	b.buf = append(b.buf[:0], b.buf[sent:]...)
	if err != nil {
		return fmt.Errorf("flush %d samples (%d kept for retry): %w", n, len(b.buf), err)
	}
	return nil
}

// forward appends samples in chunks the appender takes and returns how
// many leading samples were sent (or dropped as too large alone). A chunk
// refused with ErrBatchTooLarge is halved, and the size that worked is
// kept for later flushes so that the appender is not probed every time.
func (b *Batch) forward(ctx context.Context, samples []Sample) (int, error) {
	var tooLarge error
	sent := 0
	for sent < len(samples) {
		chunk := len(samples) - sent
		if b.chunkRows > 0 {
			chunk = min(chunk, b.chunkRows)
		}
		err := b.out.Append(ctx, samples[sent:sent+chunk])
		switch {
		case err == nil:
			sent += chunk
		case errors.Is(err, ErrBatchTooLarge) && chunk > 1:
			b.chunkRows = chunk / 2
		case errors.Is(err, ErrBatchTooLarge):
			// One sample the appender can never take: keeping it would stop
			// everything behind it for good. It is dropped and counted, and
			// the error reaches the caller, which logs it.
			b.dropped++
			sent++
			tooLarge = fmt.Errorf("sample %d dropped: %w", samples[sent-1].ID, err)
		default:
			return sent, err
		}
	}
	return sent, tooLarge
}

// Abandon drops whatever is still buffered, counting it in Dropped, and
// returns how many samples that was. The collector calls it when it stops
// with samples its sink never took: they are lost, and must be counted as
// lost rather than vanish with the process.
func (b *Batch) Abandon() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.buf)
	clear(b.buf)
	b.buf = b.buf[:0]
	b.dropped += uint64(n)
	return n
}

// Pending is the number of buffered samples.
func (b *Batch) Pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buf)
}

// Dropped is the number of samples dropped because MaxRows was reached,
// because the appender refused one sample even alone, or because they were
// still buffered when Abandon was called.
func (b *Batch) Dropped() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}
