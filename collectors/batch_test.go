package collectors

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// sizedAppender accepts at most limit samples per Append, like a spool
// whose segment holds that many, and refuses larger batches with
// ErrBatchTooLarge.
type sizedAppender struct {
	limit int
	got   []uint64
	calls int
}

func (a *sizedAppender) Append(_ context.Context, s []Sample) error {
	a.calls++
	if len(s) > a.limit {
		return fmt.Errorf("append %d samples: %w", len(s), ErrBatchTooLarge)
	}
	for _, x := range s {
		a.got = append(a.got, x.ID)
	}
	return nil
}

// A buffer larger than one downstream append (a spool segment) is split to
// what the appender takes; before the fix the whole buffer was retried as
// one Append, refused forever, and eventually dropped.
func TestBatchSplitsWhatTheAppenderCannotTakeAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name         string
		limit, rows  int
		appendChunks int
	}{
		{"buffer 20000, appender takes 3000", 3000, 20000, 4},
		{"buffer 7, appender takes 1", 1, 7, 1},
		{"buffer fits", 100, 50, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &sizedAppender{limit: tc.limit}
			b, err := NewBatch(BatchConfig{FlushRows: tc.rows, MaxRows: tc.rows}, out)
			if err != nil {
				t.Fatal(err)
			}
			var want []uint64
			per := (tc.rows + tc.appendChunks - 1) / tc.appendChunks
			for i := 0; i < tc.rows; i += per {
				var s []Sample
				for j := i; j < min(i+per, tc.rows); j++ {
					s = append(s, Sample{ID: uint64(j + 1)})
					want = append(want, uint64(j+1))
				}
				if err := b.Append(context.Background(), s); err != nil {
					t.Fatalf("append: %v", err)
				}
			}
			if err := b.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if b.Pending() != 0 || b.Dropped() != 0 {
				t.Fatalf("pending %d dropped %d, want 0 and 0", b.Pending(), b.Dropped())
			}
			if !slices.Equal(out.got, want) {
				t.Fatalf("appended %d samples (first %v), want %d in order", len(out.got), out.got[:min(5, len(out.got))], len(want))
			}
			// Once the appender's size is learnt, it is not probed again
			// for every flush: a second full buffer costs about rows/limit
			// appends, not a new halving from the top.
			out.calls = 0
			var s []Sample
			for j := 0; j < tc.rows; j++ {
				s = append(s, Sample{ID: uint64(j + 1)})
			}
			if err := b.Append(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			if most := 2*((tc.rows+tc.limit-1)/tc.limit) + 1; out.calls > most {
				t.Fatalf("second flush took %d appends, want at most %d", out.calls, most)
			}
		})
	}
}

// A sample the appender refuses even alone cannot be split further: the
// error is returned, what went out before it is not sent twice, and what
// follows it still goes out.
func TestBatchSingleSampleTooLarge(t *testing.T) {
	var got []uint64
	out := AppenderFunc(func(_ context.Context, s []Sample) error {
		for _, x := range s {
			if x.ID == 3 {
				return fmt.Errorf("append: %w", ErrBatchTooLarge)
			}
		}
		for _, x := range s {
			got = append(got, x.ID)
		}
		return nil
	})
	b, err := NewBatch(BatchConfig{FlushRows: 5, MaxRows: 10}, out)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Append(context.Background(), []Sample{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}, {ID: 5}})
	if !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("err = %v, want ErrBatchTooLarge", err)
	}
	if !slices.Equal(got, []uint64{1, 2, 4, 5}) {
		t.Fatalf("appended %v, want [1 2 4 5]", got)
	}
	if b.Pending() != 0 || b.Dropped() != 1 {
		t.Fatalf("pending %d dropped %d, want 0 and 1", b.Pending(), b.Dropped())
	}
}

// What a stopping collector abandons is counted as dropped, on top of
// what was dropped before, and leaves the buffer empty.
func TestBatchAbandonCountsWhatWasKept(t *testing.T) {
	down := AppenderFunc(func(context.Context, []Sample) error { return errors.New("down") })
	b, err := NewBatch(BatchConfig{FlushRows: 1, MaxRows: 3}, down)
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Append(context.Background(), []Sample{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}}) // one over MaxRows
	if n := b.Abandon(); n != 3 || b.Pending() != 0 || b.Dropped() != 4 {
		t.Fatalf("abandoned %d, pending %d, dropped %d; want 3, 0, 4", n, b.Pending(), b.Dropped())
	}
	if n := b.Abandon(); n != 0 || b.Dropped() != 4 {
		t.Fatalf("second abandon: %d, dropped %d", n, b.Dropped())
	}
}
