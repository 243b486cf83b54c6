package chargeback

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

func decp(s string) *decimal.Decimal { d := dec(s); return &d }

func kg(tt Totals) string {
	if !tt.Energy.KgCO2e.Valid {
		return "null"
	}
	return tt.Energy.KgCO2e.Decimal.String() + " (no intensity " + tt.Energy.NoIntensityKWh.String() + " kWh)"
}

func TestAllocateCarbonFixed(t *testing.T) {
	cases := []struct {
		name   string
		carbon CarbonSource
		want   map[string]string
		note   string
	}{
		// eu-west at 200 g/kWh: alice 0.7 kWh, bob 0.3, idle 0.1; carol's
		// 0.4 kWh has no site and takes the default 400.
		{"per site with a default", CarbonSource{Sites: map[string]decimal.Decimal{"eu-west": dec("200")}, Default: decp("400")},
			map[string]string{"alice": "0.14 (no intensity 0 kWh)", "bob": "0.06 (no intensity 0 kWh)", "carol": "0.16 (no intensity 0 kWh)",
				"dave": "0 (no intensity 0 kWh)", "fleet": "0.38 (no intensity 0 kWh)"}, ""},
		{"a site without an intensity is left out, not zero", CarbonSource{Sites: map[string]decimal.Decimal{"eu-west": dec("200")}},
			map[string]string{"alice": "0.14 (no intensity 0 kWh)", "carol": "0 (no intensity 0.4 kWh)", "fleet": "0.22 (no intensity 0.4 kWh)"},
			"0.400 kWh had no carbon intensity for its site or hour and is left out of kgCO2e"},
		// Day 1, 10:00 at 300 g/kWh: the day-2 rows have no energy.
		{"per hour", CarbonSource{Hours: []HourIntensity{{Hour: hour(1, 10), GramsPerKWh: dec("300")}}},
			map[string]string{"alice": "0.21 (no intensity 0 kWh)", "carol": "0.12 (no intensity 0 kWh)", "fleet": "0.45 (no intensity 0 kWh)"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := fleetInput(IdleOwnRow)
			in.Carbon = &tc.carbon
			rep, err := Allocate(in)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{"fleet": kg(rep.Fleet)}
			for _, d := range rep.Departments {
				for _, tn := range d.Tenants {
					got[tn.Name] = kg(tn.Totals)
				}
			}
			for k, w := range tc.want {
				if got[k] != w {
					t.Errorf("%s: kgCO2e %s, want %s", k, got[k], w)
				}
			}
			hasNote := strings.Contains(strings.Join(rep.Notes, "\n"), "carbon intensity")
			if tc.note != "" && !strings.Contains(strings.Join(rep.Notes, "\n"), tc.note) || tc.note == "" && hasNote {
				t.Errorf("notes %q, want the note %q", rep.Notes, tc.note)
			}
		})
	}
}

// Hourly intensities apply hour by hour; an hour missing from the series
// leaves its energy out of kgCO2e. kgCO2e = kWh × g/kWh / 1000, kept at
// QuantityPlaces and shown at CarbonDisplayPlaces.
func TestAllocateCarbonHourly(t *testing.T) {
	row := func(h int, kwh int64) Row {
		return Row{Department: "d", Tenant: "t", SKU: a100, Hour: hour(1, h), GPUMicroseconds: gpuHour,
			EnergyMillijoules: uint64(kwh) * 3_600_000_000, EnergySource: EnergyMeasured}
	}
	in := Input{Period: nov, Currency: usd, Idle: IdleOwnRow, Rows: []Row{row(0, 1), row(1, 2), row(2, 3)},
		Carbon: &CarbonSource{Hours: []HourIntensity{
			{Hour: hour(1, 0), GramsPerKWh: dec("412.3456")},
			{Hour: hour(1, 2).In(time.FixedZone("CET", 3600)), GramsPerKWh: dec("50")},
		}}}
	rep, err := Allocate(in)
	if err != nil {
		t.Fatal(err)
	}
	tn := rep.Departments[0].Tenants[0]
	// 1 × 412.3456 + 3 × 50 = 562.3456 g; hour 1's 2 kWh has no intensity.
	if got := kg(tn.Totals); got != "0.5623456 (no intensity 2 kWh)" {
		t.Errorf("kgCO2e %s, want 0.5623456 (no intensity 2 kWh)", got)
	}
	if got := tn.Energy.KgCO2e.Decimal.StringFixed(CarbonDisplayPlaces); got != "0.562" {
		t.Errorf("shown as %s, want 0.562", got)
	}
}

