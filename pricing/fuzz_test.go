package pricing_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/pricing"
	"github.com/shopspring/decimal"
)

// draw turns fuzz bytes into choices; past the end it returns zeros, so
// every input makes a valid case.
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

// decimal returns a non-negative decimal text below 10^digits with up to
// places decimal places.
func (d *draw) decimal(digits, places int) string {
	var sb strings.Builder
	for range digits {
		sb.WriteByte('0' + byte(d.intn(10)))
	}
	if p := d.intn(places + 1); p > 0 {
		sb.WriteByte('.')
		for range p {
			sb.WriteByte('0' + byte(d.intn(10)))
		}
	}
	return sb.String()
}

// price writes a random valid price (unit price or tiers) at indentation
// ind; graduatedOnly leaves out volume tiers.
func (d *draw) price(sb *strings.Builder, ind string, gpuHours, graduatedOnly bool) {
	switch d.intn(3) {
	case 0:
		fmt.Fprintf(sb, "%sunit_price: %q\n", ind, d.decimal(2, 4))
	default:
		mode := "graduated"
		if !graduatedOnly && d.intn(2) == 0 {
			mode = "volume"
		}
		fmt.Fprintf(sb, "%smode: %s\n%stiers:\n", ind, mode, ind)
		upTo := decimal.Zero
		n := 1 + d.intn(4)
		for i := range n {
			fmt.Fprintf(sb, "%s  - unit_price: %q\n", ind, d.decimal(2, 3))
			if d.intn(3) == 0 {
				fmt.Fprintf(sb, "%s    flat_fee: %q\n", ind, d.decimal(2, 2))
			}
			if i < n-1 {
				upTo = upTo.Add(dec(d.decimal(2, 2))).Add(dec("0.01"))
				fmt.Fprintf(sb, "%s    up_to: %q\n", ind, upTo.String())
			}
		}
	}
	if gpuHours {
		switch d.intn(3) {
		case 1:
			fmt.Fprintf(sb, "%sburst: {multiplier: %q}\n", ind, d.decimal(1, 2))
		case 2:
			fmt.Fprintf(sb, "%sburst: {unit_price: %q}\n", ind, d.decimal(2, 3))
		}
	}
}

var fuzzSKUs = []string{"H100-SXM5-80GB", "H100-SXM5-80GB/3g.40gb"}

// fuzzCase builds a random valid book, contract and usage from data.
func fuzzCase(t *testing.T, data []byte) (pricing.Input, bool) {
	d := &draw{b: data}
	graduatedOnly := d.intn(2) == 0
	var sb strings.Builder
	modes := []string{"half_away_from_zero", "half_even"}
	fmt.Fprintf(&sb, "version: fuzz\ncurrency: {code: USD, rounding: {minor_units: %d, mode: %s}}\n", d.intn(4), modes[d.intn(2)])
	if d.intn(3) == 0 {
		fmt.Fprintf(&sb, "minimum_commitment: {monthly_amount: %q}\n", d.decimal(4, 2))
	}
	sb.WriteString("skus:\n")
	for i, sku := range fuzzSKUs {
		fmt.Fprintf(&sb, "  %s:\n    weight: %s\n    meters:\n", sku, []string{"1", "3/7"}[i])
		for _, m := range []pricing.Meter{pricing.GPUHours, pricing.Meter("energy_kwh")} {
			fmt.Fprintf(&sb, "      %s:\n", m)
			d.price(&sb, "        ", m == pricing.GPUHours, graduatedOnly)
			if d.intn(3) == 0 {
				fmt.Fprintf(&sb, "        changes:\n          - from: %s\n", hourAt(d.intn(48)).Format(time.RFC3339))
				d.price(&sb, "            ", m == pricing.GPUHours, graduatedOnly)
			}
		}
	}
	book, err := pricing.ParseBook([]byte(sb.String()))
	if err != nil {
		t.Fatalf("generated an invalid book: %v\n%s", err, sb.String())
	}

	var cb strings.Builder
	cb.WriteString("tenant: fuzz\nreservations:\n")
	for _, sku := range fuzzSKUs {
		if d.intn(2) == 0 {
			fmt.Fprintf(&cb, "  - {sku: %s, gpus: %q, rate: %q, start: %s, end: %s}\n", sku, fmt.Sprintf("%d.%d", d.intn(8), 1+d.intn(9)), d.decimal(1, 2),
				hourAt(d.intn(48)-8).Add(time.Duration(d.intn(3600))*time.Second).Format(time.RFC3339), hourAt(48+d.intn(48)).Format(time.RFC3339))
		}
		if d.intn(3) == 0 {
			fmt.Fprintf(&cb, "  - {sku: %s, instances: %d, monthly_fee: %q, start: 2026-02-20, end: 2026-03-02}\n", sku, 1+d.intn(4), d.decimal(3, 2))
		}
	}
	if d.intn(2) == 0 {
		fmt.Fprintf(&cb, "burst:\n  - {sku: %s, above_gpus: %q}\n", fuzzSKUs[d.intn(2)], d.decimal(1, 1))
	}
	if d.intn(3) == 0 {
		fmt.Fprintf(&cb, "minimum_commitment: {monthly_amount: %q}\n", d.decimal(3, 2))
	}
	contract, err := pricing.ParseContract([]byte(cb.String()))
	if err != nil {
		t.Fatalf("generated an invalid contract: %v\n%s", err, cb.String())
	}

	in := pricing.Input{Tenant: "fuzz", Start: march, End: hourAt(48), Book: book, Contract: contract}
	for range d.intn(40) {
		in.Usage = append(in.Usage, pricing.Usage{
			Hour:     hourAt(d.intn(48)),
			SKU:      fuzzSKUs[d.intn(2)],
			Meter:    []pricing.Meter{pricing.GPUHours, pricing.Meter("energy_kwh")}[d.intn(2)],
			Quantity: dec(d.decimal(2, 9)),
		})
	}
	return in, graduatedOnly
}

