package demo

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

// memStore keeps samples by id, as the store deduplicates them.
type memStore map[uint64]collectors.Sample

func (m memStore) InsertSamples(_ context.Context, s []collectors.Sample) error {
	for _, x := range s {
		m[x.ID] = x
	}
	return nil
}

func (m memStore) ScanSamples(_ context.Context, gpus []string, from, to time.Time, fn func(collectors.Sample) error) error {
	want := map[string]bool{}
	for _, g := range gpus {
		want[g] = true
	}
	for _, s := range m {
		if want[s.GPUUUID] && s.Start.Before(to) && s.End.After(from) {
			if err := fn(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// Import stores every row of the bundled set once; a second import stores
// nothing new.
func TestImport(t *testing.T) {
	st := memStore{}
	rows := bytes.Count(UsageCSV, []byte("\n")) - 1
	res, err := Import(context.Background(), st)
	if err != nil || res.Rows != rows || res.Stored != rows || len(st) != rows {
		t.Fatalf("%+v, %v: %d stored of %d rows", res, err, len(st), rows)
	}
	res, err = Import(context.Background(), st)
	if err != nil || res.Stored != 0 || res.Unchanged != rows {
		t.Fatalf("again: %+v, %v", res, err)
	}
}
