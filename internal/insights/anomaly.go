package insights

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/shopspring/decimal"
)

// AnomalyParams decide what is anomalous.
type AnomalyParams struct {
	Baseline BaselineParams `json:"baseline"`
	// Threshold is the robust z-score, |observed − expected| / spread, at
	// or above which a step is anomalous. Default 5.
	Threshold decimal.Decimal `json:"threshold"`
	// IgnoreDrops reports spikes only (observed above expected).
	IgnoreDrops bool `json:"ignore_drops"`
}

// DefaultAnomalyParams are the defaults documented on AnomalyParams.
func DefaultAnomalyParams() AnomalyParams {
	return AnomalyParams{Baseline: DefaultBaselineParams(), Threshold: decimal.NewFromInt(5)}
}

// Validate reports every out-of-range parameter.
func (p AnomalyParams) Validate() error {
	var errs []error
	if err := p.Baseline.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("baseline: %w", err))
	}
	if p.Threshold.Sign() <= 0 {
		errs = append(errs, fmt.Errorf("threshold %s is not positive", p.Threshold))
	}
	return errors.Join(errs...)
}

// AnomalyInput is everything Detect needs.
type AnomalyInput struct {
	// Series are checked each on its own; each must cover Weeks of history
	// before EvaluateFrom for its first steps to have a baseline.
	Series []Series
	// EvaluateFrom: steps starting at or after it are checked; earlier
	// steps are history only.
	EvaluateFrom time.Time
	Params       AnomalyParams
}

// Validate reports every problem of the input.
func (in AnomalyInput) Validate() error {
	var errs []error
	if in.EvaluateFrom.IsZero() {
		errs = append(errs, errors.New("evaluate from is required"))
	}
	if err := in.Params.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("params: %w", err))
	}
	seen := map[string]int{}
	for i, s := range in.Series {
		where := fmt.Sprintf("series[%d] (%s)", i, s.key())
		if err := s.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		k := s.key() + "@" + s.Step.String()
		if j, dup := seen[k]; dup {
			errs = append(errs, fmt.Errorf("%s: repeats series[%d]", where, j))
		}
		seen[k] = i
	}
	return errors.Join(errs...)
}

// Direction says which way a value left its baseline.
type Direction string

const (
	Spike Direction = "spike"
	Drop  Direction = "drop"
)

// Anomaly is one step of one series far from its baseline.
type Anomaly struct {
	// ID is deterministic: a hash of tenant, meter, SKU, step and start.
	// Re-running detection (late data, a restart) gives the same id for the
	// same step, so storing (ReplacingMergeTree keyed by id) and sending the
	// webhook (outbox keyed by id) happen once per anomaly.
	ID        string          `json:"id"`
	Tenant    string          `json:"tenant"`
	Meter     string          `json:"meter"`
	SKU       string          `json:"sku,omitempty"`
	Start     time.Time       `json:"start"`
	End       time.Time       `json:"end"`
	Direction Direction       `json:"direction"`
	Observed  decimal.Decimal `json:"observed"`
	Expected  decimal.Decimal `json:"expected"`
	Spread    decimal.Decimal `json:"spread"`
	Score     float64         `json:"score"`
	History   int             `json:"history"`
}

// AnomalyID is the id of the anomaly of a series' step starting at start.
func AnomalyID(tenant, meter, sku string, step time.Duration, start time.Time) string {
	h := sha256.New()
	for _, part := range []string{"insights-anomaly-v1", tenant, meter, sku, strconv.FormatInt(int64(step/time.Second), 10), strconv.FormatInt(start.UTC().Unix(), 10)} {
		h.Write([]byte(strconv.Itoa(len(part))))
		h.Write([]byte{':'})
		h.Write([]byte(part))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Detect checks every step at or after EvaluateFrom against its seasonal
// baseline (Baseline) and returns the steps whose robust z-score reaches
// Threshold, by series order then time. Steps without a baseline (too
// little history) are never anomalous.
func Detect(in AnomalyInput) ([]Anomaly, error) {
	if err := in.Validate(); err != nil {
		return nil, fmt.Errorf("detect anomalies: %w", err)
	}
	var out []Anomaly
	for _, s := range in.Series {
		vals := s.values()
		for i := range vals {
			start := s.at(i)
			if start.Before(in.EvaluateFrom) {
				continue
			}
			e := baselineAt(s, vals, i, in.Params.Baseline)
			if !e.OK {
				continue
			}
			dev := e.Observed.Sub(e.Expected)
			if dev.Abs().LessThan(in.Params.Threshold.Mul(e.Spread)) || dev.Sign() == 0 {
				continue
			}
			dir := Spike
			if dev.Sign() < 0 {
				if in.Params.IgnoreDrops {
					continue
				}
				dir = Drop
			}
			score := e.Score()
			if math.IsNaN(score) {
				score = 0
			}
			out = append(out, Anomaly{
				ID: AnomalyID(s.Tenant, s.Meter, s.SKU, s.Step, start), Tenant: s.Tenant, Meter: s.Meter, SKU: s.SKU,
				Start: start, End: s.at(i + 1), Direction: dir,
				Observed: e.Observed, Expected: e.Expected, Spread: e.Spread, Score: score, History: e.History,
			})
		}
	}
	return out, nil
}
