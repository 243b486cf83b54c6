package pricing

import (
	"errors"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// PeriodQuantity is a total of one meter of one SKU for a whole period,
// as `gpumeter quote --quantity SKU:METER=VALUE` gives it.
type PeriodQuantity struct {
	SKU      string
	Meter    Meter
	Quantity decimal.Decimal
}

// ParsePeriodQuantity reads SKU:METER=VALUE. The SKU is everything before
// the last ':' ahead of the first '=' (MIG SKUs hold a '/', not a ':'),
// VALUE a plain non-negative decimal (ParseQuantity). Whether the book
// knows the SKU is for the caller to check.
func ParsePeriodQuantity(s string) (PeriodQuantity, error) {
	key, value, ok := strings.Cut(s, "=")
	i := strings.LastIndex(key, ":")
	if !ok || i <= 0 || i == len(key)-1 {
		return PeriodQuantity{}, fault.Validation(errors.New("want SKU:METER=VALUE, e.g. H100-SXM5-80GB:gpu_hours=720"))
	}
	meter, err := ParseMeter(key[i+1:])
	if err != nil {
		return PeriodQuantity{}, err
	}
	q, err := ParseQuantity(value)
	if err != nil {
		return PeriodQuantity{}, err
	}
	return PeriodQuantity{SKU: key[:i], Meter: meter, Quantity: q}, nil
}

// String gives the SKU:METER=VALUE text ParsePeriodQuantity reads.
func (q PeriodQuantity) String() string {
	return q.SKU + ":" + string(q.Meter) + "=" + q.Quantity.String()
}

// maxSpreadHours bounds the rows one Spread makes (two leap years).
const maxSpreadHours = 2 * 366 * 24

// Spread turns the period total into hourly rows: the quantity spread
// evenly over the whole hours of [from, to), split by largest remainder
// (at 9 decimal places, or the quantity's own when finer) so that the rows
// add up to it exactly and differ by at most one such step. Steady use is
// what a quote assumes; a usage file prices peaks. A period holding no
// whole hour, or more than two years of them, is refused.
func (q PeriodQuantity) Spread(from, to time.Time) ([]Usage, error) {
	first := from.Truncate(time.Hour)
	if first.Before(from) {
		first = first.Add(time.Hour)
	}
	if to.Sub(first) > maxSpreadHours*time.Hour {
		return nil, fault.Validationf("the period is longer than %d hours: quote at most two years at a time", maxSpreadHours)
	}
	var hours []time.Time
	for h := first; h.Before(to); h = h.Add(time.Hour) {
		hours = append(hours, h)
	}
	if len(hours) == 0 {
		return nil, fault.Validation(errors.New("the period holds no whole hour to put the quantity in"))
	}
	weights := make([]decimal.Decimal, len(hours))
	for i := range weights {
		weights[i] = decimal.NewFromInt(1)
	}
	places := max(int32(9), -q.Quantity.Exponent())
	parts, err := Allocate(q.Quantity, weights, places)
	if err != nil {
		return nil, err
	}
	rows := make([]Usage, len(hours))
	for i, h := range hours {
		rows[i] = Usage{Hour: h, SKU: q.SKU, Meter: q.Meter, Quantity: parts[i]}
	}
	return rows, nil
}

// SpreadQuantity reads a SKU:METER=VALUE total (ParsePeriodQuantity) and
// spreads it over [from, to) (Spread). The SKU is checked against the
// book here, once, rather than by the engine on every hour it fills.
func (b *Book) SpreadQuantity(s string, from, to time.Time) ([]Usage, error) {
	pq, err := ParsePeriodQuantity(s)
	if err != nil {
		return nil, err
	}
	if !b.HasSKU(pq.SKU) {
		return nil, fault.Validationf("unknown SKU %q (not in book %s; it has %s)", pq.SKU, b.Version(), strings.Join(b.SKUs(), ", "))
	}
	return pq.Spread(from, to)
}

// CalendarMonths is [from, to): the whole UTC calendar months that hold
// every row's hour; ok is false when there are no rows.
func CalendarMonths(rows []Usage) (from, to time.Time, ok bool) {
	if len(rows) == 0 {
		return from, to, false
	}
	first, last := rows[0].Hour, rows[0].Hour
	for _, r := range rows {
		if r.Hour.Before(first) {
			first = r.Hour
		}
		if r.Hour.After(last) {
			last = r.Hour
		}
	}
	return MonthStart(first), MonthStart(last).AddDate(0, 1, 0), true
}

// MonthStart is the first instant of t's UTC calendar month.
func MonthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}
