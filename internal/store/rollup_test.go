package store_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// rawAndHourly reads the same hourly usage, per hour, tenant, department and
// SKU, once from the deduplicated raw samples and once from usage_hourly.
func rawAndHourly(t *testing.T, s *store.Store, from, to time.Time) (raw, hourly []usage.Row) {
	t.Helper()
	ctx := context.Background()
	q := usage.Query{From: from, To: to, Bucket: usage.BucketHour,
		GroupBy: []usage.Dimension{usage.DimTenant, usage.DimDepartment, usage.DimSKU}}
	raw, err := s.Usage(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	q.Source = usage.SourceHourly
	if hourly, err = s.Usage(ctx, q); err != nil {
		t.Fatal(err)
	}
	return raw, hourly
}

// assertHourlyMatchesRaw compares every meter of usage_hourly with the
// deduplicated raw samples, per hour, tenant, department and SKU.
func assertHourlyMatchesRaw(t *testing.T, s *store.Store, from, to time.Time) {
	t.Helper()
	raw, hourly := rawAndHourly(t, s, from, to)
	if len(raw) == 0 || len(raw) != len(hourly) {
		t.Fatalf("raw has %d groups, hourly %d", len(raw), len(hourly))
	}
	for i := range raw {
		if raw[i] != hourly[i] {
			t.Errorf("group %d:\n raw    %+v\n hourly %+v", i, raw[i], hourly[i])
		}
	}
}

func TestRollupLateSamplesAndReruns(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	logger := slog.New(slog.DiscardHandler)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	samples := testSamples(start, 8*360*6, "acme", "globex", "initech") // 6 hours
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	job := rollup.New(s, rollup.DefaultConfig(), time.Now, logger)
	res, err := job.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Closed) != 1 || !res.Closed[0].From.Equal(start) {
		t.Fatalf("first run closed %v, want everything from %v", res.Closed, start)
	}
	assertHourlyMatchesRaw(t, s, start, start.Add(6*time.Hour))

	// Late samples for hour 2 (a new tenant) and a re-delivery of hour 4.
	late := testSamples(start.Add(2*time.Hour), 8*36, "umbrella")
	if err := s.InsertSamples(ctx, late); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertSamples(ctx, samples[8*360*4:8*360*5]); err != nil {
		t.Fatal(err)
	}
	res, err = job.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lateHours := map[time.Time]bool{}
	for _, h := range res.Late {
		lateHours[h] = true
	}
	if !lateHours[start.Add(2*time.Hour)] || !lateHours[start.Add(4*time.Hour)] {
		t.Fatalf("second run recomputed %v, want hours 2 and 4", res.Late)
	}
	assertHourlyMatchesRaw(t, s, start, start.Add(6*time.Hour))

	// A third run with nothing new closes nothing (it may recompute hours
	// inserted within billing.InsertSlack, harmlessly); a manual re-run of
	// the whole range changes nothing.
	res, err = job.Run(ctx)
	if err != nil || len(res.Closed) != 0 {
		t.Fatalf("idle run: %+v, %v", res, err)
	}
	assertHourlyMatchesRaw(t, s, start, start.Add(6*time.Hour))
	if err := job.RollupRange(ctx, start, start.Add(6*time.Hour)); err != nil {
		t.Fatal(err)
	}
	assertHourlyMatchesRaw(t, s, start, start.Add(6*time.Hour))
}

func TestRetentionDropsOnlyInvoicedRolledUpMonths(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	logger := slog.New(slog.DiscardHandler)
	oct, nov := monthStart(2026, 10), monthStart(2026, 11)
	insertAcmeSamples(t, s, oct, nov)
	if _, err := rollup.New(s, rollup.DefaultConfig(), time.Now, logger).Run(ctx); err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC) }
	ret := rollup.NewRetention(s, rollup.RetentionConfig{RawDays: 30, Schedule: "@daily"}, now, logger)
	dropped, err := ret.Run(ctx)
	if err != nil || len(dropped) != 0 {
		t.Fatalf("dropped %v (%v) before any month was invoiced", dropped, err)
	}
	if err := s.MarkPeriodClosed(ctx, oct, time.Now()); err != nil {
		t.Fatal(err)
	}
	dropped, err = ret.Run(ctx)
	if err != nil || len(dropped) != 1 || !dropped[0].Equal(oct) {
		t.Fatalf("dropped %v (%v), want October only", dropped, err)
	}
	months, err := s.RawMonths(ctx)
	if err != nil || len(months) != 1 || !months[0].Equal(nov) {
		t.Fatalf("raw months left %v (%v), want November", months, err)
	}
	rows, err := s.Usage(ctx, usage.Query{From: oct, To: nov, Source: usage.SourceHourly})
	if err != nil || rows[0].Samples != 8*36 {
		t.Fatalf("hourly October after dropping raw: %+v (%v)", rows, err)
	}

	// A late sample for October, whose raw month is gone, must not make the
	// rollup replace October's hour with that one sample.
	if err := s.InsertSamples(ctx, testSamples(oct.Add(30*time.Second), 1, "acme")); err != nil {
		t.Fatal(err)
	}
	job := rollup.New(s, rollup.DefaultConfig(), time.Now, logger)
	if _, err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err = s.Usage(ctx, usage.Query{From: oct, To: nov, Source: usage.SourceHourly})
	if err != nil || rows[0].Samples != 8*36 {
		t.Fatalf("hourly October after a late sample in its dropped month: %+v (%v)", rows, err)
	}
	if err := job.RollupRange(ctx, oct, nov); err == nil {
		t.Fatal("a manual rollup of a dropped month was accepted")
	}
}

