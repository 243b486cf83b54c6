package pricing_test

import (
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
		for _, m := range []pricing.Meter{pricing.GPUHours, pricing.EnergyKWh} {
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
			Meter:    []pricing.Meter{pricing.GPUHours, pricing.EnergyKWh}[d.intn(2)],
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
