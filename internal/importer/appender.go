package importer

import (
	"context"
	"io"
	"sync"

	"github.com/gpumeter/gpumeter/collectors"
)

// NewAppender writes each batch of samples to w in format with a Writer:
// the file `gpumeter import` reads. Every batch is flushed, so what was
// written is whole whenever the caller stops; batches may come from
// several goroutines.
func NewAppender(w io.Writer, format Format) (collectors.Appender, error) {
	jw, err := NewWriter(w, format)
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
		return jw.Flush()
	}), nil
}
