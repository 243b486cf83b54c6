package billing

import (
	"fmt"
	"time"
	_ "time/tzdata" // customers' time zones resolve in minimal containers too
)

// Period is a billing period of one tenant: [Start, End) in the tenant's
// billing time zone, named by its label ("2026-11" for a month).
type Period struct {
	Label      string
	Start, End time.Time
}

// Hours is the number of hours the period holds: 721 for November in New
// York (the day DST ends has 25 hours), 743 for its March.
func (p Period) Hours() int { return int(p.End.Sub(p.Start) / time.Hour) }

// String names the period and its bounds in UTC.
func (p Period) String() string {
	return fmt.Sprintf("%s [%s, %s)", p.Label, p.Start.UTC().Format(time.RFC3339), p.End.UTC().Format(time.RFC3339))
}

// MonthlyPeriod is the calendar month label ("YYYY-MM") in loc. Its bounds
// are local midnights, so a month in a zone with DST is an hour shorter or
// longer than 24 × its days. Invoices are priced from hourly rollups in
// UTC, so both bounds must fall on a whole UTC hour: a zone offset by
// half an hour (Asia/Kolkata) cannot be billed monthly from hourly data,
// and says so rather than mis-assign 30 minutes.
func MonthlyPeriod(label string, loc *time.Location) (Period, error) {
	if loc == nil {
		return Period{}, fmt.Errorf("period %q: no time zone", label)
	}
	m, err := time.Parse("2006-01", label)
	if err != nil || m.Format("2006-01") != label {
		return Period{}, fmt.Errorf("period %q: want YYYY-MM, e.g. 2026-11", label)
	}
	if m.Year() < 1971 || m.Year() > 2105 {
		return Period{}, fmt.Errorf("period %q: outside the years 1971 to 2105 that samples can hold", label)
	}
	p := Period{
		Label: label,
		Start: time.Date(m.Year(), m.Month(), 1, 0, 0, 0, 0, loc),
		End:   time.Date(m.Year(), m.Month()+1, 1, 0, 0, 0, 0, loc),
	}
	for _, t := range []time.Time{p.Start, p.End} {
		if !t.Equal(t.Truncate(time.Hour)) {
			return Period{}, fmt.Errorf("period %s in %s: %s is not on a whole UTC hour, and usage is rolled up by UTC hour",
				label, loc, t.Format(time.RFC3339))
		}
	}
	return p, nil
}

// MonthContaining is the monthly period of loc that holds t.
func MonthContaining(t time.Time, loc *time.Location) (Period, error) {
	if loc == nil {
		return Period{}, fmt.Errorf("month of %s: no time zone", t.Format(time.RFC3339))
	}
	return MonthlyPeriod(t.In(loc).Format("2006-01"), loc)
}

// Closable reports whether a period can be invoiced: every hour of it has
// been rolled up after the rollup's grace period (closedThrough is the
// rollup's closed_through, in UTC). A period not yet closable waits for
// the next run; late samples after that become adjustments.
func (p Period) Closable(closedThrough time.Time) bool {
	return !closedThrough.Before(p.End)
}

// PreviousMonth is the label of the UTC month before now's: the month a
// scheduled run on the first days of a month invoices.
func PreviousMonth(now time.Time) string {
	u := now.UTC()
	return time.Date(u.Year(), u.Month()-1, 1, 0, 0, 0, 0, time.UTC).Format("2006-01")
}
