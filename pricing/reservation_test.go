package pricing_test

import (
	"testing"
	"time"
	_ "time/tzdata" // the Berlin case must not depend on the host's zoneinfo

	"github.com/gpumeter/gpumeter/pricing"
	"github.com/shopspring/decimal"
)

// reservedBook prices H100 gpu_hours at 2.00 on demand and 1.5× that in
// burst; a 3g MIG profile has weight 3/7 and a burst price of its own.
const reservedBook = h100Head + `      gpu_hours: {unit_price: "2.00", burst: {multiplier: "1.5"}}
  H100-SXM5-80GB/3g.40gb:
    weight: 3/7
    meters:
      gpu_hours: {unit_price: "2.00", burst: {unit_price: "3.00"}}
`

func TestReservationCoverageIsDecidedPerHour(t *testing.T) {
	book := mustBook(t, reservedBook)
	contract := mustContract(t, `
tenant: acme
reservations:
  - {sku: H100, gpus: 4, rate: "1.80", start: 2026-01-01, end: 2027-01-01}
`)
	// 6 GPUs for 2 hours, then 2 GPUs for 10 hours.
	usage := usageOf("H100", pricing.GPUHours, "6", "6", "2", "2", "2", "2", "2", "2", "2", "2", "2", "2")
	cases := []struct {
		name                      string
		end                       time.Time
		reserved, unused, feeWant string
	}{
		{"over the 12 hours used", hourAt(12), "48", "20", "86.40"},
		{"over the whole month", march.AddDate(0, 1, 0), "2976", "2948", "5356.80"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustPrice(t, pricing.Input{Tenant: "acme", Start: march, End: tc.end, Usage: usage, Contract: contract, Book: book})
			if len(r.Reservations) != 1 {
				t.Fatalf("want one reservation summary, got %+v", r.Reservations)
			}
			ru := r.Reservations[0]
			wantDec(t, "covered: 4+4 in the busy hours, 2×10 after", ru.CoveredGPUHours, "28")
			wantDec(t, "burst: 2 in each busy hour", ru.BurstGPUHours, "4")
			wantDec(t, "on demand", ru.OnDemandGPUHours, "0")
			wantDec(t, "reserved", ru.ReservedGPUHours, tc.reserved)
			wantDec(t, "unused", ru.UnusedGPUHours, tc.unused)

			fee := linesOf(r, pricing.KindReservationFee)
			burst := linesOf(r, pricing.KindBurst)
			covered := linesOf(r, pricing.KindReserved)
			if len(fee) != 1 || len(burst) != 1 || len(covered) != 1 || len(linesOf(r, pricing.KindOnDemand)) != 0 {
				t.Fatalf("want one fee, one burst and one reserved line, got %+v", r.Lines)
			}
			wantDec(t, "take-or-pay fee, used or not", fee[0].AmountRounded, tc.feeWant)
			wantDec(t, "burst at 1.5 × 2.00", burst[0].AmountRounded, "12.00")
			wantDec(t, "covered usage costs nothing extra", covered[0].Amount, "0")
			wantDec(t, "covered quantity", covered[0].Quantity, "28")
		})
	}
}

