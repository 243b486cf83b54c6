// Package quota decides whether work fits a tenant's quota before it
// starts: quota definitions, the in-memory state the evaluator keeps
// (month-to-date usage and spend, live concurrency, admissions not yet
// running), and admission decisions made from that state alone. The
// evaluator is pure; Service (service.go) is its edge: it refreshes the
// state from month-to-date usage and live concurrency, and answers
// admissions, quota state and Prometheus from memory.
package quota

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// Metric is what a quota bounds.
type Metric string

const (
	// ConcurrentGPUs are GPU-equivalents held at once: a whole GPU is 1, a
	// MIG instance its profile's weight (3g.40gb on an H100 is 3/7).
	ConcurrentGPUs Metric = "concurrent_gpus"
	// GPUHours are GPU-equivalent hours this month (in the tenant's zone).
	GPUHours Metric = "gpu_hours"
	// Spend is this month's cost at the tenant's price book, in its currency.
	Spend Metric = "spend"
)

// Metrics lists the metrics in the order they are reported.
func Metrics() []Metric { return []Metric{ConcurrentGPUs, GPUHours, Spend} }

// Threshold is a level of a limit: an absolute amount ("800") or a
// percentage of the limit ("80%").
type Threshold string

// Resolve is the threshold's amount for a limit.
func (t Threshold) Resolve(limit decimal.Decimal) (decimal.Decimal, error) {
	s := strings.TrimSpace(string(t))
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		p, err := decimal.NewFromString(strings.TrimSpace(pct))
		if err != nil || p.IsNegative() || p.GreaterThan(decimal.NewFromInt(1000)) {
			return decimal.Decimal{}, fmt.Errorf("%q: want a percentage from 0%% to 1000%%", s)
		}
		return limit.Mul(p).Div(decimal.NewFromInt(100)), nil
	}
	d, err := decimal.NewFromString(s)
	if err != nil || d.IsNegative() {
		return decimal.Decimal{}, fmt.Errorf("%q: want an amount (800) or a percentage (80%%)", s)
	}
	return d, nil
}

// Limit bounds one metric: Soft notifies, Hard denies. Soft defaults to
// none, Hard to 100% of Limit.
type Limit struct {
	Limit decimal.Decimal `yaml:"limit"`
	Soft  Threshold       `yaml:"soft"`
	Hard  Threshold       `yaml:"hard"`
}

// Levels are a limit's resolved thresholds; a zero Soft means none.
type Levels struct {
	Soft, Hard decimal.Decimal
	HasSoft    bool
}

// Levels resolves the thresholds.
func (l Limit) Levels() (Levels, error) {
	var lv Levels
	hard := l.Hard
	if hard == "" {
		hard = "100%"
	}
	var err error
	if lv.Hard, err = hard.Resolve(l.Limit); err != nil {
		return Levels{}, fmt.Errorf("hard %w", err)
	}
	if l.Soft != "" {
		if lv.Soft, err = l.Soft.Resolve(l.Limit); err != nil {
			return Levels{}, fmt.Errorf("soft %w", err)
		}
		lv.HasSoft = true
	}
	return lv, nil
}

// Rule is the quota of one tenant or one department, optionally of one
// GPU model only.
type Rule struct {
	Tenant     string `yaml:"tenant"`
	Department string `yaml:"department"`
	GPUModel   string `yaml:"gpu_model"` // "" for every model

	ConcurrentGPUs *Limit `yaml:"concurrent_gpus"`
	GPUHours       *Limit `yaml:"gpu_hours"`
	Spend          *Limit `yaml:"spend"`
}

// Subject names what the rule applies to ("tenant acme", "department
// research on H100-SXM5-80GB").
func (r Rule) Subject() string {
	s := "tenant " + r.Tenant
	if r.Department != "" {
		s = "department " + r.Department
	}
	if r.GPUModel != "" {
		s += " on " + r.GPUModel
	}
	return s
}

// Limit is the rule's limit of m, nil when it has none.
func (r Rule) Limit(m Metric) *Limit {
	switch m {
	case ConcurrentGPUs:
		return r.ConcurrentGPUs
	case GPUHours:
		return r.GPUHours
	case Spend:
		return r.Spend
	}
	return nil
}

// OnStale is what admission answers when the evaluator's data is older
// than Config.StaleAfter.
type OnStale string

const (
	FailOpen   OnStale = "allow" // admit, saying why
	FailClosed OnStale = "deny"  // deny, saying why
)

