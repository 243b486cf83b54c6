package nvml

import "testing"

func TestPercentRatio(t *testing.T) {
	cases := []struct {
		p    float64
		want uint32
	}{{0, 0}, {-3, 0}, {42.5, 425_000}, {100, 1_000_000}, {250, 1_000_000}}
	for _, tc := range cases {
		if got := percentRatio(tc.p); !got.OK || got.PPM != tc.want {
			t.Errorf("percentRatio(%v) = %+v, want %d", tc.p, got, tc.want)
		}
	}
}

func TestCString(t *testing.T) {
	b := [32]int8{}
	for i, c := range "00000000:07:00.0" {
		b[i] = int8(c)
	}
	if got := cString(b[:]); got != "00000000:07:00.0" {
		t.Fatalf("cString = %q", got)
	}
}
