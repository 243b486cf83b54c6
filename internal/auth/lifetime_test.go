package auth

import (
	"testing"
	"time"
)

func TestKeysExpiresTakesDays(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"30d", 30 * 24 * time.Hour, false},
		{"1d", 24 * time.Hour, false},
		{"72h", 72 * time.Hour, false},
		{"90m", 90 * time.Minute, false},
		{"1.5d", 0, true},
		{"-1d", 0, true},
		{"d", 0, true},
		{"30 days", 0, true},
	} {
		var l Lifetime
		err := l.Set(tc.in)
		if (err != nil) != tc.err || (err == nil && time.Duration(l) != tc.want) {
			t.Errorf("--expires %s: %v, %v; want %v (error: %v)", tc.in, time.Duration(l), err, tc.want, tc.err)
		}
	}
}