func TestBurstThresholds(t *testing.T) {
	book := mustBook(t, reservedBook)
	cases := []struct {
		name                         string
		contract                     string
		usage                        []pricing.Usage
		covered, onDemand, burst     string
		wantBurstAmount, wantOnDemnd string
	}{
		{
			name: "a soft limit above the reservation leaves the hours between on demand",
			contract: `
tenant: acme
start: 2026-01-01
end: 2027-01-01
reservations: [{sku: H100, gpus: 4, rate: "1.80"}]
burst: [{sku: H100, above_gpus: 5}]
`,
			usage:   usageOf("H100", pricing.GPUHours, "6", "3"),
			covered: "7", onDemand: "1", burst: "1", wantBurstAmount: "3", wantOnDemnd: "2",
		},
		{
			name: "a soft limit without a reservation makes usage above it burst",
			contract: `
tenant: acme
burst: [{sku: H100, above_gpus: 3}]
`,
			usage:   usageOf("H100", pricing.GPUHours, "5", "1"),
			covered: "0", onDemand: "4", burst: "2", wantBurstAmount: "6", wantOnDemnd: "8",
		},
		{
			name: "outside the contract term the soft limit does not apply",
			contract: `
tenant: acme
start: 2026-04-01
end: 2027-01-01
burst: [{sku: H100, above_gpus: 3}]
`,
			usage:           usageOf("H100", pricing.GPUHours, "5"),
			wantBurstAmount: "0", wantOnDemnd: "10", // and no reservation summary

		},
		{
			name: "a soft limit below the reservation does not shrink coverage",
			contract: `
tenant: acme
start: 2026-01-01
end: 2027-01-01
reservations: [{sku: H100, gpus: 4, rate: "1.80"}]
burst: [{sku: H100, above_gpus: 2}]
`,
			usage:   usageOf("H100", pricing.GPUHours, "5"),
			covered: "4", onDemand: "0", burst: "1", wantBurstAmount: "3", wantOnDemnd: "0",
		},
		{
			name: "reservations in instances convert with the SKU weight; burst has its own price",
			contract: `
tenant: acme
start: 2026-01-01
end: 2027-01-01
reservations: [{sku: H100-SXM5-80GB/3g.40gb, instances: 2, rate: "1.00"}]
`,
			// Three 3g instances for an hour: 9/7 GPU-equivalent hours.
			usage: usageOf("H100-SXM5-80GB/3g.40gb", pricing.GPUHours, "1.285714285714285713"),
			// 2 × 3/7 is 6/7, carried to 18 places.
			covered: "0.857142857142857143", onDemand: "0", burst: "0.42857142857142857",
			wantBurstAmount: "1.285714286", wantOnDemnd: "0", // 3.00 × burst, at 9 places
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustPrice(t, pricing.Input{Usage: tc.usage, Contract: mustContract(t, tc.contract), Book: book})
			switch {
			case tc.covered == "" && len(r.Reservations) != 0:
				t.Errorf("want no reservation summary, got %+v", r.Reservations)
			case tc.covered != "" && len(r.Reservations) != 1:
				t.Fatalf("want one reservation summary, got %+v", r.Reservations)
			case tc.covered != "":
				ru := r.Reservations[0]
				wantDec(t, "covered", ru.CoveredGPUHours, tc.covered)
				wantDec(t, "on demand", ru.OnDemandGPUHours, tc.onDemand)
				wantDec(t, "burst", ru.BurstGPUHours, tc.burst)
			}
			burst, onDemand := decSum(linesOf(r, pricing.KindBurst)), decSum(linesOf(r, pricing.KindOnDemand))
			wantDec(t, "burst amount", burst, tc.wantBurstAmount)
			wantDec(t, "on-demand amount", onDemand, tc.wantOnDemnd)
		})
	}
}

func decSum(lines []pricing.Line) decimal.Decimal {
	s := decimal.Zero
	for _, l := range lines {
		s = s.Add(l.Amount)
	}
	return s
}

