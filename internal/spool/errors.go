package spool

import (
	"errors"

	"github.com/gpumeter/gpumeter/collectors"
)

// Sentinels, checked with errors.Is: callers branch on them, so every error
// that carries one wraps it with the operation that met it.
var (
	// ErrFull is returned by Append under the reject policy when the batch
	// does not fit in Config.MaxBytes. Nothing of the batch was written.
	ErrFull = errors.New("spool full")

	// ErrCorruptSegment marks bytes on disk that are not a whole, checksummed
	// batch where one should be: a bad header, a bad CRC, an undecodable
	// payload. The reader reports it once per corrupt region and moves past it.
	ErrCorruptSegment = errors.New("corrupt spool segment")

	// ErrBatchTooLarge is returned by Append for a batch whose encoding does
	// not fit in one segment. It is collectors.ErrBatchTooLarge, so a
	// collectors.Batch in front of the spool splits the batch instead of
	// retrying it whole forever.
	ErrBatchTooLarge = collectors.ErrBatchTooLarge

	// ErrInvalidSample is returned by Append for a batch holding a sample
	// that fails collectors.Sample.Validate; nothing of the batch is written,
	// so no sample the store would refuse can block the shipper.
	ErrInvalidSample = errors.New("invalid sample")

	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("spool closed")
)
