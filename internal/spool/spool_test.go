package spool

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
)

func TestRoundTrip(t *testing.T) {
	zone := time.FixedZone("CET", 3600)
	odd := testBatch(0, 1)[0]
	odd.Host, odd.Tenant, odd.Workload, odd.Department = "hôst-ü", "", "", ""
	odd.Start = time.Date(2025, 1, 1, 1, 0, 0, 999_999_999, zone)
	odd.End = odd.Start.Add(time.Nanosecond)
	extreme := odd
	extreme.ID = math.MaxUint64
	extreme.GPUMicroseconds, extreme.MemPeakBytes = math.MaxUint64, 0
	extreme.Start = time.Unix(-1<<40, 5).UTC()
	extreme.End = time.Unix(1<<40, 0).UTC()
	zeroTimes := odd
	zeroTimes.Start, zeroTimes.End = time.Time{}, time.Time{}

	// The format carries any value: samples Append would refuse (zero or
	// extreme times, empty strings) go through the encoder directly.
	for name, batch := range map[string][]collectors.Sample{
		"empty strings, non-UTC zone, nanoseconds": {odd},
		"extreme ids, quantities and times":        {extreme},
		"zero times stay zero":                     {zeroTimes},
	} {
		t.Run("format: "+name, func(t *testing.T) {
			var e encoder
			rec, err := e.encode(batch)
			if err != nil {
				t.Fatal(err)
			}
			rh, err := parseRecordHeader(rec[:recHeaderLen])
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeBatch(rec[recHeaderLen:], rh.rows)
			if err != nil {
				t.Fatal(err)
			}
			equalSamples(t, got, batch)
		})
	}

	tests := []struct {
		name  string
		batch []collectors.Sample
	}{
		{"one sample", testBatch(1, 1)},
		{"1000 samples sharing strings", testBatch(2, 1000)},
	}
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 1 << 20
	sp := openSpool(t, cfg)
	for _, tc := range tests {
		mustAppend(t, sp.Spool, tc.batch)
	}
	got, corrupt := readAll(t, sp.Spool)
	if corrupt != 0 || len(got) != len(tests) {
		t.Fatalf("read %d batches and %d corrupt regions, want %d and 0", len(got), corrupt, len(tests))
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			equalSamples(t, got[i].Samples, tc.batch)
			if i > 0 && !got[i-1].Next.Before(got[i].Next) {
				t.Errorf("Next %s does not follow %s", got[i].Next, got[i-1].Next)
			}
		})
	}
	if rows := metric(t, sp.reg, "gpumeter_spool_appended_rows_total"); rows != 1001 {
		t.Errorf("appended_rows_total = %v, want 1001", rows)
	}
}

func TestAppendEmptyBatchWritesNothing(t *testing.T) {
	sp := openSpool(t, testConfig(t.TempDir()))
	if err := sp.Append(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if files := segFiles(t, sp.cfg.Dir); len(files) != 0 {
		t.Fatalf("segment files %v after an empty append", files)
	}
}

func TestSegmentsRollAtSizeAndShippedOnesAreDeleted(t *testing.T) {
	sp := openSpool(t, testConfig(t.TempDir()))
	for b := range 30 {
		mustAppend(t, sp.Spool, testBatch(b, 5))
	}
	files := segFiles(t, sp.cfg.Dir)
	if len(files) < 3 {
		t.Fatalf("%d segment files after 30 batches in 4 KiB segments, want several", len(files))
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > sp.cfg.SegmentBytes {
			t.Errorf("%s has %d bytes, over segment_bytes %d", filepath.Base(f), st.Size(), sp.cfg.SegmentBytes)
		}
	}
	got, _ := readAll(t, sp.Spool)
	var want []collectors.Sample
	for b := range 30 {
		want = append(want, testBatch(b, 5)...)
	}
	equalSamples(t, samplesOf(got), want)

	if err := sp.Commit(context.Background(), got[len(got)-1].Next); err != nil {
		t.Fatal(err)
	}
	if left := segFiles(t, sp.cfg.Dir); len(left) != 1 || left[0] != files[len(files)-1] {
		t.Fatalf("after committing everything segments %v are left, want only the active %s", left, files[len(files)-1])
	}
	if rows, bytes := sp.Backlog(); rows != 0 || bytes != 0 {
		t.Fatalf("backlog %d rows %d bytes after committing everything", rows, bytes)
	}
}

func TestBatchLargerThanSegmentIsRefused(t *testing.T) {
	sp := openSpool(t, testConfig(t.TempDir()))
	err := sp.Append(context.Background(), testBatch(0, 500))
	if !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("append of a batch over segment_bytes: %v, want ErrBatchTooLarge", err)
	}
}