// FuzzPrice checks the engine's invariants on random valid books, contracts
// and usage: rounded lines add up to the total, no amount is negative,
// graduated totals never decrease as usage grows, and allocating the total
// gives parts that add up to it exactly.
func FuzzPrice(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("a price book with tiers, reservations and bursts"))
	f.Add([]byte{1, 2, 0, 1, 0, 2, 0, 0, 1, 1, 0, 3, 0, 2, 9, 9, 9, 9, 0, 1, 0, 1, 7, 7, 7, 7, 7, 7, 0, 30, 1, 1, 1, 1, 2, 2, 2, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		in, graduatedOnly := fuzzCase(t, data)
		r, err := pricing.Price(in)
		if err != nil {
			t.Fatalf("price: %v", err)
		}
		checkTotal(t, r)
		for _, l := range r.Lines {
			if l.Amount.Sign() < 0 || l.Quantity.Sign() < 0 {
				t.Errorf("negative line for non-negative usage: %+v", l)
			}
		}

		if graduatedOnly && len(in.Usage) > 0 {
			// Grow the usage of the latest hour: every price that applies is
			// graduated (or a unit price), so the total must not drop.
			more := append([]pricing.Usage(nil), in.Usage...)
			last := 0
			for i, u := range more {
				if u.Hour.After(more[last].Hour) {
					last = i
				}
			}
			more[last].Quantity = more[last].Quantity.Add(dec("1.5"))
			r2, err := pricing.Price(pricing.Input{Tenant: in.Tenant, Start: in.Start, End: in.End, Usage: more, Contract: in.Contract, Book: in.Book})
			if err != nil {
				t.Fatal(err)
			}
			if r2.Total.LessThan(r.Total) {
				t.Errorf("total fell from %s to %s when usage grew", r.Total, r2.Total)
			}
		}

		weights := make([]decimal.Decimal, 1+len(data)%5)
		for i := range weights {
			weights[i] = decimal.NewFromInt(int64(i*i + len(data)%3))
		}
		weights[0] = weights[0].Add(decimal.NewFromInt(1))
		parts, err := r.Currency.Allocate(r.Total, weights)
		if err != nil {
			t.Fatalf("allocate %s: %v", r.Total, err)
		}
		if sum := decimal.Sum(decimal.Zero, parts...); !sum.Equal(r.Total) {
			t.Errorf("parts %v add up to %s, not %s", parts, sum, r.Total)
		}
	})
}

