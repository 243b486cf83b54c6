package pricing

import (
	"testing"

	"github.com/shopspring/decimal"
)

// qsum must equal plain decimal addition whatever it is fed: values that
// fit, that overflow int64, that need rescaling, and zeros.
func TestQsumIsExact(t *testing.T) {
	cases := []struct {
		name   string
		values []string
	}{
		{"small values at one exponent", []string{"1.5", "2.25", "0.125"}},
		{"a finer exponent rescales the running sum", []string{"1", "0.000000001", "3.5"}},
		{"a coarser exponent rescales the addend", []string{"0.000000001", "7", "1e3"}},
		{"18-place values overflow int64 and spill", []string{"0.857142857142857142", "0.857142857142857142", "0.857142857142857142", "0.857142857142857142", "0.857142857142857142", "0.857142857142857142", "0.857142857142857142", "0.857142857142857142", "0.857142857142857142", "0.857142857142857142", "0.857142857142857142", "0.857142857142857142"}},
		{"values too wide for int64 go to the decimal part", []string{"123456789012345.123456789012345678", "1", "0.5"}},
		{"an exponent gap beyond int64 spills", []string{"999999999999999", "0.000000000000000001", "999999999999999"}},
		{"zeros change nothing", []string{"0", "0.000", "5", "0e3"}},
		{"negative values cancel", []string{"-2.5", "2.5", "-0.000000001"}},
		{"whole hours at 18 places (19 digits) fit and overflow", []string{"1.000000000000000000", "1.000000000000000000", "1.000000000000000000",
			"1.000000000000000000", "1.000000000000000000", "1.000000000000000000", "1.000000000000000000", "1.000000000000000000",
			"1.000000000000000000", "1.000000000000000000", "0.5"}},
		{"19 digits up to and past the int64 bound", []string{"9.223372036854775807", "9.223372036854775808", "-1.000000000000000000", "9999999999999999999"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s qsum
			want := decimal.Zero
			for _, v := range tc.values {
				d := decimal.RequireFromString(v)
				s.add(d)
				want = want.Add(d)
			}
			if got := s.value(); !got.Equal(want) {
				t.Errorf("qsum = %s, want %s", got, want)
			}
			if s.sign() != want.Sign() {
				t.Errorf("sign = %d, want %d", s.sign(), want.Sign())
			}
			var merged qsum
			merged.addSum(s)
			merged.addSum(s)
			if got := merged.value(); !got.Equal(want.Add(want)) {
				t.Errorf("sum of sums = %s, want %s", got, want.Add(want))
			}
		})
	}
}

// A 19-digit coefficient is an int64 up to math.MaxInt64 and a decimal
// past it (or when negative, or at an exponent the table does not hold).
func TestFitsInt64At19Digits(t *testing.T) {
	for v, want := range map[string]bool{
		"1.000000000000000000": true, "9.223372036854775807": true, "9223372036854775807": true, "0.5": true,
		"9.223372036854775808": false, "9999999999999999999": false, "-1.000000000000000000": false,
		"1.0000000000000000000": false, "92233720368547758070": false,
	} {
		d := decimal.RequireFromString(v)
		c, e, ok := fitsInt64(d)
		if ok != want || (ok && !decimal.New(c, e).Equal(d)) {
			t.Errorf("%s: fits %v (%d×10^%d), want %v", v, ok, c, e, want)
		}
	}
}

func TestSplitMatchesDecimals(t *testing.T) {
	// The integer path of split and its decimal fallback must agree.
	cases := []struct{ u, capacity, limit string }{
		{"6", "4", "4"},
		{"2", "4", "4"},
		{"6", "4", "5"},
		{"1.285714285714285713", "0.857142857142857143", "0.857142857142857143"},
		{"123456789012345.123456789012345678", "4", "8"}, // too wide: decimal path
	}
	for _, tc := range cases {
		t.Run(tc.u+" against "+tc.capacity+"/"+tc.limit, func(t *testing.T) {
			var u, c, l qsum
			u.add(decimal.RequireFromString(tc.u))
			c.add(decimal.RequireFromString(tc.capacity))
			l.add(decimal.RequireFromString(tc.limit))
			var a acc
			split(&a, u, c, l)
			ud, cd, ld := u.value(), c.value(), l.value()
			covered := decimal.Min(ud, cd)
			onDemand := decimal.Min(ud, ld).Sub(covered)
			burst := decimal.Max(ud.Sub(ld), decimal.Zero)
			if !a.covered.value().Equal(covered) || !a.onDemand.value().Equal(onDemand) || !a.burst.value().Equal(burst) {
				t.Errorf("covered %s, on demand %s, burst %s; want %s, %s, %s",
					a.covered.value(), a.onDemand.value(), a.burst.value(), covered, onDemand, burst)
			}
		})
	}
}
