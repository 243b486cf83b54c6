package rollup

import (
	"reflect"
	"testing"
	"time"
)

func hr(s string) time.Time {
	t, err := time.Parse("2006-01-02T15", s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestPlanRollup(t *testing.T) {
	grace := 15 * time.Minute
	cases := []struct {
		name        string
		prev        State
		hasPrev     bool
		earliest    time.Time
		now         time.Time
		late        []time.Time
		wantClosing []HourRange
		wantLate    []time.Time
		wantThrough time.Time
	}{
		{
			name:     "first run rolls every closed hour since the earliest sample",
			earliest: hr("2026-11-01T03").Add(17 * time.Minute), now: hr("2026-11-01T10").Add(20 * time.Minute),
			wantClosing: []HourRange{{hr("2026-11-01T03"), hr("2026-11-01T10")}}, wantThrough: hr("2026-11-01T10"),
		},
		{
			name: "hour stays open until its grace period has passed",
			prev: State{ClosedThrough: hr("2026-11-01T09")}, hasPrev: true,
			now:         hr("2026-11-01T10").Add(14 * time.Minute),
			wantClosing: []HourRange{}, wantThrough: hr("2026-11-01T09"),
		},
		{
			name: "hour closes exactly at end plus grace",
			prev: State{ClosedThrough: hr("2026-11-01T09")}, hasPrev: true,
			now:         hr("2026-11-01T10").Add(15 * time.Minute),
			wantClosing: []HourRange{{hr("2026-11-01T09"), hr("2026-11-01T10")}}, wantThrough: hr("2026-11-01T10"),
		},
		{
			name: "late samples reopen closed hours only, once each",
			prev: State{ClosedThrough: hr("2026-11-01T09")}, hasPrev: true,
			now:         hr("2026-11-01T09").Add(20 * time.Minute),
			late:        []time.Time{hr("2026-11-01T02"), hr("2026-11-01T02").Add(30 * time.Minute), hr("2026-11-01T09"), hr("2026-10-31T23")},
			wantClosing: []HourRange{}, wantLate: []time.Time{hr("2026-11-01T02"), hr("2026-10-31T23")}, wantThrough: hr("2026-11-01T09"),
		},
		{
			name: "first run on an empty table starts at the current closed boundary",
			now:  hr("2026-11-01T10").Add(20 * time.Minute), wantClosing: []HourRange{}, wantThrough: hr("2026-11-01T10"),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPlan(tc.prev, tc.hasPrev, tc.earliest, tc.now, grace, tc.late, nil)
			if len(p.Closing) == 0 {
				p.Closing = []HourRange{}
			}
			if !reflect.DeepEqual(p.Closing, tc.wantClosing) {
				t.Errorf("closing = %v, want %v", p.Closing, tc.wantClosing)
			}
			if !reflect.DeepEqual(p.Late, tc.wantLate) {
				t.Errorf("late = %v, want %v", p.Late, tc.wantLate)
			}
			if !p.Next.ClosedThrough.Equal(tc.wantThrough) {
				t.Errorf("closed through = %v, want %v", p.Next.ClosedThrough, tc.wantThrough)
			}
			if want := tc.now.Add(-InsertSlack); !p.Next.Watermark.Equal(want) {
				t.Errorf("watermark = %v, want %v", p.Next.Watermark, want)
			}
		})
	}
}

func TestPlanRollupWatermarkNeverMovesBack(t *testing.T) {
	prev := State{ClosedThrough: hr("2026-11-01T09"), Watermark: hr("2026-11-01T12")}
	p := NewPlan(prev, true, time.Time{}, hr("2026-11-01T10"), 0, nil, nil)
	if !p.Next.Watermark.Equal(prev.Watermark) {
		t.Fatalf("watermark moved back to %v", p.Next.Watermark)
	}
}

func TestMonthsToDrop(t *testing.T) {
	sep, oct, nov := hr("2026-09-01T00"), hr("2026-10-01T00"), hr("2026-11-01T00")
	now := hr("2026-12-02T00")
	cases := []struct {
		name    string
		closed  map[time.Time]bool
		rolled  time.Time
		rawDays int
		late    []time.Time
		want    []time.Time
	}{
		{"invoiced months past the window go", map[time.Time]bool{sep: true, oct: true, nov: true}, now, 30, nil, []time.Time{sep, oct}},
		{"a month not invoiced stays", map[time.Time]bool{sep: true}, now, 30, nil, []time.Time{sep}},
		{"a month not fully rolled up stays", map[time.Time]bool{sep: true, oct: true}, hr("2026-10-31T23"), 30, nil, []time.Time{sep}},
		{"a month inside the window stays", map[time.Time]bool{sep: true, oct: true}, now, 40, nil, []time.Time{sep}},
		{"a month with late samples not yet rolled up stays", map[time.Time]bool{sep: true, oct: true}, now, 30, []time.Time{hr("2026-10-17T05")}, []time.Time{sep}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := MonthsToDrop([]time.Time{sep, oct, nov}, tc.closed, tc.rolled, now, tc.rawDays, tc.late)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPlanRollupLeavesHoursOfDroppedMonthsOnly(t *testing.T) {
	prev := State{ClosedThrough: hr("2026-12-01T00"), Watermark: hr("2026-11-30T00")}
	// October dropped before September and November: only October is gone.
	dropped := NewDroppedMonths([]time.Time{hr("2026-10-01T00")})
	late := []time.Time{hr("2026-09-12T04"), hr("2026-10-02T07"), hr("2026-10-31T23"), hr("2026-11-01T00")}
	p := NewPlan(prev, true, time.Time{}, hr("2026-11-30T23"), 15*time.Minute, late, dropped)
	if want := []time.Time{hr("2026-09-12T04"), hr("2026-11-01T00")}; !reflect.DeepEqual(p.Late, want) {
		t.Errorf("late = %v, want %v: the months around the dropped one", p.Late, want)
	}
	if want := []time.Time{hr("2026-10-02T07"), hr("2026-10-31T23")}; !reflect.DeepEqual(p.InDroppedMonth, want) {
		t.Errorf("in dropped month = %v, want %v", p.InDroppedMonth, want)
	}
}

func TestPlanRollupClosingSkipsDroppedMonths(t *testing.T) {
	// No saved state (lost), and the earliest sample is a late one in
	// dropped September: closing starts there but skips September and
	// November.
	dropped := NewDroppedMonths([]time.Time{hr("2026-09-01T00"), hr("2026-11-15T00")})
	p := NewPlan(State{}, false, hr("2026-09-20T05"), hr("2026-12-02T10").Add(20*time.Minute), 15*time.Minute, nil, dropped)
	want := []HourRange{{hr("2026-10-01T00"), hr("2026-11-01T00")}, {hr("2026-12-01T00"), hr("2026-12-02T10")}}
	if !reflect.DeepEqual(p.Closing, want) {
		t.Errorf("closing = %v, want %v", p.Closing, want)
	}
	if !p.Next.ClosedThrough.Equal(hr("2026-12-02T10")) {
		t.Errorf("closed through = %v", p.Next.ClosedThrough)
	}
}

func TestDroppedMonths(t *testing.T) {
	d := NewDroppedMonths([]time.Time{hr("2026-03-17T05")})
	if !d.Contains(hr("2026-03-01T00")) || !d.Contains(hr("2026-03-31T23")) || d.Contains(hr("2026-02-28T23")) || d.Contains(hr("2026-04-01T00")) {
		t.Error("Contains does not match March exactly")
	}
	cases := []struct {
		name     string
		from, to time.Time
		want     []time.Time
	}{
		{"ends where the dropped month starts", hr("2026-02-01T00"), hr("2026-03-01T00"), nil},
		{"starts where the dropped month ends", hr("2026-04-01T00"), hr("2026-05-01T00"), nil},
		{"one hour inside", hr("2026-03-05T05"), hr("2026-03-05T06"), []time.Time{hr("2026-03-01T00")}},
		{"spans it", hr("2026-02-01T00"), hr("2026-04-01T00"), []time.Time{hr("2026-03-01T00")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := d.Overlapping(tc.from, tc.to); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("overlapping = %v, want %v", got, tc.want)
			}
		})
	}
	var none DroppedMonths
	if none.Contains(hr("2026-03-01T00")) || none.Overlapping(hr("2026-01-01T00"), hr("2027-01-01T00")) != nil {
		t.Error("an empty set contains something")
	}
}

// Issue 31, defect 2: a range rollup over hours past the grace closes
// them when nothing before them is left unrolled.
func TestRangeMark(t *testing.T) {
	grace := 15 * time.Minute
	now := hr("2026-12-06T16")
	prev := State{ClosedThrough: hr("2026-09-01T00"), Watermark: hr("2026-11-30T00"), CompletedVersion: 5}
	cases := []struct {
		name        string
		prev        State
		hasPrev     bool
		earliest    time.Time
		from, to    time.Time
		wantMoved   bool
		wantThrough time.Time
		wantMark    time.Time // watermark
	}{
		{"first rollup from the earliest sample closes the range", State{}, false, hr("2026-09-10T00"),
			hr("2026-09-01T00"), hr("2026-10-01T00"), true, hr("2026-10-01T00"), now.Add(-InsertSlack)},
		{"first rollup after the earliest sample leaves hours behind: no move", State{}, false, hr("2026-08-31T23"),
			hr("2026-09-01T00"), hr("2026-10-01T00"), false, time.Time{}, time.Time{}},
		{"first rollup into open hours closes up to the grace only", State{}, false, hr("2026-12-06T10"),
			hr("2026-12-06T00"), hr("2026-12-07T00"), true, hr("2026-12-06T15"), now.Add(-InsertSlack)},
		{"no samples at all: the range closes", State{}, false, time.Time{},
			hr("2026-09-01T00"), hr("2026-10-01T00"), true, hr("2026-10-01T00"), now.Add(-InsertSlack)},
		{"range from the mark moves it, watermark kept", prev, true, time.Time{},
			hr("2026-09-01T00"), hr("2026-10-01T00"), true, hr("2026-10-01T00"), prev.Watermark},
		{"range overlapping the mark moves it", prev, true, time.Time{},
			hr("2026-08-15T00"), hr("2026-09-15T00"), true, hr("2026-09-15T00"), prev.Watermark},
		{"range after a gap: no move", prev, true, time.Time{},
			hr("2026-09-02T00"), hr("2026-10-01T00"), false, prev.ClosedThrough, prev.Watermark},
		{"range behind the mark: no move", prev, true, time.Time{},
			hr("2026-07-01T00"), hr("2026-08-01T00"), false, prev.ClosedThrough, prev.Watermark},
		{"range wholly within the grace: no move", State{ClosedThrough: hr("2026-12-06T15")}, true, time.Time{},
			hr("2026-12-06T15"), hr("2026-12-06T16"), false, hr("2026-12-06T15"), time.Time{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			next, moved := RangeMark(tc.prev, tc.hasPrev, tc.earliest, now, grace, tc.from, tc.to, 9)
			if moved != tc.wantMoved || !next.ClosedThrough.Equal(tc.wantThrough) || !next.Watermark.Equal(tc.wantMark) {
				t.Fatalf("RangeMark = %+v, %v; want closed through %v, watermark %v, moved %v",
					next, moved, tc.wantThrough, tc.wantMark, tc.wantMoved)
			}
			if moved && next.CompletedVersion != 9 {
				t.Errorf("completed version %d, want the range's 9", next.CompletedVersion)
			}
			if !moved && next != tc.prev {
				t.Errorf("state changed without a move: %+v", next)
			}
		})
	}
}