func TestReservationProratedBySecond(t *testing.T) {
	book := mustBook(t, reservedBook)
	t.Run("a rate reservation starting mid-month pays for the seconds it exists", func(t *testing.T) {
		c := mustContract(t, `
tenant: acme
reservations:
  - {sku: H100, gpus: 4, rate: "2.00", start: "2026-03-10T08:30:15Z", end: 2027-01-01}
`)
		start := time.Date(2026, 3, 10, 7, 0, 0, 0, time.UTC)
		usage := []pricing.Usage{
			{Hour: start, SKU: "H100", Meter: pricing.GPUHours, Quantity: dec("4")},                    // before: on demand
			{Hour: start.Add(time.Hour), SKU: "H100", Meter: pricing.GPUHours, Quantity: dec("4")},     // 1785 s reserved
			{Hour: start.Add(2 * time.Hour), SKU: "H100", Meter: pricing.GPUHours, Quantity: dec("4")}, // fully reserved
		}
		r := mustPrice(t, pricing.Input{Usage: usage, Contract: c, Book: book})
		fee := linesOf(r, pricing.KindReservationFee)[0]
		// 1,870,185 s from 08:30:15 on the 10th to 1 April = 519.4958333… h.
		wantDec(t, "reserved GPU-hours", fee.Quantity, "2077.983333333333333332")
		wantDec(t, "fee at 9 places", fee.Amount, "4155.966666667")
		wantDec(t, "fee rounded", fee.AmountRounded, "4155.97")
		if !fee.From.Equal(time.Date(2026, 3, 10, 8, 30, 15, 0, time.UTC)) {
			t.Errorf("fee from %v, want the reservation start", fee.From)
		}
		ru := r.Reservations[0]
		wantDec(t, "covered: 4 × 1785/3600 in the starting hour, then 4", ru.CoveredGPUHours, "5.983333333333333332")
		wantDec(t, "burst: the rest of the starting hour", ru.BurstGPUHours, "2.016666666666666668")
		wantDec(t, "on demand: the hour before the reservation", ru.OnDemandGPUHours, "4")
	})
	cases := []struct {
		name, from, to string
		periodStart    time.Time
		periodEnd      time.Time
		months, amount string
	}{
		{"monthly fee starting on the 16th pays 16/31 of March", "2026-03-16", "2027-01-01", march, march.AddDate(0, 1, 0), "0.516129032258064516", "774.19"},
		{"monthly fee ending on the 11th pays 10/31 of March", "2026-01-01", "2026-03-11", march, march.AddDate(0, 1, 0), "0.322580645161290323", "483.87"},
		{"monthly fee for all of February is exactly one month", "2026-01-01", "2027-01-01", time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), march, "1", "1500.00"},
		{"a period across two months weighs each month by its own length", "2026-01-01", "2027-01-01", time.Date(2026, 2, 15, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC), "0.951612903225806452", "1427.42"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustContract(t, "tenant: acme\nreservations:\n  - {sku: H100, gpus: 4, monthly_fee: \"1500\", start: "+tc.from+", end: "+tc.to+"}\n")
			r := mustPrice(t, pricing.Input{Start: tc.periodStart, End: tc.periodEnd, Contract: c, Book: book})
			fee := linesOf(r, pricing.KindReservationFee)
			if len(fee) != 1 {
				t.Fatalf("want one fee line, got %+v", r.Lines)
			}
			wantDec(t, "months", fee[0].Quantity, tc.months)
			wantDec(t, "fee", fee[0].AmountRounded, tc.amount)
			wantDec(t, "unused: nothing was used", r.Reservations[0].UnusedGPUHours, r.Reservations[0].ReservedGPUHours.String())
		})
	}
	t.Run("calendar months follow the period's time zone (743-hour March in Berlin)", func(t *testing.T) {
		berlin, err := time.LoadLocation("Europe/Berlin")
		if err != nil {
			t.Fatal(err)
		}
		c := mustContract(t, `
tenant: acme
reservations:
  - {sku: H100, gpus: 1, monthly_fee: "1500", start: 2026-01-01, end: 2027-01-01}
  - {sku: H100, gpus: 1, rate: "1", start: 2026-01-01, end: 2027-01-01}
`)
		start := time.Date(2026, 3, 1, 0, 0, 0, 0, berlin)
		r := mustPrice(t, pricing.Input{Start: start, End: start.AddDate(0, 1, 0), Contract: c, Book: book})
		fees := linesOf(r, pricing.KindReservationFee)
		wantDec(t, "monthly fee for the Berlin month", fees[0].AmountRounded, "1500.00")
		wantDec(t, "hours in the Berlin month", fees[1].Quantity, "743")
	})
	t.Run("a reservation outside the period charges nothing", func(t *testing.T) {
		c := mustContract(t, `
tenant: acme
reservations: [{sku: H100, gpus: 4, rate: "2", start: 2026-05-01, end: 2026-06-01}]
`)
		r := mustPrice(t, pricing.Input{Contract: c, Book: book, Usage: usageOf("H100", pricing.GPUHours, "5")})
		if len(linesOf(r, pricing.KindReservationFee)) != 0 || len(linesOf(r, pricing.KindBurst)) != 0 {
			t.Errorf("want on-demand only, got %+v", r.Lines)
		}
		wantDec(t, "total", r.Total, "10")
	})
}

