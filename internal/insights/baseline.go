package insights

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/shopspring/decimal"
)

// BaselineParams shape the seasonal baseline.
type BaselineParams struct {
	// Weeks of history a step is compared with: the same hour of the week
	// (hourly series) or the same weekday (daily series) in each of the
	// last Weeks weeks. Default 4.
	Weeks int `json:"weeks"`
	// MinHistory is how many of those earlier values must exist for a
	// baseline; steps with fewer have none. Default 3.
	MinHistory int `json:"min_history"`
	// RelSpread and MinSpread floor the spread: at least RelSpread × the
	// expected value and at least MinSpread (in the series' unit), so that
	// a flat history (MAD 0) does not make every wobble an anomaly.
	// Defaults 0.1 and 1.
	RelSpread decimal.Decimal `json:"rel_spread"`
	MinSpread decimal.Decimal `json:"min_spread"`
}

// DefaultBaselineParams are the defaults documented on BaselineParams.
func DefaultBaselineParams() BaselineParams {
	return BaselineParams{Weeks: 4, MinHistory: 3, RelSpread: decimal.New(1, -1), MinSpread: decimal.NewFromInt(1)}
}

// Validate reports every out-of-range parameter.
func (p BaselineParams) Validate() error {
	var errs []error
	if p.Weeks < 1 || p.Weeks > 52 {
		errs = append(errs, fmt.Errorf("weeks %d is not within 1..52", p.Weeks))
	}
	if p.MinHistory < 1 || p.MinHistory > p.Weeks {
		errs = append(errs, fmt.Errorf("min history %d is not within 1..weeks (%d)", p.MinHistory, p.Weeks))
	}
	if p.RelSpread.Sign() < 0 {
		errs = append(errs, fmt.Errorf("rel spread %s is negative", p.RelSpread))
	}
	if p.MinSpread.Sign() <= 0 {
		errs = append(errs, fmt.Errorf("min spread %s is not positive", p.MinSpread))
	}
	return errors.Join(errs...)
}

// Expected is a step's baseline: the median of the same season slot in
// earlier weeks, and the spread, 1.4826 × their median absolute deviation
// (a standard deviation for normal data), floored by the params. History
// is how many earlier values it used; OK is false with too few.
type Expected struct {
	At       time.Time       `json:"at"`
	Observed decimal.Decimal `json:"observed"`
	Expected decimal.Decimal `json:"expected"`
	Spread   decimal.Decimal `json:"spread"`
	History  int             `json:"history"`
	OK       bool            `json:"ok"`
}

// Score is (observed − expected) / spread, the robust z-score; 0 without
// a baseline.
func (e Expected) Score() float64 {
	if !e.OK || e.Spread.Sign() == 0 {
		return 0
	}
	f, _ := e.Observed.Sub(e.Expected).DivRound(e.Spread, 6).Float64()
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0
	}
	return f
}

// Baseline computes the seasonal baseline of every step of s.
func Baseline(s Series, p BaselineParams) ([]Expected, error) {
	if err := errors.Join(wrap("series", s.Validate()), wrap("params", p.Validate())); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	vals := s.values()
	out := make([]Expected, len(vals))
	for i := range vals {
		out[i] = baselineAt(s, vals, i, p)
	}
	return out, nil
}

// baselineAt is step i's baseline from the steps one to Weeks weeks
// before it.
func baselineAt(s Series, vals []decimal.Decimal, i int, p BaselineParams) Expected {
	e := Expected{At: s.at(i), Observed: vals[i]}
	season := s.season()
	hist := make([]decimal.Decimal, 0, p.Weeks)
	for k := 1; k <= p.Weeks; k++ {
		if j := i - k*season; j >= 0 {
			hist = append(hist, vals[j])
		}
	}
	e.History = len(hist)
	if len(hist) < p.MinHistory {
		return e
	}
	m := median(hist)
	spread := mad(hist, m).Mul(madToSigma)
	spread = decimal.Max(spread, m.Abs().Mul(p.RelSpread), p.MinSpread)
	e.Expected, e.Spread, e.OK = m, spread, true
	return e
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
