package spool

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpumeter/gpumeter/collectors"
)

// Spool damage is never silent: every loss is logged at Error with what it
// cost and counted. These tests damage a closed (or open) spool the way a
// disk, an operator or a stray tool would.

const (
	msgMissingAtOpen  = "spool segments missing: their samples are lost (rows unknown)"
	msgMissingAtRead  = "spool segment missing: its samples are lost"
	msgCursorPastData = "spool cursor points past the spool's data: rewinding to the start of the spool"
	msgCorruptTail    = "spool last segment ends in a corrupt batch: not a torn write, its samples are lost"
	msgTornTail       = "spool cutting torn tail off the last segment"
)

// thirtyBatchSpool writes batches 0 … 29 of 5 samples into 4 KiB segments
// and closes the spool. It returns the records and the segment files.
func thirtyBatchSpool(t *testing.T) (dir string, spans []span, files []string) {
	t.Helper()
	dir = t.TempDir()
	sp := openSpool(t, testConfig(dir))
	for b := range 30 {
		mustAppend(t, sp.Spool, testBatch(b, 5))
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	spans, files = recordSpans(t, dir), segFiles(t, dir)
	if len(files) < 4 {
		t.Fatalf("setup: %d segments, want at least 4", len(files))
	}
	return dir, spans, files
}

// batchesOutside returns the samples of the batches not in files.
func batchesOutside(spans []span, files ...string) []collectors.Sample {
	gone := map[string]bool{}
	for _, f := range files {
		gone[f] = true
	}
	var want []collectors.Sample
	for b, s := range spans {
		if !gone[s.path] {
			want = append(want, testBatch(b, 5)...)
		}
	}
	return want
}

func TestDeletedSegmentsAreReportedAsLost(t *testing.T) {
	tests := []struct {
		name        string
		delete      func(files []string) []string
		wantMissing string
		wantCount   float64
	}{
		{"one middle segment", func(f []string) []string { return f[1:2] }, "2", 1},
		{"two neighbouring segments", func(f []string) []string { return f[1:3] }, "2-3", 2},
		{"the first segment, never shipped", func(f []string) []string { return f[:1] }, "1", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, spans, files := thirtyBatchSpool(t)
			deleted := tc.delete(files)
			for _, f := range deleted {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
			sp := openSpool(t, testConfig(dir))
			logs := sp.logs.attrs(slog.LevelError, msgMissingAtOpen)
			if len(logs) != 1 {
				t.Fatalf("%d Error logs %q, want 1", len(logs), msgMissingAtOpen)
			}
			if got := logs[0]["missing"]; got != tc.wantMissing {
				t.Errorf("log names missing segments %q, want %q", got, tc.wantMissing)
			}
			if n := metric(t, sp.reg, "gpumeter_spool_missing_segments_total"); n != tc.wantCount {
				t.Errorf("missing_segments_total = %v, want %v", n, tc.wantCount)
			}
			got, _ := readAll(t, sp.Spool)
			equalSamples(t, samplesOf(got), batchesOutside(spans, deleted...))
			// Committed past the gap, a restart does not report it again.
			if err := sp.Commit(context.Background(), got[len(got)-1].Next); err != nil {
				t.Fatal(err)
			}
			sp.Close()
			sp = openSpool(t, testConfig(dir))
			if n := sp.logs.count(slog.LevelError, msgMissingAtOpen); n != 0 {
				t.Errorf("after committing past the gap a reopen logs %d missing-segment errors", n)
			}
		})
	}
}

func TestSegmentDeletedUnderAnOpenSpoolIsReportedWithItsRows(t *testing.T) {
	dir, spans, files := thirtyBatchSpool(t)
	sp := openSpool(t, testConfig(dir))
	if err := os.Remove(files[1]); err != nil {
		t.Fatal(err)
	}
	var rows int
	for _, s := range spans {
		if s.path == files[1] {
			rows += 5
		}
	}
	got, damaged := readAll(t, sp.Spool)
	equalSamples(t, samplesOf(got), batchesOutside(spans, files[1]))
	if damaged != 1 {
		t.Errorf("Read reported %d damaged regions, want 1 (the missing segment)", damaged)
	}
	logs := sp.logs.attrs(slog.LevelError, msgMissingAtRead)
	if len(logs) != 1 {
		t.Fatalf("%d Error logs %q, want 1", len(logs), msgMissingAtRead)
	}
	if logs[0]["segment"] != "2" || logs[0]["rows"] != itoa(rows) {
		t.Errorf("log %v, want segment 2 and rows %d", logs[0], rows)
	}
	if n := metric(t, sp.reg, "gpumeter_spool_missing_segments_total"); n != 1 {
		t.Errorf("missing_segments_total = %v, want 1", n)
	}
	if err := sp.Commit(context.Background(), got[len(got)-1].Next); err != nil {
		t.Fatal(err)
	}
	if r, _ := sp.Backlog(); r != 0 {
		t.Errorf("backlog %d rows after committing everything", r)
	}
}

func TestCursorPastTheSpoolsDataRewindsInsteadOfDeleting(t *testing.T) {
	tests := []struct {
		name   string
		cursor func(files []string, spans []span) Position
	}{
		{"past the last segment", func(files []string, _ []span) Position {
			return Position{Segment: uint64(len(files)) + 5, Offset: 100}
		}},
		{"past the end of its segment", func(files []string, spans []span) Position {
			return Position{Segment: 2, Offset: 1 << 20}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, spans, files := thirtyBatchSpool(t)
			if err := writeCursor(dir, tc.cursor(files, spans)); err != nil {
				t.Fatal(err)
			}
			var bytes int64
			for _, s := range spans {
				bytes += s.end - s.start
			}
			sp := openSpool(t, testConfig(dir))
			if left := segFiles(t, dir); len(left) != len(files) {
				t.Fatalf("%d of %d segments left after opening with a cursor past the data", len(left), len(files))
			}
			logs := sp.logs.attrs(slog.LevelError, msgCursorPastData)
			if len(logs) != 1 {
				t.Fatalf("%d Error logs %q, want 1", len(logs), msgCursorPastData)
			}
			if logs[0]["rows"] != "150" || logs[0]["bytes"] != itoa(int(bytes)) {
				t.Errorf("log %v, want rows 150 and bytes %d (all that would have been discarded)", logs[0], bytes)
			}
			if n := metric(t, sp.reg, "gpumeter_spool_cursor_resets_total"); n != 1 {
				t.Errorf("cursor_resets_total = %v, want 1", n)
			}
			got, _ := readAll(t, sp.Spool)
			equalSamples(t, samplesOf(got), batchesOutside(spans))
		})
	}
}

// A flipped byte anywhere in the last record leaves all its bytes there:
// that is corruption (Error, counted, rows from the header), never a torn
// tail cut off at Warn.
func TestFlippedByteInTheLastRecordIsCorruptionNotATornTail(t *testing.T) {
	src, last := threeBatchSpool(t)
	for off := last.start; off < last.end; off++ {
		dir := copyDir(t, src)
		editFile(t, last.pathIn(dir), func(data []byte) { data[off] ^= 0x5a })
		// The rows field itself may be what flipped: then the count is
		// unknown and nothing is added.
		wantRows := 5
		if rel := off - last.start; rel >= 8 && rel < 12 {
			wantRows = 0
		}
		checkCorruptTail(t, dir, last, wantRows)
		if t.Failed() {
			t.Fatalf("byte %d of the last record flipped", off-last.start)
		}
	}
}

func checkCorruptTail(t *testing.T, dir string, last span, wantRows int) {
	t.Helper()
	cfg := testConfig(dir)
	cfg.SegmentBytes = 1 << 20
	sp := openSpool(t, cfg)
	if n := sp.logs.count(slog.LevelWarn, msgTornTail); n != 0 {
		t.Errorf("a corrupt last record was called a torn tail (%d warnings)", n)
	}
	logs := sp.logs.attrs(slog.LevelError, msgCorruptTail)
	if len(logs) != 1 {
		t.Fatalf("%d Error logs %q at open, want 1", len(logs), msgCorruptTail)
	}
	if logs[0]["bytes"] != itoa(int(last.end-last.start)) {
		t.Errorf("log says %s bytes, want %d", logs[0]["bytes"], last.end-last.start)
	}
	if n := metric(t, sp.reg, "gpumeter_spool_recovered_truncated_bytes_total"); n != 0 {
		t.Errorf("recovered_truncated_bytes_total = %v, want 0: corrupt data is not cut off as torn", n)
	}
	got, corrupt := readAll(t, sp.Spool)
	equalSamples(t, samplesOf(got), append(testBatch(0, 5), testBatch(1, 5)...))
	if corrupt != 1 {
		t.Errorf("Read reported %d corrupt regions, want 1", corrupt)
	}
	for name, want := range map[string]float64{
		"gpumeter_spool_corrupt_regions_total": 1,
		"gpumeter_spool_corrupt_bytes_total":   float64(last.end - last.start),
		"gpumeter_spool_corrupt_rows_total":    float64(wantRows),
	} {
		if n := metric(t, sp.reg, name); n != want {
			t.Errorf("%s = %v, want %v", name, n, want)
		}
	}
	// The spool goes on after it.
	mustAppend(t, sp.Spool, testBatch(9, 3))
	more, _ := readAll(t, sp.Spool)
	if len(more) != 1 {
		t.Fatalf("after the corrupt tail read %d new batches, want 1", len(more))
	}
	equalSamples(t, more[0].Samples, testBatch(9, 3))
}

func itoa(n int) string { return slog.IntValue(n).String() }

// What the spool deletes itself (shipped segments, the cursor's own
// segment once the writer moved on, segments dropped by drop_oldest) is
// never reported as lost, nor is a segment number that a failed roll did
// not use.
func TestSegmentsTheSpoolDeletedAreNotReportedMissing(t *testing.T) {
	ctx := context.Background()
	checkQuiet := func(t *testing.T, o opened) {
		t.Helper()
		for _, msg := range []string{msgMissingAtOpen, msgCursorPastData} {
			if n := o.logs.count(slog.LevelError, msg); n != 0 {
				t.Errorf("%d Error logs %q", n, msg)
			}
		}
		for _, name := range []string{"gpumeter_spool_missing_segments_total", "gpumeter_spool_cursor_resets_total"} {
			if n := metric(t, o.reg, name); n != 0 {
				t.Errorf("%s = %v", name, n)
			}
		}
	}
	t.Run("shipped, and the cursor's segment after a roll", func(t *testing.T) {
		dir := t.TempDir()
		sp := openSpool(t, testConfig(dir))
		b := 0
		for ; b < 30; b++ {
			mustAppend(t, sp.Spool, testBatch(b, 5))
		}
		got, _ := readAll(t, sp.Spool)
		if err := sp.Commit(ctx, got[len(got)-1].Next); err != nil {
			t.Fatal(err)
		}
		// The cursor sits at the end of the active segment; the writer
		// rolls and deletes that segment, shipped whole.
		before := segFiles(t, dir)
		for len(segFiles(t, dir)) == 1 && segFiles(t, dir)[0] == before[0] {
			mustAppend(t, sp.Spool, testBatch(b, 5))
			b++
		}
		sp.Close()
		o := openSpool(t, testConfig(dir))
		checkQuiet(t, o)
		got, _ = readAll(t, o.Spool)
		if len(got) == 0 || got[0].Samples[0].ID>>32 != 30 {
			t.Fatalf("after reopen the first batch is not batch 30")
		}
	})
	t.Run("dropped by drop_oldest", func(t *testing.T) {
		cfg := testConfig(t.TempDir())
		cfg.MaxBytes = 3 * cfg.SegmentBytes
		sp := openSpool(t, cfg)
		for b := range 4 {
			mustAppend(t, sp.Spool, testBatch(b, 5))
		}
		b0, _ := sp.Read(ctx)
		if err := sp.Commit(ctx, b0.Next); err != nil {
			t.Fatal(err)
		}
		for b := 4; b < 60; b++ {
			mustAppend(t, sp.Spool, testBatch(b, 5))
		}
		if n := metric(t, sp.reg, "gpumeter_spool_dropped_segments_total"); n < 2 {
			t.Fatalf("setup: %v segments dropped, want several", n)
		}
		rows, _ := sp.Backlog()
		sp.Close()
		o := openSpool(t, cfg)
		checkQuiet(t, o)
		if r, _ := o.Backlog(); r != rows {
			t.Fatalf("backlog %d rows after reopen, want %d", r, rows)
		}
	})
	t.Run("an older build's cursor at the end of its deleted segment", func(t *testing.T) {
		dir, spans, files := thirtyBatchSpool(t)
		// The old build shipped segment 1 whole, committed its end, and
		// deleted it once the writer had moved on.
		var end int64
		for _, s := range spans {
			if s.path == files[0] {
				end = s.end
			}
		}
		if err := os.Remove(files[0]); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, cursorFile), legacyCursor(Position{Segment: 1, Offset: end}), 0o640); err != nil {
			t.Fatal(err)
		}
		o := openSpool(t, testConfig(dir))
		checkQuiet(t, o)
		got, _ := readAll(t, o.Spool)
		equalSamples(t, samplesOf(got), batchesOutside(spans, files[0]))
	})
}