// Config is the quotas section of the config.
type Config struct {
	Rules []Rule `yaml:"rules"`
	// Refresh is how often the evaluator re-reads usage and spend.
	Refresh time.Duration `yaml:"refresh"`
	// StaleAfter: state older than this is stale, and OnStale decides.
	StaleAfter time.Duration `yaml:"stale_after"`
	OnStale    OnStale       `yaml:"on_stale"`
	// ReservationTTL is how long an admission counts while its work has
	// not started: it counts on top of what is measured until it expires.
	ReservationTTL time.Duration `yaml:"reservation_ttl"`
}

// DefaultConfig refreshes every minute, is stale after five, then
// denies, and holds admissions for ten minutes.
func DefaultConfig() Config {
	return Config{Refresh: time.Minute, StaleAfter: 5 * time.Minute, OnStale: FailClosed, ReservationTTL: 10 * time.Minute}
}

// Validate names the field path of every problem.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Refresh <= 0 {
		add("quotas.refresh %s: must be positive", c.Refresh)
	}
	if c.StaleAfter < c.Refresh {
		add("quotas.stale_after %s: at least the refresh interval %s", c.StaleAfter, c.Refresh)
	}
	switch c.OnStale {
	case FailOpen, FailClosed:
	default:
		add("quotas.on_stale %q: want allow (fail open) or deny (fail closed)", c.OnStale)
	}
	if c.ReservationTTL <= 0 {
		add("quotas.reservation_ttl %s: must be positive", c.ReservationTTL)
	}
	seen := map[string]int{}
	for i, r := range c.Rules {
		at := fmt.Sprintf("quotas.rules[%d]", i)
		if (r.Tenant == "") == (r.Department == "") {
			add("%s: give exactly one of tenant and department", at)
			continue
		}
		key := r.Subject()
		// Two spellings of one model are one subject: the evaluator
		// counts both under the catalogue's name.
		canon := r
		if canon.GPUModel != "" {
			m, _ := gpucatalog.CanonicalModel(r.GPUModel)
			canon.GPUModel = strings.ToUpper(m)
		}
		if j, dup := seen[canon.Subject()]; dup {
			add("%s: %s also has rules[%d]", at, key, j)
		}
		seen[canon.Subject()] = i
		if r.ConcurrentGPUs == nil && r.GPUHours == nil && r.Spend == nil {
			add("%s (%s): no limit (concurrent_gpus, gpu_hours or spend)", at, key)
		}
		if r.Spend != nil && r.GPUModel != "" {
			add("%s (%s): spend is per tenant or department, not per GPU model", at, key)
		}
		for _, m := range Metrics() {
			l := r.Limit(m)
			if l == nil {
				continue
			}
			if l.Limit.IsNegative() {
				add("%s.%s.limit %s: must not be negative", at, m, l.Limit)
			}
			lv, err := l.Levels()
			if err != nil {
				add("%s.%s: %v", at, m, err)
				continue
			}
			if lv.HasSoft && lv.Soft.GreaterThan(lv.Hard) {
				add("%s.%s: soft %s is above hard %s", at, m, lv.Soft, lv.Hard)
			}
		}
	}
	return errors.Join(errs...)
}

// Weight is the GPU-equivalents one device of sku holds, as a fraction:
// 1/1 for a whole GPU, the MIG profile's compute slices over the GPU's
// (from the one profile table), a vGPU type's share ("vgpu:A100-4C" is
// 1/10 of an A100) otherwise.
func Weight(sku string) (num, den int64, err error) {
	n, dn, ok := gpucatalog.GPUEquivalent(sku)
	if !ok {
		return 0, 0, fmt.Errorf("unknown GPU model, MIG profile or vGPU type %q", sku)
	}
	return int64(n), int64(dn), nil
}

// devices is count devices of sku in GPU-equivalents, exact to 18 places
// (seven 3g.40gb instances are exactly 3).
func devices(sku string, count int) (decimal.Decimal, error) {
	num, den, err := Weight(sku)
	if err != nil {
		return decimal.Decimal{}, err
	}
	return decimal.NewFromInt(num*int64(count)).DivRound(decimal.NewFromInt(den), 18), nil
}

// shared is gpus, the request's devices in GPU-equivalents, counted at
// the request's Share of each (all of them when Share is zero).
func (r Request) shared(gpus decimal.Decimal) decimal.Decimal {
	if r.Share.IsZero() {
		return gpus
	}
	return gpus.Mul(r.Share)
}

// GPUEquivalents is what the request holds at once: Count devices of its
// SKU, at its Share of each.
func (r Request) GPUEquivalents() (decimal.Decimal, error) {
	gpus, err := devices(r.SKU(), r.Count)
	if err != nil {
		return decimal.Decimal{}, err
	}
	return r.shared(gpus), nil
}
