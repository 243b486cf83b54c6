package spool

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gpumeter/gpumeter/collectors"
)

// The full-disk tests run on a real, small tmpfs that the test mounts. They
// need root (or CAP_SYS_ADMIN) and fail, never skip, where they cannot
// mount: a full disk is the case a spool exists for.

// mountTmpfs mounts a tmpfs of the given size on a new directory and
// unmounts it when the test ends (after the spools opened later are closed:
// cleanups run last in, first out).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Fatalf("mount a %s tmpfs on %s (the full-disk test needs root or CAP_SYS_ADMIN and never skips): %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func diskFullConfig(dir string) Config {
	// max_bytes far above the file system: the disk fills before the
	// overflow policy applies.
	return Config{Dir: dir, SegmentBytes: 64 << 10, MaxBytes: 1 << 30, Overflow: OverflowDropOldest}
}

// batchRef names an appended batch: testBatch(b, n).
type batchRef struct{ b, n int }

func wantSamples(refs []batchRef) []collectors.Sample {
	var out []collectors.Sample
	for _, r := range refs {
		out = append(out, testBatch(r.b, r.n)...)
	}
	return out
}

func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC)
}

// fillDisk appends until the file system is full: batches of 20 samples
// until one fails with ENOSPC, then single samples until three in a row
// fail (the last free page went to a segment). It returns what was
// appended; *next is the next batch number.
func fillDisk(t *testing.T, sp *Spool, next *int) []batchRef {
	t.Helper()
	var refs []batchRef
	n, fails := 20, 0
	for i := 0; fails < 3; i++ {
		if i > 100_000 {
			t.Fatal("the disk never filled")
		}
		err := sp.Append(context.Background(), testBatch(*next, n))
		switch {
		case err == nil:
			refs = append(refs, batchRef{*next, n})
			fails = 0
		case isDiskFull(err):
			n = 1
			fails++
		default:
			t.Fatalf("append on a filling disk: %v, want ENOSPC", err)
		}
		*next++
	}
	if len(refs) == 0 {
		t.Fatal("nothing appended before the disk was full")
	}
	checkFull(t, sp.cfg.Dir)
	return refs
}

// checkFull fails unless dir's file system has less than a page free.
func checkFull(t *testing.T, dir string) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if free := st.Bavail * uint64(st.Bsize); free >= 4096 {
		t.Fatalf("setup: %d bytes still free on the tmpfs", free)
	}
}

// eatFreeSpace fills what is left of dir's file system with a filler file.
func eatFreeSpace(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	for {
		if _, err := f.Write(page); err != nil {
			if !isDiskFull(err) {
				t.Fatal(err)
			}
			break
		}
	}
	checkFull(t, dir)
}

// shipAllAndCommit reads everything, checks it is what was appended, and
// commits past it: on a full disk this must work and free the segments.
func shipAllAndCommit(t *testing.T, sp *Spool, want []batchRef) {
	t.Helper()
	got, corrupt := readAll(t, sp)
	if corrupt != 0 {
		t.Fatalf("%d corrupt regions after filling the disk", corrupt)
	}
	equalSamples(t, samplesOf(got), wantSamples(want))
	if err := sp.Commit(context.Background(), got[len(got)-1].Next); err != nil {
		t.Fatalf("commit on a full disk: %v (the spool cannot free shipped segments)", err)
	}
	if files := segFiles(t, sp.cfg.Dir); len(files) != 1 {
		t.Fatalf("after committing everything on a full disk %d segment files are left, want 1 (the active one)", len(files))
	}
	if rows, _ := sp.Backlog(); rows != 0 {
		t.Fatalf("backlog %d rows after committing everything", rows)
	}
}