// span is one record on disk.
type span struct {
	path       string
	start, end int64
}

// pathIn is the path of s's segment in dir, a copy of the spool s is of.
func (s span) pathIn(dir string) string { return filepath.Join(dir, filepath.Base(s.path)) }

// recordSpans lists the whole records of a spool directory, in order.
func recordSpans(t testing.TB, dir string) []span {
	t.Helper()
	var out []span
	for _, path := range segFiles(t, dir) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		var buf []byte
		if _, _, err := scanRecords(f, segHeaderLen, st.Size(), &buf, func(off int64, rh recordHeader) {
			out = append(out, span{path, off, off + recHeaderLen + int64(rh.payloadLen)})
		}); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return out
}

// threeBatchSpool writes batches 0, 1, 2 of 5 samples into one segment.
func threeBatchSpool(t *testing.T) (dir string, last span) {
	dir = t.TempDir()
	cfg := testConfig(dir)
	cfg.SegmentBytes = 1 << 20
	sp := openSpool(t, cfg)
	for b := range 3 {
		mustAppend(t, sp.Spool, testBatch(b, 5))
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	spans := recordSpans(t, dir)
	if len(spans) != 3 {
		t.Fatalf("%d records, want 3", len(spans))
	}
	return dir, spans[2]
}

// checkRecovered opens dir and checks that exactly batches 0 and 1 come
// back, that nothing is reported corrupt, and that the spool takes and
// returns a new batch after them.
func checkRecovered(t *testing.T, dir string, wantTruncated int64) {
	t.Helper()
	cfg := testConfig(dir)
	cfg.SegmentBytes = 1 << 20
	sp := openSpool(t, cfg)
	got, corrupt := readAll(t, sp.Spool)
	if corrupt != 0 {
		t.Fatalf("%d corrupt regions reported for a torn tail", corrupt)
	}
	equalSamples(t, samplesOf(got), append(testBatch(0, 5), testBatch(1, 5)...))
	if n := metric(t, sp.reg, "gpumeter_spool_recovered_truncated_bytes_total"); n != float64(wantTruncated) {
		t.Errorf("recovered_truncated_bytes_total = %v, want %d", n, wantTruncated)
	}
	mustAppend(t, sp.Spool, testBatch(9, 3))
	more, _ := readAll(t, sp.Spool)
	if len(more) != 1 {
		t.Fatalf("after recovery read %d new batches, want 1", len(more))
	}
	equalSamples(t, more[0].Samples, testBatch(9, 3))
}

func TestTornTailAtEveryOffsetOfTheLastRecord(t *testing.T) {
	src, last := threeBatchSpool(t)
	for cut := last.start; cut < last.end; cut++ {
		dir := copyDir(t, src)
		truncateFile(t, last.pathIn(dir), cut)
		checkRecovered(t, dir, cut-last.start)
		if t.Failed() {
			t.Fatalf("torn at byte %d of the last record (%d bytes)", cut-last.start, last.end-last.start)
		}
	}
}

func TestTornTailKinds(t *testing.T) {
	tests := []struct {
		name          string
		tear          func(t *testing.T, dir string, last span)
		wantTruncated func(last span) int64
	}{
		{
			name: "zeros after the last whole record are cut",
			tear: func(t *testing.T, dir string, last span) {
				truncateFile(t, last.pathIn(dir), last.start)
				appendFile(t, last.pathIn(dir), make([]byte, 4096))
			},
			wantTruncated: func(span) int64 { return 4096 },
		},
		{
			name: "a new segment torn inside its header is removed",
			tear: func(t *testing.T, dir string, last span) {
				truncateFile(t, last.pathIn(dir), last.start)
				if err := os.WriteFile(segPath(dir, 2), encodeSegmentHeader(2)[:7], 0o640); err != nil {
					t.Fatal(err)
				}
			},
			wantTruncated: func(span) int64 { return 0 },
		},
		{
			name: "a new segment with a zeroed header is removed",
			tear: func(t *testing.T, dir string, last span) {
				truncateFile(t, last.pathIn(dir), last.start)
				if err := os.WriteFile(segPath(dir, 2), make([]byte, 512), 0o640); err != nil {
					t.Fatal(err)
				}
			},
			wantTruncated: func(span) int64 { return 0 },
		},
		{
			// The file system extended the file to the whole record but
			// never wrote its last sector: all the bytes seem there, and
			// the zeros say torn write, not bit rot.
			name: "a whole-length last record with an unwritten sector is torn",
			tear: func(t *testing.T, dir string, last span) {
				from := (last.start + sectorBytes) / sectorBytes * sectorBytes
				if last.end-from < tornZeroRun {
					t.Fatalf("setup: the last record [%d, %d) has too little after a sector boundary", last.start, last.end)
				}
				editFile(t, last.pathIn(dir), func(data []byte) { clear(data[from:last.end]) })
			},
			wantTruncated: func(last span) int64 { return last.end - last.start },
		},
		{
			name: "a stale cursor.tmp from a crash mid-commit is ignored",
			tear: func(t *testing.T, dir string, last span) {
				truncateFile(t, last.pathIn(dir), last.start+3)
				if err := os.WriteFile(filepath.Join(dir, cursorTmpFile), []byte("GMC"), 0o640); err != nil {
					t.Fatal(err)
				}
			},
			wantTruncated: func(span) int64 { return 3 },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, last := threeBatchSpool(t)
			dir := copyDir(t, src)
			tc.tear(t, dir, last)
			checkRecovered(t, dir, tc.wantTruncated(last))
		})
	}
}