// A rollup whose clock lags the one that wrote before it must still win:
// versions are anchored above what usage_hourly holds.
func TestRollupFromALaggingClockStillReplacesOlderRows(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	logger := slog.New(slog.DiscardHandler)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if err := s.InsertSamples(ctx, testSamples(start, 8*360, "acme")); err != nil {
		t.Fatal(err)
	}
	future := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }
	if err := rollup.New(s, rollup.DefaultConfig(), future, logger).RollupRange(ctx, start, start.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertSamples(ctx, testSamples(start, 8, "globex")); err != nil {
		t.Fatal(err)
	}
	past := func() time.Time { return time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC) }
	if err := rollup.New(s, rollup.DefaultConfig(), past, logger).RollupRange(ctx, start, start.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	assertHourlyMatchesRaw(t, s, start, start.Add(time.Hour))
}

// assertHourlyKeysMatchRaw compares usage_hourly with the deduplicated raw
// samples key by key (hour, tenant, department, SKU): every raw key has an
// equal hourly row and there is no other. A removed key's tombstone is in
// the table but never in a usage answer.
func assertHourlyKeysMatchRaw(t *testing.T, s *store.Store, from, to time.Time) {
	t.Helper()
	raw, hourly := rawAndHourly(t, s, from, to)
	type key struct {
		hour                    time.Time
		tenant, department, sku string
	}
	want := map[key]usage.Row{}
	for _, r := range raw {
		want[key{r.Bucket, r.Tenant, r.Department, r.SKU}] = r
	}
	for _, h := range hourly {
		k := key{h.Bucket, h.Tenant, h.Department, h.SKU}
		r, ok := want[k]
		switch {
		case ok && r != h:
			t.Errorf("key %+v:\n raw    %+v\n hourly %+v", k, r, h)
		case !ok:
			t.Errorf("key %+v is in usage_hourly but not in the raw samples: %+v", k, h)
		}
		delete(want, k)
	}
	for k := range want {
		t.Errorf("key %+v is in the raw samples but not in usage_hourly", k)
	}
}

// Issue 9, defect 4: re-importing samples with another department (same
// sample id, tenant and start) replaces them in raw; recomputing their hour
// must remove the old department's hourly row, on the scheduled path (as
// late samples) and on the manual one.
func TestRollupRecomputeRemovesKeysThatVanishedFromRaw(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	logger := slog.New(slog.DiscardHandler)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	samples := testSamples(start, 8*360*2, "acme", "globex") // 2 hours
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	job := rollup.New(s, rollup.DefaultConfig(), time.Now, logger)
	if _, err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	assertHourlyKeysMatchRaw(t, s, start, start.Add(2*time.Hour))

	// moveAcme re-imports acme's samples of the first hour under another
	// department: same id, tenant and start, so they replace the old rows.
	moveAcme := func(department string) {
		t.Helper()
		var moved []collectors.Sample
		for _, smp := range samples[:8*360] {
			if smp.Tenant == "acme" {
				smp.Department = department
				moved = append(moved, smp)
			}
		}
		if err := s.InsertSamples(ctx, moved); err != nil {
			t.Fatal(err)
		}
	}
	// inFirstHour: usage_hourly holds samples of department in the first hour.
	inFirstHour := func(department string) bool {
		t.Helper()
		rows, err := s.Usage(ctx, usage.Query{From: start, To: start.Add(time.Hour),
			Source: usage.SourceHourly, Department: department})
		if err != nil {
			t.Fatal(err)
		}
		return len(rows) == 1 && rows[0].Samples > 0
	}

	moveAcme("dept-b")
	res, err := job.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// (It may also recompute hour 2, inserted within billing.InsertSlack.)
	if len(res.Late) == 0 || !res.Late[0].Equal(start) {
		t.Errorf("scheduled run recomputed %v, want the first hour", res.Late)
	}
	assertHourlyKeysMatchRaw(t, s, start, start.Add(2*time.Hour))
	if inFirstHour("dept-acme") || !inFirstHour("dept-b") {
		t.Error("scheduled run left acme's old department dept-acme or lost dept-b")
	}

	moveAcme("dept-c")
	if err := job.RollupRange(ctx, start, start.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	assertHourlyKeysMatchRaw(t, s, start, start.Add(2*time.Hour))
	if inFirstHour("dept-b") || !inFirstHour("dept-c") {
		t.Error("manual rollup left the old department dept-b or lost dept-c")
	}
	rows, err := s.Usage(ctx, usage.Query{From: start, To: start.Add(2 * time.Hour), Source: usage.SourceHourly})
	if err != nil || len(rows) != 1 || rows[0].Samples != uint64(len(samples)) {
		t.Errorf("hourly total after moves: %+v (%v), want %d samples", rows, err, len(samples))
	}
}

// An hour whose raw samples are gone (retention dropped the month while a
// recompute was under way) keeps its hourly rows: a recompute without raw
// samples must not turn them into tombstones.
func TestRollupRangeWithoutRawSamplesKeepsHourlyRows(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	start := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	if err := s.InsertSamples(ctx, testSamples(start, 8*360, "acme", "globex")); err != nil {
		t.Fatal(err)
	}
	if err := s.RollupRange(ctx, start, start.Add(time.Hour), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.DropRawMonth(ctx, start); err != nil {
		t.Fatal(err)
	}
	if err := s.RollupRange(ctx, start, start.Add(time.Hour), 2); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Usage(ctx, usage.Query{From: start, To: start.Add(time.Hour), Source: usage.SourceHourly,
		GroupBy: []usage.Dimension{usage.DimTenant}})
	if err != nil || len(rows) != 2 || rows[0].Samples != 8*180 || rows[1].Samples != 8*180 {
		t.Fatalf("hourly after a recompute without raw samples: %+v (%v)", rows, err)
	}
}
