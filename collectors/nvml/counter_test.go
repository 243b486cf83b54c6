package nvml

import (
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

func TestCounterAdvance(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	iv := func(from, to int) interval {
		return interval{start: t0.Add(time.Duration(from) * time.Second), end: t0.Add(time.Duration(to) * time.Second)}
	}
	cases := []struct {
		name     string
		start    counter
		v        uint64
		width    uint
		iv       interval
		maxDelta uint64
		want     collectors.Delta
		event    counterEvent
	}{
		{"first reading is a baseline", counter{}, 500, 64, iv(0, 10), 1000, collectors.Delta{}, counterBaseline},
		{"growth is the delta", counter{last: 100, at: t0, ok: true}, 600, 64, iv(0, 10), 1000, collectors.Delta{Value: 500, OK: true}, counterNormal},
		{"no growth is zero, and known", counter{last: 100, at: t0, ok: true}, 100, 64, iv(0, 10), 1000, collectors.Delta{Value: 0, OK: true}, counterNormal},
		{"a baseline from another interval start is not used", counter{last: 100, at: t0.Add(-10 * time.Second), ok: true}, 600, 64, iv(0, 10), 1000, collectors.Delta{}, counterBaseline},
		{"an implausible jump is dropped", counter{last: 100, at: t0, ok: true}, 100 + 1001, 64, iv(0, 10), 1000, collectors.Delta{}, counterImplausible},
		{"a reset counts from zero", counter{last: 9_000_000, at: t0, ok: true}, 300, 64, iv(0, 10), 1000, collectors.Delta{Value: 300, OK: true}, counterReset},
		{"a reset to a large value is dropped", counter{last: 9_000_000, at: t0, ok: true}, 5000, 64, iv(0, 10), 1000, collectors.Delta{}, counterImplausible},
		{"a 32-bit counter wraps", counter{last: 1<<32 - 100, at: t0, ok: true}, 50, 32, iv(0, 10), 1000, collectors.Delta{Value: 150, OK: true}, counterWrapped},
		{"a 32-bit counter far from its top was reset", counter{last: 5000, at: t0, ok: true}, 50, 32, iv(0, 10), 1000, collectors.Delta{Value: 50, OK: true}, counterReset},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.start
			got, ev := c.advance(tc.v, tc.width, tc.iv, tc.maxDelta)
			if got != tc.want || ev != tc.event {
				t.Fatalf("advance = %+v %s, want %+v %s", got, ev, tc.want, tc.event)
			}
			if c.last != tc.v || !c.at.Equal(tc.iv.end) || !c.ok {
				t.Fatalf("counter not moved on: %+v", c)
			}
		})
	}
}
