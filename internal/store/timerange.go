package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/fault"
)

// ErrTimeOutOfRange marks a time the connected server cannot represent: bad
// input, not a server failure.
var ErrTimeOutOfRange = fault.Validation(errors.New("time outside what this ClickHouse server represents"))

// maxTimeCandidates are the latest DateTime values servers are known to
// represent, newest servers first: 24.x holds the whole 32-bit range, while
// 18.16's date tables end with 2105 (a later time reads back as 0 and a
// query over it silently finds nothing).
var maxTimeCandidates = []time.Time{
	collectors.MaxTime,
	time.Date(2105, 12, 31, 23, 59, 59, 0, time.UTC),
}

// MaxTime is the latest time the connected server represents, probed once
// per store.
func (s *Store) MaxTime(ctx context.Context) (time.Time, error) {
	s.maxTimeMu.Lock()
	defer s.maxTimeMu.Unlock()
	if !s.maxTime.IsZero() {
		return s.maxTime, nil
	}
	for _, t := range maxTimeCandidates {
		var got uint32
		if err := s.conn.QueryRow(ctx, "SELECT toUInt32(toDateTime(?, 'UTC'))", t.Format(time.DateTime)).Scan(&got); err != nil {
			return time.Time{}, fmt.Errorf("probe the server's time range: %w", err)
		}
		if int64(got) == t.Unix() {
			s.maxTime = t
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("probe the server's time range: %s does not read back", maxTimeCandidates[len(maxTimeCandidates)-1].Format(time.RFC3339))
}

// checkTimes refuses times the server cannot represent, naming the limit,
// instead of letting a query over them return nothing.
func (s *Store) checkTimes(ctx context.Context, what string, ts ...time.Time) error {
	limit, err := s.MaxTime(ctx)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if t.After(limit) {
			return fmt.Errorf("%s: %s is after %s: %w", what, t.UTC().Format(time.RFC3339), limit.Format(time.RFC3339), ErrTimeOutOfRange)
		}
	}
	return nil
}
