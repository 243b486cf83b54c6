package spool

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpumeter/gpumeter/collectors"
)

var updateSeeds = flag.Bool("update", false, "rewrite testdata/fuzz seeds from the current encoder")

// decodeSegment decodes a whole segment file held in memory the way the
// reader does: header, then records, resynchronising past corrupt ones.
// It returns the batches that decoded and how many records were skipped.
func decodeSegment(data []byte) (batches [][]collectors.Sample, skipped int, err error) {
	if _, err := parseSegmentHeader(data); err != nil {
		return nil, 0, err
	}
	r := bytes.NewReader(data)
	end := int64(len(data))
	var buf []byte
	for off := int64(segHeaderLen); off < end; {
		rh, payload, err := readRecordAt(r, off, end, &buf)
		if err != nil {
			if !errors.Is(err, ErrCorruptSegment) {
				return nil, 0, fmt.Errorf("record at %d: not a corruption error: %w", off, err)
			}
			skipped++
			next, found, err := findNextRecord(r, off+1, end, &buf)
			if err != nil {
				return nil, 0, err
			}
			if !found {
				break
			}
			off = next
			continue
		}
		samples, err := decodeBatch(payload, rh.rows)
		if err != nil {
			if !errors.Is(err, ErrCorruptSegment) {
				return nil, 0, fmt.Errorf("record at %d: not a corruption error: %w", off, err)
			}
			skipped++
		} else {
			batches = append(batches, samples)
		}
		off += recHeaderLen + int64(rh.payloadLen)
	}
	return batches, skipped, nil
}

// FuzzSegmentDecode feeds arbitrary bytes to segment decoding. The property:
// no panic, and every batch it returns is valid — as many samples as its
// header said, and it re-encodes to a record that decodes to the same.
// Seeds live in testdata/fuzz/FuzzSegmentDecode (see TestFuzzSeedsAreCurrent).
func FuzzSegmentDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		batches, _, err := decodeSegment(data)
		if err != nil && !errors.Is(err, ErrCorruptSegment) {
			t.Fatalf("error that is not ErrCorruptSegment: %v", err)
		}
		var enc encoder
		for i, b := range batches {
			rec, err := enc.encode(b)
			if err != nil {
				t.Fatalf("batch %d does not re-encode: %v", i, err)
			}
			rh, err := parseRecordHeader(rec)
			if err != nil {
				t.Fatalf("batch %d re-encodes to a bad header: %v", i, err)
			}
			again, err := decodeBatch(rec[recHeaderLen:], rh.rows)
			if err != nil {
				t.Fatalf("batch %d re-encoded does not decode: %v", i, err)
			}
			if !reflect.DeepEqual(again, b) {
				t.Fatalf("batch %d changes on a round trip:\n%+v\n%+v", i, b, again)
			}
		}
	})
}

type fuzzSeed struct {
	name string
	data []byte
}

// fuzzSeeds builds the seed corpus: a valid segment and damaged copies.
func fuzzSeeds() []fuzzSeed {
	var enc encoder
	seg := encodeSegmentHeader(1)
	var ends []int
	for b, n := range []int{1, 3, 20} {
		rec, err := enc.encode(testBatch(b, n))
		if err != nil {
			panic(err) // literals; cannot fail
		}
		seg = append(seg, rec...)
		ends = append(ends, len(seg))
	}
	flipped := bytes.Clone(seg)
	flipped[ends[0]+recHeaderLen+4] ^= 0xff
	return []fuzzSeed{
		{"valid", seg},
		{"header-only", seg[:segHeaderLen]},
		{"torn-header", seg[:segHeaderLen-3]},
		{"torn-record-header", seg[:ends[1]+5]},
		{"torn-payload", seg[:ends[2]-9]},
		{"bad-crc-middle", flipped},
	}
}

func TestFuzzSeedsAreCurrent(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzSegmentDecode")
	for _, s := range fuzzSeeds() {
		want := fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", s.data)
		path := filepath.Join(dir, s.name)
		if *updateSeeds {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("seed %s: %v (run go test -run TestFuzzSeedsAreCurrent -update)", s.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("seed %s is stale: the format changed; rerun with -update and review", s.name)
		}
	}
}

func TestDecodeSegmentOfTheSeeds(t *testing.T) {
	tests := []struct {
		seed        string
		wantBatches int
		wantSkipped int
		wantErr     bool
	}{
		{"valid", 3, 0, false},
		{"header-only", 0, 0, false},
		{"torn-header", 0, 0, true},
		{"torn-record-header", 2, 1, false},
		{"torn-payload", 2, 1, false},
		{"bad-crc-middle", 2, 1, false},
	}
	seeds := map[string][]byte{}
	for _, s := range fuzzSeeds() {
		seeds[s.name] = s.data
	}
	for _, tc := range tests {
		t.Run(tc.seed, func(t *testing.T) {
			batches, skipped, err := decodeSegment(seeds[tc.seed])
			if (err != nil) != tc.wantErr || len(batches) != tc.wantBatches || skipped != tc.wantSkipped {
				t.Fatalf("decodeSegment = %d batches, %d skipped, %v; want %d, %d, error %v", len(batches), skipped, err, tc.wantBatches, tc.wantSkipped, tc.wantErr)
			}
		})
	}
}