// FuzzAllocate checks largest-remainder allocation: parts add up exactly,
// each is within one minor unit of its exact share, and none has the wrong
// sign.
func FuzzAllocate(f *testing.F) {
	f.Add(int64(10000), uint8(2), []byte{1, 1, 1})
	f.Add(int64(-1), uint8(0), []byte{0, 5, 0, 7})
	f.Add(int64(999999999), uint8(9), []byte{255, 1})
	f.Fuzz(func(t *testing.T, units int64, minor uint8, ws []byte) {
		m := int32(minor % 10)
		units %= 1_000_000_000_000
		total := decimal.New(units, -m)
		weights := make([]decimal.Decimal, len(ws))
		wsum := decimal.Zero
		for i, w := range ws {
			weights[i] = decimal.New(int64(w), -int32(i%3))
			wsum = wsum.Add(weights[i])
		}
		parts, err := pricing.Allocate(total, weights, m)
		if len(ws) == 0 || wsum.IsZero() {
			if err == nil {
				t.Fatal("want an error for no or zero weights")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		unit := decimal.New(1, -m)
		sum := decimal.Zero
		for i, p := range parts {
			sum = sum.Add(p)
			exact := total.Mul(weights[i]).DivRound(wsum, 30)
			if p.Sub(exact).Abs().GreaterThanOrEqual(unit) {
				t.Errorf("part %d = %s, more than one unit from its share %s", i, p, exact)
			}
			if p.Sign()*total.Sign() < 0 {
				t.Errorf("part %d = %s has the wrong sign for total %s", i, p, total)
			}
			if !p.Truncate(m).Equal(p) {
				t.Errorf("part %d = %s is not in whole minor units", i, p)
			}
		}
		if !sum.Equal(total) {
			t.Errorf("parts add up to %s, not %s", sum, total)
		}
	})
}

// FuzzParseBook feeds arbitrary bytes to the book parser: it must not
// panic, and what it accepts must be a book Price can use.
func FuzzParseBook(f *testing.F) {
	files, _ := filepath.Glob("books/*.yaml")
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(validBook))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := pricing.ParseBook(data)
		if err != nil {
			return
		}
		var usage []pricing.Usage
		skus := b.SKUs()
		sort.Strings(skus)
		for _, sku := range skus {
			for _, m := range pricing.Meters() {
				usage = append(usage, pricing.Usage{Hour: march, SKU: sku, Meter: m, Quantity: dec("12.5")})
			}
		}
		r, err := pricing.Price(pricing.Input{Start: march, End: march.AddDate(0, 1, 0), Usage: usage, Book: b})
		if err != nil {
			t.Fatalf("an accepted book cannot price: %v", err)
		}
		checkTotal(t, r)
	})
}

// FuzzParseContract feeds arbitrary bytes to the contract parser: no panic,
// and an accepted contract validates.
func FuzzParseContract(f *testing.F) {
	f.Add([]byte(validContract))
	if data, err := os.ReadFile("contracts/acme.yaml"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := pricing.ParseContract(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("an accepted contract does not validate: %v", err)
		}
	})
}

// FuzzParseUsage feeds usage files to the parsers quote uses. The
// property: no panic; either an error, or rows that are each valid
// (known meter, non-negative quantity within bounds), one origin each,
// that read back the same when written out again in the same format.
func FuzzParseUsage(f *testing.F) {
	f.Add(false, []byte(csvHeader+"2026-03-01T00:00:00Z,H100-SXM5-80GB,gpu_hours,6\n2026-03-01T01:00:00+02:00, B200 ,energy_kwh,0.25\n"))
	f.Add(false, []byte("quantity,hour,meter,sku\n\"1.5\",2026-03-01,pcie_gib,\"a,b\"\n"))
	f.Add(false, []byte(csvHeader+"yesterday,B200,gpu_hourz,-1\n2026-03-01T00:00:00Z,B200\n"))
	f.Add(true, []byte(`[{"hour":"2026-03-01T00:00:00Z","sku":"B200","meter":"gpu_hours","quantity":1.25},`+
		`{"hour":"2026-03-01T01:00:00Z","sku":"B200","meter":"nvlink_gib","quantity":"3"}]`))
	f.Add(true, []byte(`[{"bucket":"2026-03-01T02:00:00Z","sku":"H100-SXM5-80GB","samples":3,"gpu_hours":"0.5","sm_active_hours":"0",`+
		`"memory_gib_hours":"2","energy_kwh":"0.1","pcie_gib":"0","nvlink_gib":"0","unmeasured_gpu_hours":{"pcie":"0.5"}}]`))
	f.Add(true, []byte(`[{"hour":"2026-03-01T00:00:00Z","sku":"B200","meter":"gpu_hours","quantity":1e3},{"sku":"B200"}]`))
	f.Fuzz(func(t *testing.T, isJSON bool, data []byte) {
		name := "usage.csv"
		if isJSON {
			name = "usage.json"
		}
		rows, origins, err := pricing.ParseUsageFile(name, data)
		if err != nil {
			if rows != nil || origins != nil {
				t.Fatalf("rows and origins with error %v", err)
			}
			return
		}
		if len(rows) != len(origins) {
			t.Fatalf("%d rows, %d origins", len(rows), len(origins))
		}
		asJSON := isJSON || bytes.HasPrefix(bytes.TrimSpace(data), []byte("["))
		for i, r := range rows {
			if _, err := pricing.ParseMeter(string(r.Meter)); err != nil {
				t.Errorf("row %d: %v", i, err)
			}
			if q, err := pricing.ParseQuantity(r.Quantity.String()); err != nil || !q.Equal(r.Quantity) {
				t.Errorf("row %d: quantity %s is not one ParseQuantity gives (%v)", i, r.Quantity, err)
			}
			o := origins[i]
			if asJSON && (o.Where != "row" || o.N < 0) || !asJSON && (o.Where != "line" || o.N < 2) {
				t.Errorf("row %d from %+v", i, o)
			}
			if i > 0 && o.N < origins[i-1].N {
				t.Errorf("origins out of order: %+v after %+v", o, origins[i-1])
			}
		}
		// Written out as hourly rows and read again, nothing changes.
		out := usageCSV(t, rows)
		if asJSON {
			out = usageJSONRows(t, rows)
		}
		back, _, err := pricing.ParseUsageFile(name, out)
		if err != nil {
			t.Fatalf("rows written out do not read back: %v\n%s", err, out)
		}
		if len(back) != len(rows) {
			t.Fatalf("%d rows read back as %d\n%s", len(rows), len(back), out)
		}
		for i := range rows {
			if !sameUsage(rows[i], back[i]) {
				t.Errorf("row %d %+v read back as %+v", i, rows[i], back[i])
			}
		}
	})
}

