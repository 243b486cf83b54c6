package chargeback

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(in *Input)
		want   string // "" for valid input
	}{
		{"the fleet is valid", func(*Input) {}, ""},
		{"no rows at all is an empty report", func(in *Input) { in.Rows = nil }, ""},
		{"weights are ignored outside by_weight", func(in *Input) { in.Weights = map[string]decimal.Decimal{"nobody": dec("-1")} }, ""},
		{"a zero-cost idle row shares nothing, with or without tenants", func(in *Input) {
			in.Idle = IdleByUse
			in.Rows = []Row{{SKU: a100, Hour: hour(1, 0), GPUMicroseconds: gpuHour}}
		}, ""},

		{"period label", func(in *Input) { in.Period.Label = "" }, "period.label: required"},
		{"period bounds", func(in *Input) { in.Period.End = time.Time{} }, "period: start and end are both required"},
		{"period order", func(in *Input) { in.Period.End = in.Period.Start }, "period.end: 2026-11-01T00:00:00Z is not after start"},
		{"currency code", func(in *Input) { in.Currency.Code = "usd" }, `currency.code: want an ISO 4217 code such as USD, got "usd"`},
		{"currency minor units", func(in *Input) { in.Currency.MinorUnits = 12 }, "currency.minor_units: must be between 0 and 9, got 12"},
		{"currency rounding", func(in *Input) { in.Currency.Rounding = "up" }, `currency.rounding: unknown rounding mode "up"`},
		{"idle mode", func(in *Input) { in.Idle = "share" }, `idle: unknown idle mode "share" (want own_row, by_use, by_weight or evenly)`},

		{"a tenant row needs a department", func(in *Input) { in.Rows[3].Department = "" }, "rows[3].department: required for a tenant row"},
		{"an idle row has no department", func(in *Input) { in.Rows[2].Department = "physics" },
			`rows[2].department: must be empty on an idle row (tenant empty): idle capacity belongs to the fleet, got "physics"`},
		{"sku", func(in *Input) { in.Rows[0].SKU = "" }, "rows[0].sku: required"},
		{"hour required", func(in *Input) { in.Rows[1].Hour = time.Time{} }, "rows[1].hour: required"},
		{"hour on the hour", func(in *Input) { in.Rows[1].Hour = hour(1, 10).Add(time.Second) }, "rows[1].hour: 2026-11-01T10:00:01Z is not the start of an hour"},
		{"hour in the period", func(in *Input) { in.Rows[1].Hour = in.Period.End },
			"rows[1].hour: 2026-12-01T00:00:00Z is outside the period [2026-11-01T00:00:00Z, 2026-12-01T00:00:00Z)"},
		{"unmeasured SM time within GPU time", func(in *Input) { in.Rows[4].Unmeasured[meter.GroupSMActive] = gpuHour },
			"rows[4].unmeasured.sm_active: 3600000000 exceeds the row's gpu_microseconds 1440000000"},
		{"SM-active within measured time", func(in *Input) { in.Rows[4].SMActiveMicroseconds = 1_440_000_000 },
			"rows[4].sm_active_microseconds: 1440000000 exceeds the measured GPU time 1080000000"},
		{"unmeasured energy time within GPU time", func(in *Input) { in.Rows[0].Unmeasured[meter.GroupEnergy] = gpuHour + 1 },
			"rows[0].unmeasured.energy: 3600000001 exceeds the row's gpu_microseconds 3600000000"},
		{"energy needs its source", func(in *Input) { in.Rows[0].EnergySource = "" }, "rows[0].energy_source: required when energy_millijoules is not zero"},
		{"energy source known", func(in *Input) { in.Rows[0].EnergySource = "guessed" }, `rows[0].energy_source: unknown "guessed"`},
		{"cost meter known", func(in *Input) { in.Rows[0].Cost["gpu_hourz"] = dec("1") }, `rows[0].cost["gpu_hourz"]: unknown meter "gpu_hourz"`},
		{"cost not negative", func(in *Input) { in.Rows[0].Cost[pricing.GPUHours] = dec("-0.01") }, "rows[0].cost.gpu_hours: must not be negative, got -0.01"},
		{"cost places", func(in *Input) { in.Rows[0].Cost[pricing.GPUHours] = dec("0.0000000000000000001") }, "rows[0].cost.gpu_hours: more than 18 decimal places"},
		{"cost with a huge negative exponent, refused without arithmetic", func(in *Input) {
			in.Rows[0].Cost[pricing.GPUHours] = decimal.New(1, math.MinInt32)
		}, "rows[0].cost.gpu_hours: more than 18 decimal places"},
		{"cost size", func(in *Input) { in.Rows[0].Cost[pricing.GPUHours] = decimal.New(1, math.MaxInt32) }, "rows[0].cost.gpu_hours: must be below 10^15"},
		{"the fleet's cost fits", func(in *Input) {
			in.Rows[0].Cost[pricing.GPUHours] = dec("999999999999999")
			in.Rows[1].Cost[pricing.GPUHours] = dec("999999999999999")
		}, "rows: the fleet's cost adds up to 10^15 or more"},
		{"the fleet's GPU time fits", func(in *Input) {
			in.Rows[0].GPUMicroseconds, in.Rows[1].GPUMicroseconds = math.MaxUint64, math.MaxUint64
		}, "rows: the fleet's gpu_microseconds add up past 2^64-1"},
		{"sharing idle cost needs tenants", func(in *Input) {
			in.Idle = IdleEvenly
			in.Rows = in.Rows[2:3]
		}, "idle: mode evenly shares the idle cost to tenants, but no row has a tenant (use own_row)"},

		{"by_weight needs weights", func(in *Input) { in.Idle, in.Weights = IdleByWeight, nil }, "weights: required for idle mode by_weight"},
		{"weights name known departments", func(in *Input) { in.Idle, in.Weights["music"] = IdleByWeight, dec("1") },
			`weights["music"]: no tenant row has department "music"`},
		{"weights not negative", func(in *Input) { in.Idle, in.Weights["biology"] = IdleByWeight, dec("-1") }, `weights["biology"]: must not be negative, got -1`},
		{"weights not all zero", func(in *Input) {
			in.Idle, in.Weights = IdleByWeight, map[string]decimal.Decimal{"physics": dec("0"), "biology": {}}
		}, "weights: all zero: at least one department needs a positive weight"},

		{"carbon of one kind", func(in *Input) {
			in.Carbon = &CarbonSource{Default: decp("1"), Hours: []HourIntensity{{Hour: hour(1, 0), GramsPerKWh: dec("1")}}}
		}, "carbon: set fixed intensities (sites, default) or hours, not both"},
		{"carbon with something", func(in *Input) { in.Carbon = &CarbonSource{} }, "carbon: no intensities"},
		{"carbon site named", func(in *Input) { in.Carbon = &CarbonSource{Sites: map[string]decimal.Decimal{"": dec("1")}} },
			`carbon.sites[""]: site name required`},
		{"carbon default not negative", func(in *Input) { in.Carbon = &CarbonSource{Default: decp("-3")} }, "carbon.default: must not be negative, got -3"},
		{"carbon hours unique", func(in *Input) {
			in.Carbon = &CarbonSource{Hours: []HourIntensity{{Hour: hour(1, 0), GramsPerKWh: dec("1")}, {Hour: hour(1, 0), GramsPerKWh: dec("2")}}}
		}, "carbon.hours[1].hour: 2026-11-01T00:00:00Z also at hours[0]"},
		{"carbon hours on the hour", func(in *Input) {
			in.Carbon = &CarbonSource{Hours: []HourIntensity{{Hour: hour(1, 0).Add(time.Minute), GramsPerKWh: dec("1")}}}
		}, "carbon.hours[0].hour: 2026-11-01T00:01:00Z is not the start of an hour"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := fleetInput(IdleOwnRow)
			tc.mutate(&in)
			err := in.Validate()
			_, aerr := Allocate(in)
			if tc.want == "" {
				if err != nil || aerr != nil {
					t.Fatalf("Validate: %v; Allocate: %v; want both nil", err, aerr)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			var ve *pricing.ValidationError
			if !errors.As(err, &ve) {
				t.Errorf("error %T, want a *pricing.ValidationError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tc.want)
			}
			if aerr == nil || aerr.Error() != err.Error() {
				t.Errorf("Allocate returned %v, want Validate's error", aerr)
			}
		})
	}
}

// Every problem is reported at once, up to a cap.
func TestValidateCollectsProblems(t *testing.T) {
	in := fleetInput(IdleOwnRow)
	in.Currency.Code = ""
	in.Rows[0].SKU, in.Rows[1].SKU = "", ""
	err := in.Validate()
	var ve *pricing.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 3 {
		t.Fatalf("error %v, want 3 problems", err)
	}

	in = fleetInput(IdleOwnRow)
	in.Rows = make([]Row, 60)
	err = in.Validate()
	if !errors.As(err, &ve) || len(ve.Problems) != maxProblems+1 || !strings.HasPrefix(ve.Problems[maxProblems].Message, "and ") {
		t.Fatalf("error with %d problems, want %d and a count of the rest", len(ve.Problems), maxProblems+1)
	}
	if len(ve.Listed()) != maxProblems || ve.Dropped == 0 || !fault.IsValidation(err) {
		t.Fatalf("listed %d, dropped %d, validation %t: want %d listed, the rest counted, a validation error",
			len(ve.Listed()), ve.Dropped, fault.IsValidation(err), maxProblems)
	}
}