func appendFile(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// editFile rewrites the file at path with what edit makes of its bytes.
func editFile(t *testing.T, path string, edit func(data []byte)) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edit(data)
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	editFile(t, path, func(data []byte) { data[off] ^= 0xff })
}

func truncateFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptDataIsReportedAndSkipped(t *testing.T) {
	const batches = 30
	tests := []struct {
		name string
		// corrupt damages dir and returns the batch numbers lost.
		corrupt func(t *testing.T, dir string, spans []span) []int
		// rows is what corrupt_rows_total should say when it is not all
		// the rows lost (it counts what the headers tell: a lower bound).
		rows int
	}{
		{
			name: "bad crc in a sealed segment",
			corrupt: func(t *testing.T, dir string, spans []span) []int {
				flipByte(t, spans[2].path, spans[2].end-1)
				return []int{2}
			},
		},
		{
			name: "bad length in a sealed segment",
			corrupt: func(t *testing.T, dir string, spans []span) []int {
				flipByte(t, spans[3].path, spans[3].start+5)
				return []int{3}
			},
		},
		{
			name: "bad crc mid last segment with whole records after it",
			corrupt: func(t *testing.T, dir string, spans []span) []int {
				i := len(spans) - 2
				flipByte(t, spans[i].path, spans[i].start+recHeaderLen+3)
				return []int{i}
			},
		},
		{
			name: "two neighbouring records in one region",
			corrupt: func(t *testing.T, dir string, spans []span) []int {
				flipByte(t, spans[4].path, spans[4].start)
				flipByte(t, spans[5].path, spans[5].start)
				return []int{4, 5}
			},
			rows: 5, // the second header's magic is gone: only the first counts
		},
		{
			name: "unreadable header of a sealed segment",
			corrupt: func(t *testing.T, dir string, spans []span) []int {
				flipByte(t, spans[0].path, 1)
				var lost []int
				for i, s := range spans {
					if s.path == spans[0].path {
						lost = append(lost, i)
					}
				}
				return lost
			},
		},
		{
			name: "garbage after the last record of a sealed segment",
			corrupt: func(t *testing.T, dir string, spans []span) []int {
				appendFile(t, spans[0].path, []byte("GMRC not a record at all"))
				return nil
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sp := openSpool(t, testConfig(dir))
			for b := range batches {
				mustAppend(t, sp.Spool, testBatch(b, 5))
			}
			sp.Close()
			spans := recordSpans(t, dir)
			if len(spans) != batches || spans[0].path == spans[batches-1].path {
				t.Fatalf("setup: %d records in %d files", len(spans), len(segFiles(t, dir)))
			}
			lost := map[int]bool{}
			for _, b := range tc.corrupt(t, dir, spans) {
				lost[b] = true
			}
			var want []collectors.Sample
			for b := range batches {
				if !lost[b] {
					want = append(want, testBatch(b, 5)...)
				}
			}

			sp = openSpool(t, testConfig(dir))
			got, corrupt := readAll(t, sp.Spool)
			equalSamples(t, samplesOf(got), want)
			if corrupt != 1 {
				t.Errorf("%d corrupt regions reported, want 1", corrupt)
			}
			if n := metric(t, sp.reg, "gpumeter_spool_corrupt_regions_total"); n != 1 {
				t.Errorf("corrupt_regions_total = %v, want 1", n)
			}
			if n := sp.logs.count(slog.LevelError, "spool skipped a corrupt region: its samples are lost"); n != 1 {
				t.Errorf("%d Error logs for the skipped region, want 1", n)
			}
			wantRows := 5 * len(lost)
			if tc.rows != 0 {
				wantRows = tc.rows
			}
			if n := metric(t, sp.reg, "gpumeter_spool_corrupt_rows_total"); n != float64(wantRows) {
				t.Errorf("corrupt_rows_total = %v, want %d", n, wantRows)
			}
			// Committing past the region works and the backlog empties.
			if err := sp.Commit(context.Background(), got[len(got)-1].Next); err != nil {
				t.Fatal(err)
			}
			if rows, _ := sp.Backlog(); rows != 0 {
				t.Errorf("backlog %d rows after committing everything read", rows)
			}
		})
	}
}

func TestCursorSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	sp := openSpool(t, testConfig(dir))
	for b := range 20 {
		mustAppend(t, sp.Spool, testBatch(b, 5))
	}
	var last Batch
	for range 12 {
		b, err := sp.Read(context.Background())
		if err != nil || len(b.Samples) == 0 {
			t.Fatalf("read: %v, %d samples", err, len(b.Samples))
		}
		last = b
	}
	if err := sp.Commit(context.Background(), last.Next); err != nil {
		t.Fatal(err)
	}
	// Read on without committing: a restart must send these again.
	readAll(t, sp.Spool)
	wantRows, wantBytes := sp.Backlog()
	if wantRows != 8*5 {
		t.Fatalf("backlog %d rows, want %d", wantRows, 8*5)
	}
	sp.Close()

	sp = openSpool(t, testConfig(dir))
	if c := sp.Cursor(); c.Segment != last.Next.Segment || c.Offset != last.Next.Offset {
		t.Fatalf("cursor after reopen %s, want %s", c, last.Next)
	}
	if rows, bytes := sp.Backlog(); rows != wantRows || bytes != wantBytes {
		t.Fatalf("backlog after reopen %d rows %d bytes, want %d and %d", rows, bytes, wantRows, wantBytes)
	}
	if n := metric(t, sp.reg, "gpumeter_spool_segments"); int(n) != len(segFiles(t, dir)) {
		t.Fatalf("segments gauge %v, files %d", n, len(segFiles(t, dir)))
	}
	got, _ := readAll(t, sp.Spool)
	var want []collectors.Sample
	for b := 12; b < 20; b++ {
		want = append(want, testBatch(b, 5)...)
	}
	equalSamples(t, samplesOf(got), want)
}