func TestFullDiskShipAndCommitFreeSegments(t *testing.T) {
	ctx := context.Background()
	dir := mountTmpfs(t, "2m")
	o := openSpool(t, diskFullConfig(dir))
	next := 0
	appended := fillDisk(t, o.Spool, &next)

	shipAllAndCommit(t, o.Spool, appended)

	if n := o.logs.count(slog.LevelError, "spool disk full: batch not spooled"); n < 3 {
		t.Errorf("%d Error logs for appends refused by a full disk, want at least 3", n)
	}
	if n := metric(t, o.reg, "gpumeter_spool_disk_full_total"); n < 3 {
		t.Errorf("disk_full_total = %v, want at least 3", n)
	}
	if n := metric(t, o.reg, "gpumeter_spool_disk_full"); n != 1 {
		t.Errorf("disk_full gauge = %v while the last append failed for space, want 1", n)
	}
	// Appends work again once the shipped segments are gone.
	mustAppend(t, o.Spool, testBatch(next, 20))
	if n := metric(t, o.reg, "gpumeter_spool_disk_full"); n != 0 {
		t.Errorf("disk_full gauge = %v after an append succeeded, want 0", n)
	}
	// Appends that failed to start a segment used up no segment number, so
	// a restart finds no hole between the cursor and the new segment.
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	o = openSpool(t, diskFullConfig(dir))
	if n := o.logs.count(slog.LevelError, msgMissingAtOpen); n != 0 {
		t.Errorf("reopen after a full disk reported segments missing (%d Error logs)", n)
	}
	got, _ := readAll(t, o.Spool)
	equalSamples(t, samplesOf(got), testBatch(next, 20))
	if err := o.Commit(ctx, got[0].Next); err != nil {
		t.Fatal(err)
	}
}

func TestFullDiskRestartDoesNotStick(t *testing.T) {
	ctx := context.Background()
	dir := mountTmpfs(t, "2m")
	cfg := diskFullConfig(dir)
	o := openSpool(t, cfg)
	next := 0
	appended := fillDisk(t, o.Spool, &next)
	// Ship part of it before the "crash", so the restart starts from a
	// committed cursor in the middle.
	b, err := o.Read(ctx)
	if err != nil || len(b.Samples) == 0 {
		t.Fatalf("read: %v", err)
	}
	if err := o.Commit(ctx, b.Next); err != nil {
		t.Fatalf("commit on a full disk: %v", err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	eatFreeSpace(t, dir)

	o = openSpool(t, cfg)
	// Appends that failed to start a segment used up no segment number:
	// nothing is reported missing.
	if n := o.logs.count(slog.LevelError, msgMissingAtOpen); n != 0 {
		t.Errorf("restart on a full disk reported segments missing (%d Error logs)", n)
	}
	shipAllAndCommit(t, o.Spool, appended[1:])
	// The cursor written on the full disk holds across another restart.
	appendSurvivesRestart(t, o, cfg, next)
}

func TestFullDiskWithACursorFileOfAnOlderBuild(t *testing.T) {
	dir := mountTmpfs(t, "2m")
	cfg := diskFullConfig(dir)
	// Room kept aside to write the old build's cursor file after the fill.
	reserve := filepath.Join(dir, "reserve")
	if err := os.WriteFile(reserve, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	o := openSpool(t, cfg)
	next := 0
	appended := fillDisk(t, o.Spool, &next)
	b, err := o.Read(context.Background())
	if err != nil || len(b.Samples) == 0 {
		t.Fatalf("read: %v", err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	// An older build committed batch 0 and stopped; then the disk filled up.
	if err := os.Remove(reserve); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cursor"), legacyCursor(b.Next), 0o640); err != nil {
		t.Fatal(err)
	}
	eatFreeSpace(t, dir)

	o = openSpool(t, cfg)
	shipAllAndCommit(t, o.Spool, appended[1:])
	// No room to grow the old file: it was overwritten in place.
	checkCursorFileSize(t, dir, cursorV1Len)
	appendSurvivesRestart(t, o, cfg, next)
}

// appendSurvivesRestart appends batch next to o, whose backlog is shipped,
// and checks that after a restart that batch is all there is to read and
// the cursor file has this build's size.
func appendSurvivesRestart(t *testing.T, o opened, cfg Config, next int) {
	t.Helper()
	mustAppend(t, o.Spool, testBatch(next, 20))
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	o = openSpool(t, cfg)
	got, _ := readAll(t, o.Spool)
	equalSamples(t, samplesOf(got), testBatch(next, 20))
	checkCursorFileSize(t, cfg.Dir, cursorFileLen)
}
