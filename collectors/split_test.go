package collectors

import (
	"math"
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	cases := []struct {
		name    string
		total   uint64
		weights []uint64
		want    []uint64
	}{
		{"exact shares need no remainder", 10, []uint64{1, 1}, []uint64{5, 5}},
		{"largest remainder gets the leftover unit", 10, []uint64{1, 2}, []uint64{3, 7}},
		{"ties in the remainder go to the earlier part", 10, []uint64{1, 1, 1}, []uint64{4, 3, 3}},
		{"MIG slices 1/2/3 plus one idle of 10 s", 10_000_000, []uint64{1000, 2000, 3000, 1000}, []uint64{1428572, 2857143, 4285714, 1428571}},
		{"zero weight gets nothing", 7, []uint64{0, 3, 4}, []uint64{0, 3, 4}},
		{"all-zero weights split equally", 7, []uint64{0, 0, 0}, []uint64{3, 2, 2}},
		{"zero total gives zeros", 0, []uint64{5, 6}, []uint64{0, 0}},
		{"no parts gives nothing", 5, nil, []uint64{}},
		{"one part takes all", 12345, []uint64{9}, []uint64{12345}},
		{"products beyond 64 bits stay exact", math.MaxUint64, []uint64{math.MaxUint64, math.MaxUint64}, []uint64{math.MaxUint64/2 + 1, math.MaxUint64 / 2}},
		{"weight sums beyond 64 bits are scaled", 1000, []uint64{math.MaxUint64, math.MaxUint64, math.MaxUint64 / 2}, []uint64{400, 400, 200}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Split(nil, tc.total, tc.weights)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Split(%d, %v) = %v, want %v", tc.total, tc.weights, got, tc.want)
			}
			var sum uint64
			for _, v := range got {
				sum += v
			}
			if len(tc.weights) > 0 && sum != tc.total {
				t.Fatalf("parts add up to %d, want %d", sum, tc.total)
			}
		})
	}
}

func TestSplitPartsAlwaysAddUp(t *testing.T) {
	// A deterministic sweep of sizes and weights, including more than 64
	// parts (heap remainders).
	x := uint64(12345)
	next := func() uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	for n := 1; n <= 100; n++ {
		w := make([]uint64, n)
		for i := range w {
			w[i] = next() % 1_000_000_000
		}
		total := next() % 100_000_000
		got := Split(nil, total, w)
		var sum uint64
		for i, v := range got {
			sum += v
			// No part strays more than one unit from its exact share.
			var wsum float64
			for _, ww := range w {
				wsum += float64(ww)
			}
			exact := float64(total) * float64(w[i]) / wsum
			if math.Abs(float64(v)-exact) > 1.0001 {
				t.Fatalf("n=%d part %d = %d, exact share %.3f", n, i, v, exact)
			}
		}
		if sum != total {
			t.Fatalf("n=%d: parts add up to %d, want %d", n, sum, total)
		}
	}
}

func TestSplitReusesDst(t *testing.T) {
	dst := make([]uint64, 0, 8)
	got := Split(dst, 9, []uint64{1, 2})
	if &got[0] != &dst[:1][0] {
		t.Fatal("Split did not reuse dst")
	}
	if allocs := testing.AllocsPerRun(100, func() { Split(dst, 9, []uint64{1, 2, 3}) }); allocs != 0 {
		t.Fatalf("Split allocated %.0f times with a big enough dst", allocs)
	}
}

func TestMulDiv(t *testing.T) {
	cases := []struct {
		name    string
		a, b, c uint64
		want    uint64
	}{
		{"small", 6, 7, 4, 10},
		{"product above 64 bits", math.MaxUint64, 1000, 1000, math.MaxUint64},
		{"quotient does not fit saturates", math.MaxUint64, 2, 1, math.MaxUint64},
		{"division by zero is zero", 5, 5, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := MulDiv(tc.a, tc.b, tc.c); got != tc.want {
				t.Fatalf("MulDiv(%d, %d, %d) = %d, want %d", tc.a, tc.b, tc.c, got, tc.want)
			}
		})
	}
}