func TestCommitBeforeTheCursorIsRefused(t *testing.T) {
	sp := openSpool(t, testConfig(t.TempDir()))
	mustAppend(t, sp.Spool, testBatch(0, 5))
	mustAppend(t, sp.Spool, testBatch(1, 5))
	b0, _ := sp.Read(context.Background())
	b1, _ := sp.Read(context.Background())
	if err := sp.Commit(context.Background(), b1.Next); err != nil {
		t.Fatal(err)
	}
	if err := sp.Commit(context.Background(), b0.Next); err == nil {
		t.Fatal("commit before the committed cursor succeeded")
	}
	if c := sp.Cursor(); c != b1.Next {
		t.Fatalf("cursor %s, want %s", c, b1.Next)
	}
}

func TestCursorOffBoundaryMovesBackToResend(t *testing.T) {
	dir, last := threeBatchSpool(t)
	// A cursor in the middle of batch 2, as no commit can produce.
	if err := writeCursor(dir, Position{Segment: 1, Offset: last.start + 7}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(dir)
	cfg.SegmentBytes = 1 << 20
	sp := openSpool(t, cfg)
	got, _ := readAll(t, sp.Spool)
	equalSamples(t, samplesOf(got), testBatch(2, 5))
	if n := sp.logs.count(slog.LevelWarn, "spool cursor not on a batch boundary, moving it back (batches after it are sent again)"); n != 1 {
		t.Fatalf("%d warnings about the cursor, want 1", n)
	}
	if rows, _ := sp.Backlog(); rows != 5 {
		t.Fatalf("backlog %d rows, want 5", rows)
	}
}

func TestUnreadableCursorShipsEverythingAgain(t *testing.T) {
	dir, _ := threeBatchSpool(t)
	if err := os.WriteFile(filepath.Join(dir, cursorFile), []byte("garbage"), 0o640); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(dir)
	cfg.SegmentBytes = 1 << 20
	sp := openSpool(t, cfg)
	got, _ := readAll(t, sp.Spool)
	if len(got) != 3 {
		t.Fatalf("read %d batches, want all 3", len(got))
	}
}

func TestNewSegmentsFollowACursorPastAllSegments(t *testing.T) {
	dir := t.TempDir()
	if err := writeCursor(dir, Position{Segment: 41, Offset: 900}); err != nil {
		t.Fatal(err)
	}
	sp := openSpool(t, testConfig(dir))
	mustAppend(t, sp.Spool, testBatch(0, 5))
	if files := segFiles(t, dir); len(files) != 1 || filepath.Base(files[0]) != filepath.Base(segPath(dir, 42)) {
		t.Fatalf("segment files %v, want only segment 42", files)
	}
	got, _ := readAll(t, sp.Spool)
	if len(got) != 1 {
		t.Fatalf("read %d batches, want the one appended after the cursor", len(got))
	}
}

func TestOverflowDropOldest(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxBytes = 3 * cfg.SegmentBytes
	sp := openSpool(t, cfg)
	ctx := context.Background()

	// Ship a few batches so that the oldest segment is partly behind the
	// cursor when it is dropped: only its unshipped rows count as lost.
	for b := range 4 {
		mustAppend(t, sp.Spool, testBatch(b, 5))
	}
	var shipped int
	for range 3 {
		b, _ := sp.Read(ctx)
		shipped += len(b.Samples)
		if err := sp.Commit(ctx, b.Next); err != nil {
			t.Fatal(err)
		}
	}
	const total = 60
	for b := 4; b < total; b++ {
		mustAppend(t, sp.Spool, testBatch(b, 5))
		if used := metric(t, sp.reg, "gpumeter_spool_bytes"); used > float64(cfg.MaxBytes) {
			t.Fatalf("after batch %d the spool holds %v bytes, over max_bytes %d", b, used, cfg.MaxBytes)
		}
	}
	got, _ := readAll(t, sp.Spool)
	first := int(got[0].Samples[0].ID >> 32)
	if first <= 3 {
		t.Fatalf("oldest batch read is %d: nothing was dropped", first)
	}
	var want []collectors.Sample
	for b := first; b < total; b++ {
		want = append(want, testBatch(b, 5)...)
	}
	equalSamples(t, samplesOf(got), want)

	dropped := metric(t, sp.reg, "gpumeter_spool_dropped_rows_total")
	if int(dropped)+shipped+len(want) != total*5 {
		t.Errorf("dropped %v + shipped %d + read %d rows != appended %d", dropped, shipped, len(want), total*5)
	}
	segs := metric(t, sp.reg, "gpumeter_spool_dropped_segments_total")
	if segs < 1 {
		t.Errorf("dropped_segments_total = %v", segs)
	}
	if n := sp.logs.count(slog.LevelError, "spool full, dropped oldest segment: unshipped samples lost"); n != int(segs) {
		t.Errorf("%d Error logs for %v dropped segments", n, segs)
	}
}

func TestOverflowReject(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxBytes = 2 * cfg.SegmentBytes
	cfg.Overflow = OverflowReject
	sp := openSpool(t, cfg)
	ctx := context.Background()

	var accepted []collectors.Sample
	b := 0
	for ; ; b++ {
		err := sp.Append(ctx, testBatch(b, 5))
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		accepted = append(accepted, testBatch(b, 5)...)
		if b > 1000 {
			t.Fatal("never full")
		}
	}
	if n := metric(t, sp.reg, "gpumeter_spool_rejected_rows_total"); n != 5 {
		t.Errorf("rejected_rows_total = %v, want 5", n)
	}
	if n := metric(t, sp.reg, "gpumeter_spool_dropped_rows_total"); n != 0 {
		t.Errorf("dropped_rows_total = %v under reject", n)
	}
	got, _ := readAll(t, sp.Spool)
	equalSamples(t, samplesOf(got), accepted)

	// Once shipped, the space comes back.
	if err := sp.Commit(ctx, got[len(got)-1].Next); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, sp.Spool, testBatch(b, 5))
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig("/var/lib/gpumeter/spool")
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr bool
	}{
		{"defaults are valid", func(*Config) {}, false},
		{"dir is required", func(c *Config) { c.Dir = "" }, true},
		{"segments below 4 KiB are refused", func(c *Config) { c.SegmentBytes = 4095 }, true},
		{"segments above 1 GiB are refused", func(c *Config) { c.SegmentBytes = 1<<30 + 1; c.MaxBytes = 1 << 40 }, true},
		{"max_bytes must hold two segments", func(c *Config) { c.MaxBytes = 2*c.SegmentBytes - 1 }, true},
		{"max_bytes of exactly two segments is enough", func(c *Config) { c.MaxBytes = 2 * c.SegmentBytes }, false},
		{"reject is a policy", func(c *Config) { c.Overflow = OverflowReject }, false},
		{"unknown policy is refused", func(c *Config) { c.Overflow = "block" }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			if err := c.Validate(); (err != nil) != tc.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tc.wantErr)
			}
		})
	}
	if _, err := Open(context.Background(), Config{}, discardLogger(), nil); err == nil {
		t.Fatal("Open accepted an invalid config")
	}
}

