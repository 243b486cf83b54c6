package nvml

import (
	"testing"
	"time"
)

func TestPresence(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	us := func(s int) uint64 { return uint64(at(s).UnixMicro()) }
	iv := interval{start: at(0), end: at(10), prevKnown: true}
	cases := []struct {
		name             string
		iv               interval
		wasRunning, now  bool
		agg              utilAgg
		lastEver         uint64
		wantFrom, wantTo int
	}{
		{"listed at both reads: the whole interval", iv, true, true, utilAgg{}, 0, 0, 10},
		{"started: from its first sample", iv, false, true, utilAgg{n: 2, first: us(3), last: us(9)}, 0, 3, 10},
		{"started without samples: from the midpoint", iv, false, true, utilAgg{}, 0, 5, 10},
		{"exited: until its last sample", iv, true, false, utilAgg{n: 4, first: us(1), last: us(4)}, 0, 0, 4},
		{"exited idle: until its last sample ever, clamped", iv, true, false, utilAgg{}, us(-30), 0, 0},
		{"exited without any sample: until the midpoint", iv, true, false, utilAgg{}, 0, 0, 5},
		{"came and went between reads: its samples", iv, false, false, utilAgg{n: 3, first: us(2), last: us(7)}, 0, 2, 7},
		{"no baseline: a listed process ran throughout", interval{start: at(0), end: at(10)}, false, true, utilAgg{n: 1, first: us(8), last: us(8)}, 0, 0, 10},
		{"samples past the interval are clamped", iv, false, true, utilAgg{n: 1, first: us(12), last: us(12)}, 0, 10, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			from, to := presence(tc.iv, tc.wasRunning, tc.now, tc.agg, tc.lastEver)
			if !from.Equal(at(tc.wantFrom)) || !to.Equal(at(tc.wantTo)) {
				t.Fatalf("presence = [%s, %s), want [%ds, %ds)", from.Sub(t0), to.Sub(t0), tc.wantFrom, tc.wantTo)
			}
		})
	}
}

func TestUtilAggRatio(t *testing.T) {
	if r := (utilAgg{}).ratio(); !r.OK || r.PPM != 0 {
		t.Fatalf("no samples = %+v, want a known zero", r)
	}
	if r := (utilAgg{sum: 150, n: 2}).ratio(); !r.OK || r.PPM != 750_000 {
		t.Fatalf("mean of 100 and 50 = %+v, want 75 %%", r)
	}
}
