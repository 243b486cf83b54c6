package billing

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSchedulerRunsJobsAndCountsFailures(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := NewScheduler(slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 10)
	failed := make(chan struct{}, 10)
	ctx := context.Background()
	if err := s.Add(ctx, "ok", "@every 1s", time.Second, func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("job context has no deadline")
		}
		ran <- struct{}{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, "bad", "@every 1s", time.Second, func(context.Context) error {
		defer func() { failed <- struct{}{} }()
		return errors.New("boom")
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, "x", "not a spec", time.Second, func(context.Context) error { return nil }); err == nil {
		t.Fatal("bad cron spec accepted")
	}
	s.Start()
	<-ran
	<-failed
	s.Stop()
	if got := testutil.ToFloat64(s.fails.WithLabelValues("bad")); got < 1 {
		t.Errorf("failures of bad = %v", got)
	}
	if got := testutil.ToFloat64(s.fails.WithLabelValues("ok")); got != 0 {
		t.Errorf("failures of ok = %v", got)
	}
	if n, err := testutil.GatherAndCount(reg, "gpumeter_job_runs_total"); err != nil || n != 2 {
		t.Errorf("runs counter series = %d (%v), want one per job", n, err)
	}
}