func TestSecondOpenOfADirectoryFails(t *testing.T) {
	dir := t.TempDir()
	openSpool(t, testConfig(dir))
	if sp, err := Open(context.Background(), testConfig(dir), discardLogger(), nil); err == nil {
		sp.Close()
		t.Fatal("a second spool opened a locked directory")
	}
}

func TestClosedSpoolRefusesEverything(t *testing.T) {
	sp := openSpool(t, testConfig(t.TempDir()))
	mustAppend(t, sp.Spool, testBatch(0, 5))
	b, _ := sp.Read(context.Background())
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := sp.Append(ctx, testBatch(1, 5)); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close: %v", err)
	}
	if _, err := sp.Read(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
	if err := sp.Commit(ctx, b.Next); !errors.Is(err, ErrClosed) {
		t.Errorf("Commit after Close: %v", err)
	}
}

// One writer and one reader at once, with segments rolling under the
// reader and, in the second case, dropped from under it.
func TestConcurrentWriterAndReader(t *testing.T) {
	tests := []struct {
		name     string
		maxBytes int64
		headFor  int // batches the writer appends before the reader starts
	}{
		{"everything arrives in order", 1 << 30, 0},
		{"drops under the reader lose nothing unaccounted", 3 * (4 << 10), 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.MaxBytes = tc.maxBytes
			sp := openSpool(t, cfg)
			ctx := context.Background()
			const batches = 300
			done, head := make(chan struct{}), make(chan struct{})
			var wg sync.WaitGroup
			defer wg.Wait() // also when the reader fails
			wg.Go(func() {
				defer close(done)
				for b := range batches {
					if b == tc.headFor {
						close(head)
					}
					if err := sp.Append(ctx, testBatch(b, 3)); err != nil {
						t.Errorf("append %d: %v", b, err)
						return
					}
				}
			})
			<-head
			var read []int
			writerDone := false
			for {
				b, err := sp.Read(ctx)
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				if len(b.Samples) == 0 {
					if writerDone {
						break
					}
					select {
					case <-sp.Appended():
					case <-done:
						writerDone = true
					}
					continue
				}
				n := int(b.Samples[0].ID >> 32)
				equalSamples(t, b.Samples, testBatch(n, 3))
				if len(read) > 0 && n <= read[len(read)-1] {
					t.Fatalf("batch %d after %d", n, read[len(read)-1])
				}
				read = append(read, n)
				if err := sp.Commit(ctx, b.Next); err != nil {
					t.Fatalf("commit: %v", err)
				}
			}
			wg.Wait()
			dropped := int(metric(t, sp.reg, "gpumeter_spool_dropped_rows_total"))
			if len(read)*3+dropped < batches*3 {
				t.Fatalf("read %d rows + dropped %d < appended %d", len(read)*3, dropped, batches*3)
			}
			if (dropped > 0) != (tc.headFor > 0) {
				t.Fatalf("dropped %d rows with a head start of %d batches", dropped, tc.headFor)
			}
			if dropped == 0 && len(read) != batches {
				t.Fatalf("read %d batches, want %d", len(read), batches)
			}
			if rows, _ := sp.Backlog(); rows != 0 {
				t.Fatalf("backlog %d rows after reading and committing everything", rows)
			}
		})
	}
}

