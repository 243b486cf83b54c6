package pricing_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/shopspring/decimal"
)

// wantsErr reports whether a case wants an error (want not empty), and
// fails the test when err is not that error or is one nobody wanted.
func wantsErr(t *testing.T, err error, want string) bool {
	t.Helper()
	if want != "" {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want one containing %q", err, want)
		}
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}

func TestParsePeriodQuantity(t *testing.T) {
	cases := []struct {
		name, in string
		want     pricing.PeriodQuantity
		err      string
	}{
		{"a whole GPU SKU", "H100-SXM5-80GB:gpu_hours=720", pricing.PeriodQuantity{SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: dec("720")}, ""},
		{"a MIG SKU and a fraction", "H100-SXM5-80GB/3g.40gb:energy_kwh=0.25", pricing.PeriodQuantity{SKU: "H100-SXM5-80GB/3g.40gb", Meter: pricing.Meter("energy_kwh"), Quantity: dec("0.25")}, ""},
		{"the meter is after the last colon", "a:b:pcie_gib=1", pricing.PeriodQuantity{SKU: "a:b", Meter: pricing.Meter("pcie_gib"), Quantity: dec("1")}, ""},
		{"zero", "B200:gpu_hours=0", pricing.PeriodQuantity{SKU: "B200", Meter: pricing.GPUHours, Quantity: decimal.Zero}, ""},
		{"no meter", "H100-SXM5-80GB=1", pricing.PeriodQuantity{}, "want SKU:METER=VALUE"},
		{"no value", "H100-SXM5-80GB:gpu_hours", pricing.PeriodQuantity{}, "want SKU:METER=VALUE"},
		{"no SKU", ":gpu_hours=1", pricing.PeriodQuantity{}, "want SKU:METER=VALUE"},
		{"an empty meter", "B200:=1", pricing.PeriodQuantity{}, "want SKU:METER=VALUE"},
		{"empty", "", pricing.PeriodQuantity{}, "want SKU:METER=VALUE"},
		{"an unknown meter", "B200:gpu_minutes=1", pricing.PeriodQuantity{}, `unknown meter "gpu_minutes"`},
		{"not a number", "B200:gpu_hours=1,5", pricing.PeriodQuantity{}, "not a decimal number"},
		{"an exponent", "B200:gpu_hours=1e3", pricing.PeriodQuantity{}, "not a decimal number"},
		{"negative", "B200:gpu_hours=-1", pricing.PeriodQuantity{}, "negative quantity -1"},
		{"an empty value", "B200:gpu_hours=", pricing.PeriodQuantity{}, "empty number"},
		{"finer than 18 places", "B200:gpu_hours=0.0000000000000000001", pricing.PeriodQuantity{}, "more than 18 decimal places"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pricing.ParsePeriodQuantity(tc.in)
			if wantsErr(t, err, tc.err) {
				return
			}
			if got.SKU != tc.want.SKU || got.Meter != tc.want.Meter || !got.Quantity.Equal(tc.want.Quantity) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if back, err := pricing.ParsePeriodQuantity(got.String()); err != nil || back.String() != got.String() {
				t.Errorf("%q reads back as %+v (%v)", got.String(), back, err)
			}
		})
	}
}

