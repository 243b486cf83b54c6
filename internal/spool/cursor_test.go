package spool

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

func checkCursorFileSize(t *testing.T, dir string, want int64) {
	t.Helper()
	st, err := os.Stat(filepath.Join(dir, cursorFile))
	if err != nil {
		t.Fatalf("cursor file: %v", err)
	}
	if st.Size() != want {
		t.Fatalf("cursor file has %d bytes, want %d", st.Size(), want)
	}
}

// commitBatches appends n batches, reads them and commits after each one,
// and returns the positions committed.
func commitBatches(t *testing.T, sp *Spool, n int) []Position {
	t.Helper()
	var out []Position
	for b := range n {
		mustAppend(t, sp, testBatch(b, 5))
		got, _ := readAll(t, sp)
		if len(got) != 1 {
			t.Fatalf("read %d batches, want 1", len(got))
		}
		if err := sp.Commit(context.Background(), got[0].Next); err != nil {
			t.Fatal(err)
		}
		out = append(out, got[0].Next)
	}
	return out
}

func samePosition(p, q Position) bool { return p.Segment == q.Segment && p.Offset == q.Offset }

func TestCursorFileIsPreallocatedAndWrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	sp := openSpool(t, cfg)
	checkCursorFileSize(t, dir, cursorFileLen)
	before, err := os.Stat(filepath.Join(dir, cursorFile))
	if err != nil {
		t.Fatal(err)
	}
	pos := commitBatches(t, sp.Spool, 5)
	after, err := os.Stat(filepath.Join(dir, cursorFile))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || after.Size() != cursorFileLen {
		t.Fatal("commits replaced or resized the cursor file instead of writing it in place")
	}
	if _, err := os.Stat(filepath.Join(dir, cursorTmpFile)); !os.IsNotExist(err) {
		t.Fatalf("%s after commits: %v", cursorTmpFile, err)
	}
	sp.Close()
	sp = openSpool(t, cfg)
	if c := sp.Cursor(); !samePosition(c, pos[len(pos)-1]) {
		t.Fatalf("cursor after reopen %s, want %s", c, pos[len(pos)-1])
	}
}

// A crash while a commit writes its slot leaves that slot torn; the other
// slot holds the commit before, which is where the spool resumes.
func TestTornCursorSlotFallsBackToThePreviousCommit(t *testing.T) {
	for _, tc := range []struct {
		name string
		tear func(b []byte)
	}{
		{"slot half written", func(b []byte) { clear(b[20:cursorSlotLen]) }},
		{"slot never written", func(b []byte) { clear(b[:cursorSlotLen]) }},
		{"one bit flipped", func(b []byte) { b[17] ^= 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(dir)
			sp := openSpool(t, cfg)
			pos := commitBatches(t, sp.Spool, 4)
			sp.Close()

			path := filepath.Join(dir, cursorFile)
			editFile(t, path, func(data []byte) {
				// Slot A was written at creation, then commits went B, A, B, A:
				// the last commit is in slot A.
				newest, err := decodeCursorSlot(data)
				if err != nil || !samePosition(newest.st.pos, pos[3]) {
					t.Fatalf("slot A = %+v, %v; want the last commit %s", newest, err, pos[3])
				}
				tc.tear(data[:cursorSlotSpan])
			})
			sp = openSpool(t, cfg)
			if c := sp.Cursor(); !samePosition(c, pos[2]) {
				t.Fatalf("cursor %s, want the commit before the torn one, %s", c, pos[2])
			}
			got, _ := readAll(t, sp.Spool)
			equalSamples(t, samplesOf(got), testBatch(3, 5))
			// And the next commit overwrites the torn slot, not the good one.
			if err := sp.Commit(context.Background(), got[0].Next); err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(path)
			if a, err := decodeCursorSlot(data); err != nil || !samePosition(a.st.pos, got[0].Next) {
				t.Fatalf("slot A after the next commit = %+v, %v", a, err)
			}
		})
	}
}

func TestCursorFileOfAnOlderBuildIsReadAndGrownInPlace(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	sp := openSpool(t, cfg)
	for b := range 3 {
		mustAppend(t, sp.Spool, testBatch(b, 5))
	}
	b0, _ := sp.Read(context.Background())
	sp.Close()
	path := filepath.Join(dir, cursorFile)

	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"28-byte file", legacyCursor(b0.Next)},
		// A crash while the file was grown: the old record, then part of
		// the rest (slot B not yet there).
		{"grown part way", append(legacyCursor(b0.Next), make([]byte, 1000)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, tc.file, 0o640); err != nil {
				t.Fatal(err)
			}
			before, _ := os.Stat(path)
			sp := openSpool(t, cfg)
			if c := sp.Cursor(); !samePosition(c, b0.Next) {
				t.Fatalf("cursor %s, want %s from the old file", c, b0.Next)
			}
			checkCursorFileSize(t, dir, cursorFileLen)
			if after, _ := os.Stat(path); !os.SameFile(before, after) {
				t.Fatal("the old cursor file was replaced, not grown in place")
			}
			got, _ := readAll(t, sp.Spool)
			equalSamples(t, samplesOf(got), append(testBatch(1, 5), testBatch(2, 5)...))
			sp.Close()
			// Reopening reads the grown file (slot B).
			sp = openSpool(t, cfg)
			if c := sp.Cursor(); !samePosition(c, b0.Next) {
				t.Fatalf("cursor after reopen %s, want %s", c, b0.Next)
			}
			sp.Close()
		})
	}
}

// legacyCursor is a cursor file as builds before the two-slot cursor wrote
// it: "GMCR" version 1, flags, segment, offset, CRC32C (28 bytes).
func legacyCursor(p Position) []byte {
	b := make([]byte, 28)
	copy(b, "GMCR")
	binary.LittleEndian.PutUint16(b[4:], 1)
	binary.LittleEndian.PutUint64(b[8:], p.Segment)
	binary.LittleEndian.PutUint64(b[16:], uint64(p.Offset))
	binary.LittleEndian.PutUint32(b[24:], crc32.Checksum(b[:24], crc32.MakeTable(crc32.Castagnoli)))
	return b
}
