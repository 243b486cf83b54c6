package insights

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/shopspring/decimal"
)

// Step is a series' granularity.
const (
	Hourly = time.Hour
	Daily  = 24 * time.Hour
)

// maxSteps bounds a series: 10 years of hours.
const maxSteps = 10 * 366 * 24

// Point is one step's value.
type Point struct {
	At    time.Time       `json:"at"`
	Value decimal.Decimal `json:"value"`
}

// Series is a regular series of one tenant's meter (or one model's demand):
// hourly totals from usage_hourly, or daily spend. Steps absent from Points
// within [From, To) are zero: the fleet records every GPU-second (idle
// with an empty tenant), so a tenant's missing hour is an hour it used
// nothing, and a missing day one it paid nothing.
type Series struct {
	Tenant string `json:"tenant"`
	// Meter is a price-book meter ("gpu_hours"), "spend", or for capacity
	// "gpu_equivalents".
	Meter string `json:"meter"`
	SKU   string `json:"sku,omitempty"`
	// Step is Hourly or Daily. Hourly steps are whole UTC hours; daily
	// steps are calendar days in From's location (a tenant's billing time
	// zone), so a day around a clock change lasts 23 or 25 hours.
	Step   time.Duration `json:"step"`
	From   time.Time     `json:"from"`
	To     time.Time     `json:"to"`
	Points []Point       `json:"points"`
}

// Validate reports every problem: a step other than Hourly or Daily, a
// range that is empty, misaligned or too long, points outside the range,
// off the step grid, repeated or negative.
func (s Series) Validate() error {
	var errs []error
	if s.Meter == "" {
		errs = append(errs, errors.New("meter is empty"))
	}
	if s.Step != Hourly && s.Step != Daily {
		return errors.Join(append(errs, fmt.Errorf("step %s is neither 1h nor 24h", s.Step))...)
	}
	if s.From.IsZero() || s.To.IsZero() || !s.From.Before(s.To) {
		return errors.Join(append(errs, errors.New("range: from must be before to"))...)
	}
	n, ok := s.index(s.To)
	switch {
	case !s.aligned(s.From):
		errs = append(errs, fmt.Errorf("from %s is not the start of a step", s.From.Format(time.RFC3339)))
	case !ok:
		errs = append(errs, fmt.Errorf("to %s is not a whole number of steps after from", s.To.Format(time.RFC3339)))
	case n > maxSteps:
		errs = append(errs, fmt.Errorf("%d steps, at most %d", n, maxSteps))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	seen := make(map[int]int, len(s.Points))
	for k, p := range s.Points {
		i, ok := s.index(p.At)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("points[%d]: %s is not on the step grid", k, p.At.Format(time.RFC3339)))
		case i < 0 || i >= n:
			errs = append(errs, fmt.Errorf("points[%d]: %s is outside [from, to)", k, p.At.Format(time.RFC3339)))
		default:
			if j, dup := seen[i]; dup {
				errs = append(errs, fmt.Errorf("points[%d]: %s repeats points[%d]", k, p.At.Format(time.RFC3339), j))
			}
			seen[i] = k
		}
		if p.Value.Sign() < 0 {
			errs = append(errs, fmt.Errorf("points[%d]: negative value %s", k, p.Value))
		}
	}
	return errors.Join(errs...)
}

func (s Series) aligned(t time.Time) bool {
	if s.Step == Hourly {
		return t.Equal(t.Truncate(time.Hour))
	}
	y, m, d := t.In(s.From.Location()).Date()
	return t.Equal(time.Date(y, m, d, 0, 0, 0, 0, s.From.Location()))
}

// index is the step number of t from From; ok is false off the grid.
func (s Series) index(t time.Time) (int, bool) {
	if s.Step == Hourly {
		d := t.Sub(s.From)
		if d%time.Hour != 0 {
			return 0, false
		}
		return int(d / time.Hour), true
	}
	// Calendar days: hours/24 rounded, then checked exactly.
	h := t.Sub(s.From).Hours()
	if math.Abs(h) > 24*maxSteps*2 {
		return 0, false
	}
	i := int(math.Round(h / 24))
	return i, s.at(i).Equal(t)
}

// at is the start of step i.
func (s Series) at(i int) time.Time {
	if s.Step == Hourly {
		return s.From.Add(time.Duration(i) * time.Hour)
	}
	return s.From.AddDate(0, 0, i)
}

// len is the number of steps in [From, To).
func (s Series) len() int {
	n, _ := s.index(s.To)
	return n
}

// season is the steps in a week: 168 hours or 7 days.
func (s Series) season() int {
	if s.Step == Hourly {
		return 168
	}
	return 7
}

// values is the dense series, zeros where no point is given. It assumes
// Validate passed.
func (s Series) values() []decimal.Decimal {
	v := make([]decimal.Decimal, s.len())
	for i := range v {
		v[i] = decimal.Zero
	}
	for _, p := range s.Points {
		i, _ := s.index(p.At)
		v[i] = p.Value
	}
	return v
}

func (s Series) key() string {
	if s.SKU != "" {
		return fmt.Sprintf("%s/%s/%s", s.Tenant, s.Meter, s.SKU)
	}
	return fmt.Sprintf("%s/%s", s.Tenant, s.Meter)
}