// Bit rot in the last acknowledged record stays corruption when a torn
// write (never acknowledged) follows it: the zeros of the torn one do not
// make the rotted one torn.
func TestRottedRecordBeforeATornOneIsStillCorruption(t *testing.T) {
	src, last := threeBatchSpool(t)
	dir := copyDir(t, src)
	path := last.pathIn(dir)
	flipByte(t, path, last.start+recHeaderLen+40)
	appendFile(t, path, make([]byte, 1500))
	cfg := testConfig(dir)
	cfg.SegmentBytes = 1 << 20
	sp := openSpool(t, cfg)
	if n := sp.logs.count(slog.LevelError, msgCorruptTail); n != 1 {
		t.Fatalf("%d Error logs %q, want 1", n, msgCorruptTail)
	}
	if n := sp.logs.count(slog.LevelWarn, msgTornTail); n != 0 {
		t.Fatalf("the rotted record was cut off as a torn tail")
	}
	got, corrupt := readAll(t, sp.Spool)
	equalSamples(t, samplesOf(got), append(testBatch(0, 5), testBatch(1, 5)...))
	if corrupt != 1 {
		t.Errorf("%d corrupt regions, want 1", corrupt)
	}
	if n := metric(t, sp.reg, "gpumeter_spool_corrupt_rows_total"); n != 5 {
		t.Errorf("corrupt_rows_total = %v, want 5", n)
	}
}
