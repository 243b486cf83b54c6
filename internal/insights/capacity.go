package insights

import (
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"
)

// CapacityInput is one GPU model's demand and capacity.
type CapacityInput struct {
	Model string
	// CapacityGPUs is what the fleet offers of the model, in
	// GPU-equivalents (its GPU count).
	CapacityGPUs decimal.Decimal
	// Target is the fraction of capacity that counts as full (1 = every
	// GPU busy; 0.9 leaves headroom for placement and maintenance).
	Target decimal.Decimal
	// Demand is GPU-equivalents in use per step: hourly, sum over tenants
	// (idle excluded) of gpu_microseconds / 3.6e9 from usage_hourly, the
	// hour's average; or daily peaks of those hours.
	Demand Series
	// Weeks of history to fit (2..52).
	Weeks int
	// Until bounds the projection: steps from Demand.To up to Until.
	Until time.Time
}

// Validate reports every problem of the input.
func (in CapacityInput) Validate() error {
	var errs []error
	if in.Model == "" {
		errs = append(errs, errors.New("model is empty"))
	}
	if in.CapacityGPUs.Sign() <= 0 {
		errs = append(errs, fmt.Errorf("capacity %s is not positive", in.CapacityGPUs))
	}
	if in.Target.Sign() <= 0 || in.Target.GreaterThan(decimal.NewFromInt(1)) {
		errs = append(errs, fmt.Errorf("target %s is not within (0, 1]", in.Target))
	}
	if in.Weeks < 2 || in.Weeks > 52 {
		errs = append(errs, fmt.Errorf("weeks %d is not within 2..52", in.Weeks))
	}
	if err := in.Demand.Validate(); err != nil {
		return errors.Join(append(errs, fmt.Errorf("demand: %w", err))...)
	}
	d := in.Demand
	if d.len() < 2*d.season() {
		errs = append(errs, fmt.Errorf("demand: %d steps, a fit needs two weeks (%d)", d.len(), 2*d.season()))
	}
	u, ok := d.index(in.Until)
	switch {
	case in.Until.IsZero() || !ok:
		errs = append(errs, errors.New("until: required, on the demand's step grid"))
	case u <= d.len():
		errs = append(errs, fmt.Errorf("until %s is not after the demand ends (%s)", in.Until.Format(time.RFC3339), d.To.Format(time.RFC3339)))
	case u-d.len() > maxSteps:
		errs = append(errs, fmt.Errorf("until: %d steps to project, at most %d", u-d.len(), maxSteps))
	}
	return errors.Join(errs...)
}

// CapacityForecast says when a model's demand outgrows its capacity.
type CapacityForecast struct {
	Model        string          `json:"model"`
	CapacityGPUs decimal.Decimal `json:"capacity_gpus"`
	Target       decimal.Decimal `json:"target"`
	// Fit is the model of demand and the history it used.
	Fit Fit `json:"fit"`
	// HistoryPeak is the largest demand in the fitted history.
	HistoryPeak   decimal.Decimal `json:"history_peak"`
	HistoryPeakAt time.Time       `json:"history_peak_at"`
	// Exceeds is true when a projected step before Until is above Target ×
	// CapacityGPUs; At is the first such step and Demand its value, both
	// left out of JSON when it is false.
	Exceeds bool            `json:"exceeds"`
	At      time.Time       `json:"at,omitzero"`
	Demand  decimal.Decimal `json:"demand,omitzero"`
	// PeakForecast is the largest projected demand before Until.
	PeakForecast   decimal.Decimal `json:"peak_forecast"`
	PeakForecastAt time.Time       `json:"peak_forecast_at"`
}

// Capacity projects one model's demand (trend plus weekly season, the Fit
// of ForecastPeriod) from the end of its history until Until, and reports
// the first step at which it exceeds Target × CapacityGPUs.
func Capacity(in CapacityInput) (CapacityForecast, error) {
	if err := in.Validate(); err != nil {
		return CapacityForecast{}, fmt.Errorf("capacity %s: %w", in.Model, err)
	}
	d := in.Demand
	f, err := fit(d, in.Weeks)
	if err != nil {
		return CapacityForecast{}, fmt.Errorf("capacity %s: %w", in.Model, err)
	}
	out := CapacityForecast{Model: in.Model, CapacityGPUs: in.CapacityGPUs, Target: in.Target, Fit: f}
	vals := d.values()
	out.HistoryPeak = decimal.Zero
	for i := f.first; i < len(vals); i++ {
		if i == f.first || vals[i].GreaterThan(out.HistoryPeak) {
			out.HistoryPeak, out.HistoryPeakAt = vals[i], d.at(i)
		}
	}
	limit := in.CapacityGPUs.Mul(in.Target)
	u, _ := d.index(in.Until)
	for i := len(vals); i < u; i++ {
		v := f.at(i - f.first).Round(amountPlaces)
		if i == len(vals) || v.GreaterThan(out.PeakForecast) {
			out.PeakForecast, out.PeakForecastAt = v, d.at(i)
		}
		if !out.Exceeds && v.GreaterThan(limit) {
			out.Exceeds, out.At, out.Demand = true, d.at(i), v
		}
	}
	return out, nil
}

// FleetCapacity runs Capacity for every model, in input order, after
// checking them all: it reports every invalid or repeated model at once.
func FleetCapacity(models []CapacityInput) ([]CapacityForecast, error) {
	var errs []error
	seen := map[string]bool{}
	for i, m := range models {
		if err := m.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("models[%d] (%s): %w", i, m.Model, err))
		}
		if seen[m.Model] {
			errs = append(errs, fmt.Errorf("models[%d] (%s): model repeats", i, m.Model))
		}
		seen[m.Model] = true
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("fleet capacity: %w", err)
	}
	out := make([]CapacityForecast, 0, len(models))
	for _, m := range models {
		c, err := Capacity(m)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
