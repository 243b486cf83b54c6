package billing

import (
	"strings"
	"testing"
	"time"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestMonthlyPeriod(t *testing.T) {
	cases := []struct {
		label, zone      string
		startUTC, endUTC string
		hours            int
	}{
		{"2026-11", "UTC", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", 720},
		// DST ends on 1 November 2026 in New York, after local midnight: the
		// month starts at EDT midnight and ends at EST midnight.
		{"2026-11", "America/New_York", "2026-11-01T04:00:00Z", "2026-12-01T05:00:00Z", 721},
		{"2026-03", "America/New_York", "2026-03-01T05:00:00Z", "2026-04-01T04:00:00Z", 743},
		{"2026-10", "Europe/Berlin", "2026-09-30T22:00:00Z", "2026-10-31T23:00:00Z", 745},
		{"2026-12", "Pacific/Auckland", "2026-11-30T11:00:00Z", "2026-12-31T11:00:00Z", 744},
		{"2027-01", "America/Los_Angeles", "2027-01-01T08:00:00Z", "2027-02-01T08:00:00Z", 744},
		{"2028-02", "UTC", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z", 696},
	}
	for _, tc := range cases {
		t.Run(tc.label+" "+tc.zone, func(t *testing.T) {
			p, err := MonthlyPeriod(tc.label, mustZone(t, tc.zone))
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Start.UTC().Format(time.RFC3339); got != tc.startUTC {
				t.Errorf("start %s, want %s", got, tc.startUTC)
			}
			if got := p.End.UTC().Format(time.RFC3339); got != tc.endUTC {
				t.Errorf("end %s, want %s", got, tc.endUTC)
			}
			if p.Hours() != tc.hours {
				t.Errorf("hours %d, want %d", p.Hours(), tc.hours)
			}
			if p.Start.Location().String() != tc.zone {
				t.Errorf("start in %s, want the tenant's zone %s", p.Start.Location(), tc.zone)
			}
		})
	}
}

func TestMonthlyPeriodRefuses(t *testing.T) {
	cases := []struct {
		label, zone, want string
	}{
		{"2026-13", "UTC", "want YYYY-MM"},
		{"2026-1", "UTC", "want YYYY-MM"},
		{"2026-11-01", "UTC", "want YYYY-MM"},
		{"", "UTC", "want YYYY-MM"},
		{"1969-12", "UTC", "outside the years"},
		{"2106-03", "UTC", "outside the years"},
		{"2026-11", "Asia/Kolkata", "not on a whole UTC hour"},
		{"2026-11", "Asia/Kathmandu", "not on a whole UTC hour"},
		// Lord Howe Island shifts by 30 minutes for DST.
		{"2026-07", "Australia/Lord_Howe", "not on a whole UTC hour"},
	}
	for _, tc := range cases {
		t.Run(tc.label+" "+tc.zone, func(t *testing.T) {
			_, err := MonthlyPeriod(tc.label, mustZone(t, tc.zone))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := MonthlyPeriod("2026-11", nil); err == nil {
		t.Fatal("a period without a time zone was accepted")
	}
}

func TestMonthContainingAndClosable(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	// 03:30 UTC on 1 December is still 30 November in New York.
	p, err := MonthContaining(time.Date(2026, 12, 1, 3, 30, 0, 0, time.UTC), ny)
	if err != nil {
		t.Fatal(err)
	}
	if p.Label != "2026-11" {
		t.Fatalf("label %s, want 2026-11", p.Label)
	}
	if p.Closable(time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)) {
		t.Error("closable with the rollup an hour short of the period's end")
	}
	if !p.Closable(p.End) {
		t.Error("not closable with the rollup closed through the period's end")
	}
	if _, err := MonthContaining(time.Now(), nil); err == nil {
		t.Error("a month without a time zone was accepted")
	}
}