func TestParseCarbonCSV(t *testing.T) {
	got, err := ParseCarbonCSV(strings.NewReader("\ufeffhour, g_co2e_per_kwh\n" +
		"2026-11-01T00:00:00Z,412.5\n" +
		"\n" +
		"2026-11-01T02:00:00+01:00, 300\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []HourIntensity{{Hour: hour(1, 0), GramsPerKWh: dec("412.5")}, {Hour: hour(1, 1), GramsPerKWh: dec("300")}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].Hour.Equal(want[i].Hour) || got[i].Hour.Location() != time.UTC || !got[i].GramsPerKWh.Equal(want[i].GramsPerKWh) {
			t.Errorf("row %d = %v, want %v in UTC", i, got[i], want[i])
		}
	}
}

func TestParseCarbonCSVErrors(t *testing.T) {
	const header = "hour,g_co2e_per_kwh\n"
	cases := []struct {
		name, csv string
		want      []string // each must appear in the error
	}{
		{"empty file", "", []string{`header: want "hour,g_co2e_per_kwh", got an empty file (line 1)`}},
		{"wrong header", "time,grams\n", []string{`header: want "hour,g_co2e_per_kwh", got "time,grams" (line 1)`}},
		{"header only", header, []string{"no intensities after the header (line 2)"}},
		{"not a time", header + "yesterday,1\n", []string{`hour: want an RFC 3339 time such as 2026-11-01T00:00:00Z, got "yesterday" (line 2)`}},
		{"not on the hour", header + "2026-11-01T00:30:00Z,1\n", []string{"hour: 2026-11-01T00:30:00Z is not the start of an hour (line 2)"}},
		{"the same hour twice, in two offsets", header + "2026-11-01T01:00:00Z,1\n2026-11-01T02:00:00+01:00,2\n",
			[]string{"hour: 2026-11-01T01:00:00Z also on line 2 (line 3)"}},
		{"not a number", header + "2026-11-01T00:00:00Z,abc\n", []string{`g_co2e_per_kwh: want a non-negative decimal such as 412.5, got "abc" (line 2)`}},
		{"negative", header + "2026-11-01T00:00:00Z,-5\n", []string{`g_co2e_per_kwh: want a non-negative decimal such as 412.5, got "-5" (line 2)`}},
		{"an exponent", header + "2026-11-01T00:00:00Z,1e-2000000000\n", []string{`got "1e-2000000000" (line 2)`}},
		{"two points", header + "2026-11-01T00:00:00Z,1.2.3\n", []string{`got "1.2.3" (line 2)`}},
		{"too many places", header + "2026-11-01T00:00:00Z,0.1234567890123456789\n", []string{"g_co2e_per_kwh: more than 18 decimal places (line 2)"}},
		{"too large", header + "2026-11-01T00:00:00Z,1000000000000000\n", []string{"g_co2e_per_kwh: must be below 10^15 (line 2)"}},
		{"a field too many", header + "2026-11-01T00:00:00Z,1,2\n", []string{"want 2 fields (hour,g_co2e_per_kwh), got 3 (line 2)"}},
		{"a bare quote", header + "2026-11-01T00:00:00Z,1\n2026-11-01T01:00:00Z,1\"2\n", []string{`column 23: bare " in non-quoted-field (line 3)`}},
		{"every bad line is reported", header + "x,1\n2026-11-01T00:00:00Z,y\n", []string{"(line 2)", "(line 3)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCarbonCSV(strings.NewReader(tc.csv))
			if err == nil {
				t.Fatalf("no error, got %v", got)
			}
			var ve *pricing.ValidationError
			if !errors.As(err, &ve) {
				t.Errorf("error %T, want a *pricing.ValidationError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}
