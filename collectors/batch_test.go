package collectors

import (
	"context"
	"errors"
	"testing"
)

func TestBatch(t *testing.T) {
	var got [][]uint64
	fail := true
	out := AppenderFunc(func(_ context.Context, s []Sample) error {
		if fail {
			return errors.New("down")
		}
		var ids []uint64
		for _, x := range s {
			ids = append(ids, x.ID)
		}
		got = append(got, ids)
		return nil
	})
	b, err := NewBatch(BatchConfig{FlushRows: 2, MaxRows: 3}, out)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := b.Append(ctx, []Sample{{ID: 1}}); err != nil {
		t.Fatalf("below flush rows: %v", err)
	}
	if err := b.Append(ctx, []Sample{{ID: 2}}); err == nil {
		t.Fatal("failed flush not reported")
	}
	if b.Pending() != 2 {
		t.Fatalf("kept %d after a failed flush, want 2", b.Pending())
	}
	// Over MaxRows while failing: the oldest go, and are counted.
	if err := b.Append(ctx, []Sample{{ID: 3}, {ID: 4}}); err == nil {
		t.Fatal("failed flush not reported")
	}
	if b.Pending() != 3 || b.Dropped() != 1 {
		t.Fatalf("pending %d dropped %d, want 3 and 1", b.Pending(), b.Dropped())
	}
	fail = false
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0]) != 3 || got[0][0] != 2 || got[0][2] != 4 {
		t.Fatalf("flushed %v, want [[2 3 4]]", got)
	}
	if b.Pending() != 0 {
		t.Fatalf("pending %d after flush", b.Pending())
	}
}

func TestBatchConfigValidate(t *testing.T) {
	if err := (BatchConfig{FlushRows: 0, MaxRows: 0}).Validate(); err == nil {
		t.Fatal("zero flush rows accepted")
	}
	if err := (BatchConfig{FlushRows: 10, MaxRows: 5}).Validate(); err == nil {
		t.Fatal("max rows below flush rows accepted")
	}
}
