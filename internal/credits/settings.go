package credits

import (
	"errors"
	"fmt"
	"time"
)

// AtZero is what happens to running work of a credit_only customer whose
// balance reaches zero.
type AtZero string

const (
	// NotifyOnly sends credits.depleted and lets running work run (the
	// default): the operator decides.
	NotifyOnly AtZero = "notify"
	// StopWebhook sends credits.depleted with "action": "stop", a request
	// the operator's webhook receiver acts on (drain the tenant's jobs).
	StopWebhook AtZero = "webhook"
)

// Settings is the config's credits section: what every customer's grants
// share.
type Settings struct {
	// Horizon is how long new work of a credit_only customer must be
	// paid for at admission: its expected spend over the horizon must fit
	// in the balance left after what admitted work holds.
	Horizon time.Duration `yaml:"horizon" json:"horizon"`
	// AtZero: notify (default) or webhook.
	AtZero AtZero `yaml:"at_zero" json:"at_zero"`
	// Thresholds are the percentages of a grant left at which
	// credits.balance.threshold is sent, once per grant and period.
	Thresholds []int `yaml:"thresholds" json:"thresholds"`
	// ExpiringDays is how many days before a grant expires, with some of
	// it left, credits.expiring is sent.
	ExpiringDays int `yaml:"expiring_days" json:"expiring_days"`
	// Schedule is the cron spec of the credit job in `gpumeter serve`:
	// recurring grants written, notifications sent.
	Schedule string `yaml:"schedule" json:"schedule"`
}

// DefaultSettings: one hour of spend at admission, notify at zero,
// thresholds at 50, 20 and 10 % left, a week's notice of expiry, the job
// every ten minutes.
func DefaultSettings() Settings {
	return Settings{Horizon: time.Hour, AtZero: NotifyOnly, Thresholds: []int{50, 20, 10}, ExpiringDays: 7, Schedule: "*/10 * * * *"}
}

// Validate names the config path of every problem.
func (s Settings) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if s.Horizon < time.Minute || s.Horizon > 31*24*time.Hour {
		add("credits.horizon %s: want from 1m to 744h", s.Horizon)
	}
	switch s.AtZero {
	case NotifyOnly, StopWebhook:
	default:
		add("credits.at_zero %q: want notify or webhook", s.AtZero)
	}
	for i, p := range s.Thresholds {
		if p <= 0 || p >= 100 {
			add("credits.thresholds[%d] %d: want a percentage left from 1 to 99", i, p)
		}
	}
	if s.ExpiringDays < 0 || s.ExpiringDays > 366 {
		add("credits.expiring_days %d: want 0 to 366", s.ExpiringDays)
	}
	if s.Schedule == "" {
		add("credits.schedule: required (a cron spec)")
	}
	return errors.Join(errs...)
}