func TestSegmentHeaderRoundTrip(t *testing.T) {
	h := encodeSegmentHeader(77)
	if seq, err := parseSegmentHeader(h); err != nil || seq != 77 {
		t.Fatalf("parse = %d, %v", seq, err)
	}
	for i := range h {
		bad := bytes.Clone(h)
		bad[i] ^= 1
		if _, err := parseSegmentHeader(bad); !errors.Is(err, ErrCorruptSegment) {
			t.Fatalf("flipped header byte %d: %v", i, err)
		}
	}
}

func TestAppendRefusesInvalidSamplesAndWritesNothing(t *testing.T) {
	o := openSpool(t, testConfig(t.TempDir()))
	batch := testBatch(0, 10)
	batch[7].End = batch[7].Start // end not after start
	err := o.Append(context.Background(), batch)
	if !errors.Is(err, ErrInvalidSample) || !strings.Contains(err.Error(), "sample 7") {
		t.Fatalf("Append error = %v, want ErrInvalidSample naming sample 7", err)
	}
	if rows, _ := o.Backlog(); rows != 0 {
		t.Fatalf("backlog %d rows after a refused append", rows)
	}
}

// Spools written before payload version 3 (nine meters, no meter count)
// and before version 2 (no unmeasured flags either) still read.
func TestDecodeReadsVersion1And2Payloads(t *testing.T) {
	batch := testBatch(3, 1)
	batch[0].Unmeasured = 0
	// v1 and v2 carry the first legacyPayloadMeters meters: the later ones
	// are zero here, one byte each just before the flags, and dropped.
	var absent meter.Unmeasured
	for m := meter.ID(legacyPayloadMeters); m < meter.Count; m++ {
		*batch[0].Ptr(m) = 0
		absent |= meter.Specs[m].Unmeasured
	}
	later := int(meter.Count - legacyPayloadMeters)
	var e encoder
	rec, err := e.encode(batch)
	if err != nil {
		t.Fatal(err)
	}
	payload := append([]byte(nil), rec[recHeaderLen:]...)
	if payload[0] != payloadV3 || payload[1] != byte(meter.Count) || payload[len(payload)-1] != 0 {
		t.Fatalf("unexpected v3 layout: version %d, meters %d, last byte %d", payload[0], payload[1], payload[len(payload)-1])
	}
	v1 := append([]byte{payloadV1}, payload[2:len(payload)-1-later]...)
	got, err := decodeBatch(v1, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(batch)
	want[0].Unmeasured = absent // meters v1 predates are unmeasured, not 0
	equalSamples(t, got, want)

	batch[0].Unmeasured = meter.UnmeasuredNVLink | meter.UnmeasuredEnergy
	rec, err = e.encode(batch)
	if err != nil {
		t.Fatal(err)
	}
	n := len(rec)
	v2 := append([]byte{payloadV2}, rec[recHeaderLen+2:n-1-later]...)
	v2 = append(v2, rec[n-1])
	if got, err = decodeBatch(v2, 1); err != nil || got[0].Unmeasured != batch[0].Unmeasured|absent {
		t.Fatalf("v2: %+v, %v", got, err)
	}
	if got, err = decodeBatch(rec[recHeaderLen:], 1); err != nil || got[0].Unmeasured != batch[0].Unmeasured {
		t.Fatalf("v3 round trip: %+v, %v", got, err)
	}
}

// A payload written before a meter joined the table decodes with that
// meter zero and marked unmeasured; one with more meters than this build
// knows is refused, not misread.
func TestDecodeMeterCount(t *testing.T) {
	batch := testBatch(1, 1)
	last := meter.ID(meter.Count - 1)
	*batch[0].Ptr(last) = 0 // one byte, the sample's second-to-last
	batch[0].Unmeasured = 0
	var e encoder
	rec, err := e.encode(batch)
	if err != nil {
		t.Fatal(err)
	}
	payload := append([]byte(nil), rec[recHeaderLen:]...)
	older := append([]byte{payloadV3, byte(meter.Count - 1)}, payload[2:len(payload)-2]...)
	older = append(older, payload[len(payload)-1])
	got, err := decodeBatch(older, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := batch[0]
	want.Unmeasured = meter.Specs[last].Unmeasured
	if got[0].Values != want.Values || got[0].Unmeasured != want.Unmeasured {
		t.Fatalf("older payload: %+v unmeasured %v, want %+v unmeasured %v", got[0].Values, got[0].Unmeasured, want.Values, want.Unmeasured)
	}
	newer := append([]byte{payloadV3, byte(meter.Count + 1)}, payload[2:]...)
	if _, err := decodeBatch(newer, 1); !errors.Is(err, ErrCorruptSegment) {
		t.Fatalf("a payload of %d meters: %v, want ErrCorruptSegment", meter.Count+1, err)
	}
}
