package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
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

// Every scheduled job has its series from the start, before any run: a
// failure right after a restart is an increase from 0, and a job that
// never succeeds after a restart ages in the lag alert's gauge.
func TestSchedulerExportsJobSeriesBeforeTheFirstRun(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := NewScheduler(slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	before := float64(time.Now().Unix())
	for _, name := range []string{"rollup", "invoice"} {
		if err := s.Add(context.Background(), name, "@yearly", time.Second, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	after := float64(time.Now().Unix() + 1)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{} // "name task" → value (a histogram's count)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var task string
			for _, l := range m.GetLabel() {
				if l.GetName() == "task" {
					task = l.GetValue()
				}
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			got[f.GetName()+" "+task] = v
		}
	}
	for _, task := range []string{"rollup", "invoice"} {
		for _, name := range []string{"gpumeter_job_runs_total", "gpumeter_job_failures_total", "gpumeter_job_duration_seconds"} {
			if v, ok := got[name+" "+task]; !ok || v != 0 {
				t.Errorf("%s{task=%q}: %v (present %v), want 0 before any run", name, task, v, ok)
			}
		}
		if v, ok := got["gpumeter_job_last_success_timestamp_seconds "+task]; !ok || v < before || v > after {
			t.Errorf("last success of %s: %v (present %v), want the time it was scheduled, in [%v, %v]", task, v, ok, before, after)
		}
	}
}

// A job that returns ErrSkipped (a follower replica's) counts neither a
// run nor a failure.
func TestSkippedRunIsNotCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := NewScheduler(slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	if err := s.Add(context.Background(), "rollup", "@every 1s", time.Second, func(context.Context) error {
		calls.Add(1)
		return fmt.Errorf("follower: %w", ErrSkipped)
	}); err != nil {
		t.Fatal(err)
	}
	s.Start()
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	s.Stop()
	if calls.Load() < 2 {
		t.Fatalf("job called %d times in 5 s at @every 1s", calls.Load())
	}
	if runs, fails := testutil.ToFloat64(s.runs.WithLabelValues("rollup")), testutil.ToFloat64(s.fails.WithLabelValues("rollup")); runs != 0 || fails != 0 {
		t.Errorf("skipped runs counted: runs %v, failures %v; want 0, 0", runs, fails)
	}
}