// FuzzSpreadQuantity checks the --quantity rule: a text that parses reads
// back from its String; a spread gives one row per whole hour of the
// period, on the hour, inside it, no part negative, parts at most one step
// apart, and adding up to the quantity exactly; a spread is refused only
// for a period without a whole hour or longer than two leap years.
func FuzzSpreadQuantity(f *testing.F) {
	f.Add("H100-SXM5-80GB/3g.40gb:gpu_hours=100.000000001", march.Unix(), int64(0), uint32(31*24*60), int16(0))
	f.Add("B200:energy_kwh=1", march.Unix(), int64(1), uint32(3*60), int16(330))
	f.Add("a:b:pcie_gib=0.0000000000001", march.Unix()+1800, int64(0), uint32(200), int16(-600))
	f.Add("B200:gpu_hours=7", march.Unix(), int64(0), uint32(2*366*24*60+60), int16(0))
	f.Add("B200:gpu_hours=999999999999999.999999999999999999", int64(0), int64(999999999), uint32(59), int16(0))
	f.Add("B200=1", int64(0), int64(0), uint32(0), int16(0))
	f.Fuzz(func(t *testing.T, s string, fromUnix, fromNanos int64, minutes uint32, zoneMinutes int16) {
		q, err := pricing.ParsePeriodQuantity(s)
		if err != nil {
			return
		}
		back, err := pricing.ParsePeriodQuantity(q.String())
		if err != nil || back.SKU != q.SKU || back.Meter != q.Meter || !back.Quantity.Equal(q.Quantity) {
			t.Fatalf("%q parsed as %+v reads back from %q as %+v (%v)", s, q, q.String(), back, err)
		}

		// Periods from 1970 to 2200, up to a little over two leap years.
		const maxMinutes = 2*366*24*60 + 3*60
		zone := time.FixedZone("fuzz", int(zoneMinutes%(14*60))*60)
		from := time.Unix(fromUnix%(230*365*24*3600), fromNanos%int64(time.Second)).In(zone)
		to := from.Add(time.Duration(minutes%maxMinutes) * time.Minute)
		first := from.Truncate(time.Hour)
		if first.Before(from) {
			first = first.Add(time.Hour)
		}
		hours := 0
		if to.After(first) {
			hours = int((to.Sub(first) + time.Hour - 1) / time.Hour)
		}
		tooLong := to.Sub(first) > 2*366*24*time.Hour

		rows, err := q.Spread(from, to)
		if hours == 0 || tooLong {
			if err == nil {
				t.Fatalf("spread over %s to %s (%d hours) was not refused", from, to, hours)
			}
			return
		}
		if err != nil {
			t.Fatalf("spread over %s to %s (%d hours): %v", from, to, hours, err)
		}
		if len(rows) != hours {
			t.Fatalf("%d rows for %d whole hours", len(rows), hours)
		}
		step := decimal.New(1, -max(9, -q.Quantity.Exponent()))
		sum, lo, hi := decimal.Zero, rows[0].Quantity, rows[0].Quantity
		for i, r := range rows {
			if !r.Hour.Equal(first.Add(time.Duration(i)*time.Hour)) || r.Hour.Before(from) || !r.Hour.Before(to) || !r.Hour.Equal(r.Hour.Truncate(time.Hour)) {
				t.Fatalf("row %d at %s in [%s, %s)", i, r.Hour, from, to)
			}
			if r.SKU != q.SKU || r.Meter != q.Meter || r.Quantity.Sign() < 0 {
				t.Fatalf("row %d: %+v from %+v", i, r, q)
			}
			sum = sum.Add(r.Quantity)
			lo, hi = decimal.Min(lo, r.Quantity), decimal.Max(hi, r.Quantity)
		}
		if !sum.Equal(q.Quantity) {
			t.Fatalf("rows add up to %s, want %s exactly", sum, q.Quantity)
		}
		if hi.Sub(lo).GreaterThan(step) {
			t.Fatalf("parts from %s to %s: not even (step %s)", lo, hi, step)
		}
	})
}
