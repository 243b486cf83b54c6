package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/credits"
)

// The credits section: defaults when absent, values when given, and each
// bad value refused naming its config path.
func TestLoadCredits(t *testing.T) {
	cfg, err := Load(write(t, ""))
	if err != nil || cfg.Credits.Schedule != "*/10 * * * *" || !slices.Equal(cfg.Credits.Thresholds, []int{50, 20, 10}) ||
		cfg.Credits.AtZero != credits.NotifyOnly || cfg.Credits.ExpiringDays != 7 {
		t.Fatalf("defaults: %+v, %v", cfg.Credits, err)
	}
	cfg, err = Load(write(t, "credits:\n  at_zero: webhook\n  thresholds: [80, 5]\n  expiring_days: 14\n  schedule: \"@every 1m\"\n  horizon: 2h\n"))
	if err != nil || cfg.Credits.AtZero != credits.StopWebhook || !slices.Equal(cfg.Credits.Thresholds, []int{80, 5}) ||
		cfg.Credits.ExpiringDays != 14 || cfg.Credits.Schedule != "@every 1m" || cfg.Credits.Horizon != 2*time.Hour {
		t.Fatalf("given: %+v, %v", cfg.Credits, err)
	}
	for _, tc := range []struct{ body, want string }{
		{"credits:\n  at_zero: kill\n", `credits.at_zero "kill": want notify or webhook`},
		{"credits:\n  thresholds: [50, 100]\n", "credits.thresholds[1] 100: want a percentage left from 1 to 99"},
		{"credits:\n  thresholds: [0]\n", "credits.thresholds[0] 0"},
		{"credits:\n  expiring_days: 400\n", "credits.expiring_days 400: want 0 to 366"},
		{"credits:\n  schedule: \"\"\n", "credits.schedule: required"},
		{"credits:\n  horizon: 30s\n", "credits.horizon 30s"},
		{"credits:\n  thresholds: fifty\n", "line 2: cannot unmarshal"},
		{"credits:\n  at_zer: webhook\n", "at_zer"},
	} {
		p := write(t, tc.body)
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%q: %v; want an error naming %q and the file", tc.body, err, tc.want)
		}
	}
}
