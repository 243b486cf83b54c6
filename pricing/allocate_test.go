package pricing_test

import (
	"testing"

	"github.com/gpumeter/gpumeter/pricing"
	"github.com/shopspring/decimal"
)

func decs(ss ...string) []decimal.Decimal {
	out := make([]decimal.Decimal, len(ss))
	for i, s := range ss {
		out[i] = dec(s)
	}
	return out
}

func TestAllocate(t *testing.T) {
	cases := []struct {
		name    string
		total   string
		weights []string
		minor   int32
		want    []string
		err     string // the refusal, for cases that are refused
	}{
		{"equal thirds: the leftover cent goes to the first part", "100.00", []string{"1", "1", "1"}, 2, []string{"33.34", "33.33", "33.33"}, ""},
		{"1:2:3: the leftover cent goes to the largest remainder", "100.00", []string{"1", "2", "3"}, 2, []string{"16.67", "33.33", "50.00"}, ""},
		{"a zero weight gets nothing", "0.01", []string{"0", "1"}, 2, []string{"0.00", "0.01"}, ""},
		{"ties in the remainder go to the lower index", "0.03", []string{"0.5", "0.25", "0.25"}, 2, []string{"0.01", "0.01", "0.01"}, ""},
		{"a negative total splits like its absolute value", "-100.00", []string{"1", "1", "1"}, 2, []string{"-33.34", "-33.33", "-33.33"}, ""},
		{"a currency without minor units splits in whole units", "1000", []string{"1", "1", "1"}, 0, []string{"334", "333", "333"}, ""},
		{"a single part takes everything", "12.34", []string{"0.001"}, 2, []string{"12.34"}, ""},
		{"an exact split has no leftover", "90.00", []string{"2", "1"}, 2, []string{"60.00", "30.00"}, ""},
		{"refused: no weights", "1.00", nil, 2, nil, "no weights"},
		{"refused: a negative weight", "1.00", []string{"1", "-1"}, 2, nil, "weight 1 is negative"},
		{"refused: weights adding up to zero", "1.00", []string{"0", "0"}, 2, nil, "add up to zero"},
		{"refused: a total finer than the minor unit", "1.005", []string{"1"}, 2, nil, "more than 2 decimal places"},
		{"refused: minor units out of range", "1", []string{"1"}, -1, nil, "minor units -1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pricing.Allocate(dec(tc.total), decs(tc.weights...), tc.minor)
			if wantsErr(t, err, tc.err) {
				return
			}
			sum := decimal.Zero
			for i, g := range got {
				if !g.Equal(dec(tc.want[i])) {
					t.Errorf("part %d = %s, want %s", i, g, tc.want[i])
				}
				sum = sum.Add(g)
			}
			if !sum.Equal(dec(tc.total)) {
				t.Errorf("parts add up to %s, not %s", sum, tc.total)
			}
		})
	}
}

func TestCurrencyAllocateUsesMinorUnits(t *testing.T) {
	c := pricing.Currency{Code: "JPY", MinorUnits: 0, Rounding: pricing.HalfAwayFromZero}
	got, err := c.Allocate(dec("10"), decs("1", "1", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].Equal(dec("4")) || !got[1].Equal(dec("3")) || !got[2].Equal(dec("3")) {
		t.Errorf("got %v, want 4 3 3", got)
	}
}
