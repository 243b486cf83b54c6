package store_test

import (
	"context"
	"io/fs"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/schemas"
)

// hourlySamples is the sample count usage_hourly holds for [from, to).
func hourlySamples(t *testing.T, s *store.Store, from, to time.Time) uint64 {
	t.Helper()
	rows, err := s.Usage(context.Background(), usage.Query{From: from, To: to, Source: usage.SourceHourly})
	if err != nil || len(rows) != 1 {
		t.Fatalf("hourly %s..%s: %+v (%v)", from, to, rows, err)
	}
	return rows[0].Samples
}

// Issue 9, defect 3: March is invoiced and its raw samples dropped while
// February is still open. February's raw samples are all there, so a late
// February sample must be rolled up, and a manual rollup of February must
// run; March's hours must still never be recomputed.
func TestRetentionDroppingAMonthOutOfOrderLeavesEarlierMonthsRecomputable(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	logger := slog.New(slog.DiscardHandler)
	feb, mar, apr := monthStart(2026, 2), monthStart(2026, 3), monthStart(2026, 4)
	insertAcmeSamples(t, s, feb, mar)
	job := rollup.New(s, rollup.DefaultConfig(), time.Now, logger)
	if _, err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkPeriodClosed(ctx, mar, time.Now()); err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }
	ret := rollup.NewRetention(s, rollup.RetentionConfig{RawDays: 30, Schedule: "@daily"}, now, logger)
	dropped, err := ret.Run(ctx)
	if err != nil || len(dropped) != 1 || !dropped[0].Equal(mar) {
		t.Fatalf("dropped %v (%v), want March only", dropped, err)
	}
	if got, err := s.RawDroppedMonths(ctx); err != nil || !reflect.DeepEqual(got, []time.Time{mar}) {
		t.Errorf("dropped months recorded: %v (%v), want March", got, err)
	}
	// The old single mark is still raised, for binaries from before 0006.
	if got, err := s.RawDroppedBefore(ctx); err != nil || !got.Equal(apr) {
		t.Errorf("raw_retention mark: %v (%v), want %v", got, err, apr)
	}

	// A late February sample: the scheduled run recomputes its hour.
	if err := s.InsertSamples(ctx, testSamples(feb.Add(2*time.Hour), 8, "globex")); err != nil {
		t.Fatal(err)
	}
	res, err := job.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// (It may also recompute hours inserted within billing.InsertSlack.)
	recomputed := map[time.Time]bool{}
	for _, h := range res.Late {
		recomputed[h] = true
		if !h.Before(mar) {
			t.Errorf("scheduled run recomputed %s, in dropped March", h)
		}
	}
	if !recomputed[feb.Add(2*time.Hour)] {
		t.Errorf("scheduled run recomputed %v, want February's hour 2 among them", res.Late)
	}
	assertHourlyMatchesRaw(t, s, feb, mar)

	// A manual rollup of February is accepted and changes nothing.
	if err := job.RollupRange(ctx, feb, mar); err != nil {
		t.Fatalf("manual rollup of February, whose raw samples were never dropped: %v", err)
	}
	assertHourlyMatchesRaw(t, s, feb, mar)

	// March stays as it was rolled up before its raw samples went.
	if err := s.InsertSamples(ctx, testSamples(mar.Add(30*time.Second), 1, "acme")); err != nil {
		t.Fatal(err)
	}
	if _, err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := hourlySamples(t, s, mar, apr); got != 8*36 {
		t.Errorf("hourly March after a late sample: %d samples, want %d", got, 8*36)
	}
	for _, r := range [][2]time.Time{{mar, apr}, {feb, apr}, {mar.Add(5 * time.Hour), mar.Add(6 * time.Hour)}} {
		if err := job.RollupRange(ctx, r[0], r[1]); err == nil {
			t.Errorf("manual rollup %s..%s over dropped March was accepted", r[0], r[1])
		}
	}
	if got := hourlySamples(t, s, mar, apr); got != 8*36 {
		t.Errorf("hourly March after refused manual rollups: %d samples, want %d", got, 8*36)
	}
}

// migrationsBefore is schemas.FS without the migrations from number on,
// except later ones that only add columns to the usage tables: the test
// writes samples with today's store, which names every meter's column.
func migrationsBefore(t *testing.T, number string) fstest.MapFS {
	t.Helper()
	names, err := fs.Glob(schemas.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	out := fstest.MapFS{}
	for _, n := range names {
		body, err := fs.ReadFile(schemas.FS, n)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Compare(n, number) >= 0 && !addsUsageColumns(string(body)) {
			continue
		}
		out[n] = &fstest.MapFile{Data: body}
	}
	return out
}

// addsUsageColumns reports whether every statement of a migration adds a
// column to usage_samples or usage_hourly.
func addsUsageColumns(body string) bool {
	n := 0
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "--") {
			continue
		}
		if !strings.HasPrefix(line, "ALTER TABLE usage_samples ADD COLUMN ") && !strings.HasPrefix(line, "ALTER TABLE usage_hourly ADD COLUMN ") {
			return false
		}
		n++
	}
	return n > 0
}

// A deployment from before migration 0006 kept one mark, dropped_before.
// The migration must record every month the old retention may have dropped
// (invoiced months before the mark, and months whose raw samples are gone)
// and no other: February, still open when March went, stays recomputable.
func TestMigrationRecordsTheMonthsOldRetentionDropped(t *testing.T) {
	ctx := context.Background()
	cfg := storetest.Config(t)
	if err := store.CreateDatabase(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		if !t.Failed() {
			_ = store.DropDatabase(context.Background(), cfg, cfg.Database)
		}
	})
	if _, err := s.Migrate(ctx, migrationsBefore(t, "0006")); err != nil {
		t.Fatal(err)
	}
	dec, jan, feb, mar, apr, may := monthStart(2025, 12), monthStart(2026, 1), monthStart(2026, 2), monthStart(2026, 3), monthStart(2026, 4), monthStart(2026, 5)
	insertAcmeSamples(t, s, dec, jan, feb, mar, apr)
	if err := s.RollupRange(ctx, dec, may, 1); err != nil {
		t.Fatal(err)
	}
	// December: dropped by a retention older than raw_retention (no mark).
	// January and March: invoiced and dropped, the mark raised to April;
	// January has had a late sample since. February: never invoiced, still
	// there. April: invoiced, not dropped yet.
	for _, m := range []time.Time{dec, jan, mar} {
		if err := s.DropRawMonth(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []time.Time{jan, mar, apr} {
		if err := s.MarkPeriodClosed(ctx, m, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetRawDroppedBefore(ctx, apr, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertSamples(ctx, testSamples(jan.Add(30*time.Second), 1, "acme")); err != nil {
		t.Fatal(err)
	}

	if _, err := s.Migrate(ctx, schemas.FS); err != nil {
		t.Fatal(err)
	}
	got, err := s.RawDroppedMonths(ctx)
	if want := []time.Time{dec, jan, mar}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("dropped months after migrating: %v (%v), want %v", got, err, want)
	}
	job := rollup.New(s, rollup.DefaultConfig(), time.Now, slog.New(slog.DiscardHandler))
	if err := job.RollupRange(ctx, feb, mar); err != nil {
		t.Errorf("manual rollup of February: %v", err)
	}
	for _, r := range [][2]time.Time{{dec, jan}, {jan, feb}, {mar, apr}} {
		if err := job.RollupRange(ctx, r[0], r[1]); err == nil {
			t.Errorf("manual rollup of dropped %s was accepted", r[0].Format("2006-01"))
		}
	}
}
