package chargeback

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
)

// draw turns fuzz bytes into choices; past the end it returns zeros.
type draw struct {
	b []byte
	i int
}

func (d *draw) byte() byte {
	if d.i >= len(d.b) {
		return 0
	}
	d.i++
	return d.b[d.i-1]
}

func (d *draw) intn(n int) int { return (int(d.byte())<<8 | int(d.byte())) % n }

func (d *draw) uint64n(n uint64) uint64 {
	var v uint64
	for range 4 {
		v = v<<16 | uint64(d.intn(1<<16))
	}
	return v % n
}

// amount is a decimal below 10000 with up to 9 places; one in 64 is negative.
func (d *draw) amount() decimal.Decimal {
	a := decimal.New(int64(d.intn(10_000)), -int32(d.intn(10)))
	if d.intn(64) == 0 {
		a = a.Neg()
	}
	return a
}

// GPU-microseconds of a share of one GPU-hour: whole, MIG sevenths,
// time-sliced percentages, or anything.
func (d *draw) heldMicroseconds() uint64 {
	switch d.intn(4) {
	case 0:
		return gpuHour
	case 1:
		return uint64(gpuHour*int64(1+d.intn(7))/7 + int64(d.intn(2))) // 3/7 rounded either way
	case 2:
		return uint64(gpuHour * int64(d.intn(101)) / 100)
	}
	return d.uint64n(4 * gpuHour)
}

// fuzzInput builds an input from the bytes: mostly valid, sometimes not.
func fuzzInput(b []byte) Input {
	d := &draw{b: b}
	cur := []pricing.Currency{usd, {Code: "JPY", MinorUnits: 0, Rounding: pricing.HalfEven}, {Code: "KWD", MinorUnits: 3, Rounding: pricing.HalfAwayFromZero}}
	in := Input{Period: nov, Currency: cur[d.intn(len(cur))]}
	in.Idle = []IdleMode{IdleOwnRow, IdleByUse, IdleByWeight, IdleEvenly, "bogus"}[d.intn(5)]
	depts := []string{"physics", "chemistry", "biology"}[:1+d.intn(3)]
	tenants := []string{"t1", "t2", "t3"}
	skus := []string{h100, mig3, a100}
	meters := pricing.Meters()
	sources := []EnergySource{EnergyMeasured, EnergySplitBySlices, EnergySplitByGPM, "", EnergyMeasured, EnergyMeasured, EnergySplitBySlices, EnergySplitByGPM}
	for range d.intn(14) {
		r := Row{SKU: skus[d.intn(len(skus))], Hour: hour(1+d.intn(3), d.intn(24))}
		if d.intn(4) > 0 {
			r.Department, r.Tenant = depts[d.intn(len(depts))], tenants[d.intn(len(tenants))]
		}
		r.GPUMicroseconds = d.heldMicroseconds()
		r.Unmeasured[meter.GroupSMActive] = d.uint64n(r.GPUMicroseconds/4 + 1)
		r.SMActiveMicroseconds = d.uint64n(r.GPUMicroseconds - r.Unmeasured[meter.GroupSMActive] + 1)
		r.Unmeasured[meter.GroupEnergy] = d.uint64n(r.GPUMicroseconds/4 + 1)
		if d.intn(3) > 0 {
			r.EnergyMillijoules = d.uint64n(4_000_000_000)
			r.EnergySource = sources[d.intn(len(sources))] // one in 8 missing
		}
		r.MemMiBSeconds = d.uint64n(81920 * 3600)
		r.Site = []string{"", "eu-west", "us-east"}[d.intn(3)]
		r.Cost = map[pricing.Meter]decimal.Decimal{}
		for range d.intn(4) {
			r.Cost[meters[d.intn(len(meters))]] = d.amount()
		}
		in.Rows = append(in.Rows, r)
	}
	in.Weights = map[string]decimal.Decimal{}
	for _, name := range depts {
		if d.intn(3) > 0 {
			in.Weights[name] = decimal.New(int64(d.intn(5)), -int32(d.intn(3)))
		}
	}
	switch d.intn(3) {
	case 1:
		in.Carbon = &CarbonSource{Sites: map[string]decimal.Decimal{"eu-west": d.amount()}}
		if d.intn(2) == 0 {
			def := d.amount()
			in.Carbon.Default = &def
		}
	case 2:
		in.Carbon = &CarbonSource{}
		h := hour(1, 0)
		for range 1 + d.intn(30) {
			in.Carbon.Hours = append(in.Carbon.Hours, HourIntensity{Hour: h, GramsPerKWh: d.amount()})
			h = h.Add(time.Duration(1+d.intn(3)) * time.Hour)
		}
	}
	return in
}

// FuzzAllocateChargeback: no input panics; input that Validate refuses
// Allocate refuses too, and every report it makes adds up exactly in every
// idle mode (checkInvariants).
func FuzzAllocateChargeback(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 1, 0, 2, 0, 12, 0, 1, 0, 1, 0, 0, 0, 3, 0, 5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte("three tenants split ten cents of idle capacity across MIG slices and time-sliced GPUs"))
	f.Add([]byte{0, 2, 0, 3, 0, 2, 0, 13, 255, 255, 0, 0, 7, 7, 7, 7, 0, 1, 0, 3, 0, 9, 0, 9, 0, 9, 200, 100, 50, 25, 12, 6, 3, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		in := fuzzInput(b)
		verr := in.Validate()
		rep, err := Allocate(in)
		if verr != nil {
			var ve *pricing.ValidationError
			if err == nil || !errors.As(verr, &ve) {
				t.Fatalf("Validate: %v; Allocate: %v; want both to refuse with a *pricing.ValidationError", verr, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid input, Allocate: %v", err)
		}
		checkInvariants(t, in, rep)
	})
}

// FuzzParseCarbonCSV: no input panics; a series it returns has each hour
// once, on the hour, in UTC, with a valid intensity.
func FuzzParseCarbonCSV(f *testing.F) {
	f.Add("hour,g_co2e_per_kwh\n2026-11-01T00:00:00Z,412.5\n2026-11-01T02:00:00+01:00,300\n")
	f.Add("hour,g_co2e_per_kwh\n2026-11-01T00:30:00Z,1e5\n\"x,1\n")
	f.Add("\ufeffhour , g_co2e_per_kwh\nx,y,z\n")
	f.Fuzz(func(t *testing.T, s string) {
		series, err := ParseCarbonCSV(strings.NewReader(s))
		if err != nil {
			return
		}
		seen := map[int64]bool{}
		for _, h := range series {
			if h.Hour.Location() != time.UTC || checkHour(h.Hour) != "" || seen[h.Hour.Unix()] || checkDecimal(h.GramsPerKWh) != "" {
				t.Fatalf("bad intensity %v in %v", h, series)
			}
			seen[h.Hour.Unix()] = true
		}
		if err := (&Input{Period: nov, Currency: usd, Idle: IdleOwnRow, Carbon: &CarbonSource{Hours: series}}).Validate(); err != nil {
			t.Fatalf("parsed series fails validation: %v", err)
		}
	})
}