func TestMinimumCommitment(t *testing.T) {
	book := mustBook(t, reservedBook)
	bookWithDefault := mustBook(t, reservedBook+"minimum_commitment: {monthly_amount: \"25\"}\n")
	cases := []struct {
		name     string
		book     *pricing.Book
		contract string
		usage    []pricing.Usage
		trueUp   string // "" for no true-up line
		total    string
	}{
		{"a shortfall becomes a true-up line and the total meets the commitment",
			book, "tenant: acme\nminimum_commitment: {monthly_amount: \"1000\"}\n",
			usageOf("H100", pricing.GPUHours, "50"), "900.00", "1000.00"},
		{"usage above the commitment adds no line",
			book, "tenant: acme\nminimum_commitment: {monthly_amount: \"1000\"}\n",
			usageOf("H100", pricing.GPUHours, "600"), "", "1200.00"},
		{"a contract starting mid-month commits 16/31 of the month",
			book, "tenant: acme\nstart: 2026-03-16\nend: 2027-01-01\nminimum_commitment: {monthly_amount: \"1000\"}\n",
			usageOf("H100", pricing.GPUHours, "50"), "416.13", "516.13"},
		{"reservation fees count toward the commitment",
			book, "tenant: acme\nminimum_commitment: {monthly_amount: \"1000\"}\nreservations: [{sku: H100, gpus: 1, monthly_fee: \"800\", start: 2026-01-01, end: 2027-01-01}]\n",
			nil, "200.00", "1000.00"},
		{"the book's default commitment applies without a contract",
			bookWithDefault, "", usageOf("H100", pricing.GPUHours, "5"), "15.00", "25.00"},
		{"a contract's zero commitment overrides the book's default",
			bookWithDefault, "tenant: acme\nminimum_commitment: {monthly_amount: \"0\"}\n",
			usageOf("H100", pricing.GPUHours, "5"), "", "10.00"},
		{"no usage at all pays the whole commitment",
			book, "tenant: acme\nminimum_commitment: {monthly_amount: \"1000\"}\n", nil, "1000.00", "1000.00"},
		{"the commitment is rounded once, to cents, from its 9-place amount",
			book, "tenant: acme\nminimum_commitment: {monthly_amount: \"1.2349999996\"}\n", nil, "1.24", "1.24"},
		{"a commitment below a half at the 9th place rounds down",
			book, "tenant: acme\nminimum_commitment: {monthly_amount: \"1.2349999994\"}\n", nil, "1.23", "1.23"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := pricing.Input{Usage: tc.usage, Book: tc.book}
			if tc.contract != "" {
				in.Contract = mustContract(t, tc.contract)
			}
			r := mustPrice(t, in)
			lines := linesOf(r, pricing.KindTrueUp)
			switch {
			case tc.trueUp == "" && len(lines) != 0:
				t.Errorf("want no true-up, got %+v", lines)
			case tc.trueUp != "" && len(lines) != 1:
				t.Fatalf("want one true-up line, got %+v", r.Lines)
			case tc.trueUp != "":
				wantDec(t, "true-up", lines[0].AmountRounded, tc.trueUp)
			}
			wantDec(t, "total", r.Total, tc.total)
		})
	}
}
