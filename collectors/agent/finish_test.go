package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/spool"
)

// finish against a fake sink: what it does with samples the
// sink refused, by whether waiting frees room and whether the run was
// interrupted.
func TestFinishKeepsOrCountsEverySample(t *testing.T) {
	cases := []struct {
		name        string
		refusals    int  // appends the sink refuses before it takes samples again
		roomComes   bool // whether waitRoom reports room
		interrupted bool
		wantLost    int
		wantWaits   int
	}{
		{"the shipper frees room: every kept sample spooled", 2, true, false, 0, 2},
		{"the shipper cannot progress: every kept sample counted lost", 1000, false, false, 10, 1},
		{"interrupted, the spool still full: counted lost, no wait", 1000, true, true, 10, 0},
		{"interrupted, the spool takes them: nothing lost", 0, true, true, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sk := newOutput(nil)
			calls, took := 0, 0
			sk.counted = collectors.AppenderFunc(func(_ context.Context, s []collectors.Sample) error {
				calls++
				if calls <= tc.refusals {
					err := fmt.Errorf("append %d samples: %w", len(s), spool.ErrFull)
					sk.lastErr.Store(&err)
					return err
				}
				took += len(s)
				return nil
			})
			waits := 0
			sk.waitRoom = func(context.Context) error {
				waits++
				if !tc.roomComes {
					return errors.New("no room")
				}
				return nil
			}
			batch, err := collectors.NewBatch(collectors.BatchConfig{FlushRows: 100, MaxRows: 100}, sk.counted)
			if err != nil {
				t.Fatal(err)
			}
			if err := batch.Append(context.Background(), make([]collectors.Sample, 10)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.interrupted {
				cancel()
			}
			var logs bytes.Buffer
			err = finish(ctx, time.Minute, batch, sk, slog.New(slog.NewTextHandler(&logs, nil)))
			if tc.wantLost == 0 {
				if err != nil || took != 10 {
					t.Fatalf("err %v, sink took %d; want nil and all 10", err, took)
				}
			} else {
				want := fmt.Sprintf("%d samples lost", tc.wantLost)
				if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "spool full") {
					t.Fatalf("err %v, want %q and the cause", err, want)
				}
				if !strings.Contains(logs.String(), fmt.Sprintf("level=ERROR msg=\"samples lost: the sink never took them\" samples=%d", tc.wantLost)) {
					t.Errorf("no Error log with the count:\n%s", logs.String())
				}
			}
			if got := batch.Dropped(); got != uint64(tc.wantLost) || batch.Pending() != 0 {
				t.Errorf("dropped %d, pending %d; want %d and 0", got, batch.Pending(), tc.wantLost)
			}
			if took+int(batch.Dropped()) != 10 {
				t.Errorf("sink took %d, %d counted lost: not the 10 samples kept", took, batch.Dropped())
			}
			if waits != tc.wantWaits {
				t.Errorf("waited for room %d times, want %d", waits, tc.wantWaits)
			}
		})
	}
}
