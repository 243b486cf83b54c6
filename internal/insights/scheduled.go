package insights

import (
	"context"
	"time"
)

// DetectScheduled is the anomaly job `gpumeter serve` runs on
// insights.schedule: the lookback before the hours the rollup has closed
// (closed; nothing before its first run), saved and enqueued.
func (s *Service) DetectScheduled(ctx context.Context, closed func(context.Context) (time.Time, bool, error), lookback time.Duration) error {
	through, ok, err := closed(ctx)
	if err != nil || !ok {
		return err
	}
	found, fresh, err := s.DetectClosed(ctx, through, lookback)
	if err != nil {
		return err
	}
	s.logger.Info("anomalies checked", "through", through, "found", len(found), "new", len(fresh))
	return nil
}