func TestSpread(t *testing.T) {
	q := func(s string) pricing.PeriodQuantity {
		return pricing.PeriodQuantity{SKU: "H100-SXM5-80GB/3g.40gb", Meter: pricing.GPUHours, Quantity: dec(s)}
	}
	cases := []struct {
		name     string
		q        pricing.PeriodQuantity
		from, to time.Time
		hours    int
		first    time.Time
		parts    []string // the distinct part sizes, largest first
		err      string
	}{
		{"March has 744 hours and the parts add up to 100.000000001", q("100.000000001"), march, march.AddDate(0, 1, 0), 744, march,
			[]string{"0.134408603", "0.134408602"}, ""},
		{"an even split", q("48"), march, march.Add(24 * time.Hour), 24, march, []string{"2"}, ""},
		{"thirds at 9 places, the remainder to the first hours", q("1"), march, march.Add(3 * time.Hour), 3, march,
			[]string{"0.333333334", "0.333333333"}, ""},
		{"a quantity finer than 9 places keeps its own places", q("0.0000000000001"), march, march.Add(2 * time.Hour), 2, march,
			[]string{"0.0000000000001", "0"}, ""},
		{"zero is zero in every hour", q("0"), march, march.Add(5 * time.Hour), 5, march, []string{"0"}, ""},
		{"only whole hours count: a period starting at :30 begins at the next hour", q("2"), march.Add(30 * time.Minute), march.Add(3 * time.Hour), 2,
			march.Add(time.Hour), []string{"1"}, ""},
		{"an hour that starts before the end counts", q("2"), march, march.Add(90 * time.Minute), 2, march, []string{"1"}, ""},
		{"hours are UTC hours in any time zone", q("1"), march.In(time.FixedZone("IST", 5*3600+1800)), march.Add(time.Hour), 1, march, []string{"1"}, ""},
		{"two leap years of hours is the most", q("1"), march, march.Add(2 * 366 * 24 * time.Hour), 2 * 366 * 24, march, nil, ""},
		{"one hour more is refused", q("1"), march, march.Add((2*366*24 + 1) * time.Hour), 0, march, nil, "quote at most two years"},
		{"no whole hour", q("1"), march.Add(10 * time.Minute), march.Add(50 * time.Minute), 0, march, nil, "no whole hour"},
		{"an end before the start", q("1"), march, march.Add(-time.Hour), 0, march, nil, "no whole hour"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := tc.q.Spread(tc.from, tc.to)
			if wantsErr(t, err, tc.err) {
				return
			}
			if len(rows) != tc.hours {
				t.Fatalf("%d rows, want %d", len(rows), tc.hours)
			}
			sum := decimal.Zero
			var sizes []string
			for i, r := range rows {
				if want := tc.first.Add(time.Duration(i) * time.Hour); !r.Hour.Equal(want) {
					t.Errorf("row %d at %s, want %s", i, r.Hour, want)
				}
				if r.SKU != tc.q.SKU || r.Meter != tc.q.Meter {
					t.Errorf("row %d: %+v", i, r)
				}
				sum = sum.Add(r.Quantity)
				if len(sizes) == 0 || sizes[len(sizes)-1] != r.Quantity.String() {
					sizes = append(sizes, r.Quantity.String())
				}
			}
			if !sum.Equal(tc.q.Quantity) {
				t.Errorf("rows add up to %s, want %s", sum, tc.q.Quantity)
			}
			if tc.parts != nil && strings.Join(sizes, " ") != strings.Join(tc.parts, " ") {
				t.Errorf("parts %v, want %v", sizes, tc.parts)
			}
		})
	}
}

func TestCalendarMonths(t *testing.T) {
	h := func(s string) pricing.Usage {
		at, _ := time.Parse(time.RFC3339, s)
		return pricing.Usage{Hour: at}
	}
	for _, tc := range []struct {
		name     string
		rows     []pricing.Usage
		from, to string // "" with ok false
	}{
		{"no rows", nil, "", ""},
		{"one row is its month", []pricing.Usage{h("2026-03-15T10:00:00Z")}, "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"},
		{"rows in any order span whole months", []pricing.Usage{h("2026-05-31T23:00:00Z"), h("2026-03-01T00:00:00Z"), h("2026-04-10T00:00:00Z")},
			"2026-03-01T00:00:00Z", "2026-06-01T00:00:00Z"},
		{"the months are UTC's", []pricing.Usage{h("2026-03-01T00:30:00+02:00")}, "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, to, ok := pricing.CalendarMonths(tc.rows)
			if !ok {
				if tc.from != "" {
					t.Fatalf("no months, want [%s, %s)", tc.from, tc.to)
				}
				return
			}
			if got := from.Format(time.RFC3339) + " " + to.Format(time.RFC3339); got != tc.from+" "+tc.to {
				t.Errorf("[%s), want [%s %s)", got, tc.from, tc.to)
			}
		})
	}
}

func TestBookSpreadQuantity(t *testing.T) {
	data, err := os.ReadFile("books/gpu-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := pricing.ParseBook(data)
	if err != nil {
		t.Fatal(err)
	}
	march := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	rows, err := b.SpreadQuantity(b.SKUs()[0]+":gpu_hours=744", march, march.AddDate(0, 1, 0))
	if err != nil || len(rows) != 744 {
		t.Fatalf("%d rows, %v; want one per hour of March", len(rows), err)
	}
	_, err = b.SpreadQuantity("B300:gpu_hours=1", march, march.AddDate(0, 1, 0))
	if err == nil || !strings.Contains(err.Error(), `unknown SKU "B300"`) || !fault.IsValidation(err) {
		t.Errorf("an unknown SKU: %v", err)
	}
}
