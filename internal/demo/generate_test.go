package demo

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite usage.csv from Generate")

func TestBundledDataIsGenerated(t *testing.T) {
	var b bytes.Buffer
	if err := Generate(&b); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("usage.csv", b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(b.Bytes(), UsageCSV) {
		t.Fatal("usage.csv differs from Generate(); run go test ./internal/demo -update and review the diff")
	}
}

func TestLargestRemainderAddsUp(t *testing.T) {
	for _, tc := range []struct {
		total   uint64
		weights []uint64
	}{
		{900_000_000, []uint64{3, 2, 1, 1}},
		{10, []uint64{1, 1, 1}},
		{7, []uint64{0, 5}},
		{0, []uint64{1, 2}},
	} {
		parts := largestRemainder(tc.total, tc.weights)
		var sum uint64
		for _, p := range parts {
			sum += p
		}
		if sum != tc.total {
			t.Errorf("largestRemainder(%d, %v) = %v, sums to %d", tc.total, tc.weights, parts, sum)
		}
	}
}
