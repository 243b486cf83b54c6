package pricing_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/pricing"
	"github.com/shopspring/decimal"
)

// validBook is the base the validation cases break one thing at a time.
const validBook = `version: test
currency:
  code: USD
  rounding:
    minor_units: 2
    mode: half_away_from_zero
skus:
  H100:
    weight: 1
    meters:
      gpu_hours:
        mode: graduated
        tiers:
          - up_to: 5
            unit_price: "7"
          - up_to: 10
            unit_price: "6.50"
          - unit_price: "6"
        burst:
          multiplier: "1.5"
`

// placeCase breaks one thing in a valid document (a book, a contract) and
// names the problem validation must report for it.
type placeCase struct {
	name     string
	old, new string // replace old with new in the valid document
	wantPath string
	wantLine int
	wantMsg  string
}

// apply is valid with the case's replacement made.
func (c placeCase) apply(t *testing.T, valid string) string {
	t.Helper()
	src := strings.Replace(valid, c.old, c.new, 1)
	if src == valid {
		t.Fatalf("case does not change the document: %q not found", c.old)
	}
	return src
}

// wantProblem wants err to be a *ValidationError with the case's problem,
// on the case's line.
func (c placeCase) wantProblem(t *testing.T, err error) {
	t.Helper()
	var ve *pricing.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want a *ValidationError, got %v", err)
	}
	for _, p := range ve.Problems {
		if p.Path == c.wantPath && strings.Contains(p.Message, c.wantMsg) {
			if p.Line != c.wantLine {
				t.Errorf("%s: line %d, want %d", p.Path, p.Line, c.wantLine)
			}
			return
		}
	}
	t.Errorf("got %v\nwant a problem at %s saying %q", err, c.wantPath, c.wantMsg)
}

func TestBookValidationNamesThePlace(t *testing.T) {
	if _, err := pricing.ParseBook([]byte(validBook)); err != nil {
		t.Fatalf("the base book must be valid: %v", err)
	}
	cases := []placeCase{
		{"overlapping tiers: up_to not above the previous tier's", "up_to: 10", "up_to: 5", "skus.H100.meters.gpu_hours.tiers[1].up_to", 16, "not above the previous tier's up_to 5"},
		{"unordered tiers: up_to going down", "          - unit_price: \"6\"", "          - up_to: 8\n            unit_price: \"5.5\"\n          - unit_price: \"6\"", "skus.H100.meters.gpu_hours.tiers[2].up_to", 18, "not above the previous tier's up_to 10"},
		{"last tier must be open", "          - unit_price: \"6\"", "          - up_to: 20\n            unit_price: \"6\"", "skus.H100.meters.gpu_hours.tiers[2].up_to", 18, "last tier must be open"},
		{"only the last tier may be open", "          - up_to: 10\n", "          - ", "skus.H100.meters.gpu_hours.tiers[1].up_to", 16, "only the last tier is open"},
		{"negative unit price", `unit_price: "6.50"`, `unit_price: "-6.50"`, "skus.H100.meters.gpu_hours.tiers[1].unit_price", 17, "negative price -6.5"},
		{"negative flat fee", `unit_price: "6.50"`, `unit_price: "6.50"` + "\n            flat_fee: \"-1\"", "skus.H100.meters.gpu_hours.tiers[1].flat_fee", 18, "negative flat fee"},
		{"negative burst multiplier", `multiplier: "1.5"`, `multiplier: "-1.5"`, "skus.H100.meters.gpu_hours.burst.multiplier", 20, "must not be negative"},
		{"first up_to must be positive", "up_to: 5", "up_to: 0", "skus.H100.meters.gpu_hours.tiers[0].up_to", 14, "must be positive"},
		{"unknown meter", "      gpu_hours:", "      gpu_minutes:", "skus.H100.meters.gpu_minutes", 11, `unknown meter "gpu_minutes"`},
		{"currency without rounding rule", "  rounding:\n    minor_units: 2\n    mode: half_away_from_zero\n", "", "currency.rounding", 2, "needs a rounding rule"},
		{"rounding without minor units", "    minor_units: 2\n", "", "currency.rounding.minor_units", 4, "required"},
		{"unknown rounding mode", "mode: half_away_from_zero", "mode: half_up", "currency.rounding.mode", 6, `unknown rounding mode "half_up"`},
		{"minor units beyond storage precision", "minor_units: 2", "minor_units: 12", "currency.rounding.minor_units", 5, "between 0 and 9"},
		{"currency code", "code: USD", "code: dollars", "currency.code", 3, "three-letter"},
		// Before the fix any three capital letters passed.
		{"currency code not in ISO 4217", "code: USD", "code: XYZ", "currency.code", 3, `"XYZ" is not an ISO 4217 currency code`},
		{"missing version", "version: test\n", "", "version", 0, "required"},
		{"tiers without mode", "        mode: graduated\n", "", "skus.H100.meters.gpu_hours.mode", 11, "required with tiers"},
		{"unknown tier mode", "mode: graduated", "mode: tiered", "skus.H100.meters.gpu_hours.mode", 12, `unknown mode "tiered"`},
		{"unit price and tiers together", "        mode: graduated\n", "        unit_price: \"1\"\n", "skus.H100.meters.gpu_hours", 11, "not both"},
		{"burst on a meter other than gpu_hours", "      gpu_hours:", "      energy_kwh:", "skus.H100.meters.energy_kwh.burst", 19, "burst applies to gpu_hours only"},
		{"burst with neither multiplier nor price", `multiplier: "1.5"`, `{}`, "skus.H100.meters.gpu_hours.burst", 19, "needs multiplier or unit_price"},
		{"non-positive weight", "weight: 1", "weight: 0", "skus.H100.weight", 9, "must be positive"},
		{"SKU names with dashes are quoted in the path", "  H100:", "  H100-SXM5-80GB:", `skus["H100-SXM5-80GB"].meters.gpu_hours.tiers[1].unit_price`, 17, "negative price"},
		{"price changes out of order", "        burst:\n          multiplier: \"1.5\"\n",
			"        changes:\n          - {from: 2026-03-15, mode: volume, tiers: [{unit_price: \"1\"}]}\n          - {from: 2026-03-01, unit_price: \"2\"}\n",
			"skus.H100.meters.gpu_hours.changes[1].from", 21, "not after the previous change"},
		{"price change without a date", "        burst:\n          multiplier: \"1.5\"\n",
			"        changes:\n          - {unit_price: \"2\"}\n", "skus.H100.meters.gpu_hours.changes[0].from", 20, "required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.apply(t, validBook)
			if tc.name == "SKU names with dashes are quoted in the path" {
				src = strings.Replace(src, `unit_price: "6.50"`, `unit_price: "-6.50"`, 1)
			}
			_, err := pricing.ParseBook([]byte(src))
			tc.wantProblem(t, err)
		})
	}
}

func TestBookSyntaxErrorsGiveTheLine(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"a typo in a field name", strings.Replace(validBook, "unit_price: \"6\"", "unit_prise: \"6\"", 1), "line 18: field unit_prise not found"},
		{"a price that is not a decimal", strings.Replace(validBook, `"6.50"`, `"6,50"`, 1), `line 17: "6,50" is not a decimal number`},
		{"a price with more places than stored", strings.Replace(validBook, `"6.50"`, `"0.0000000000000000001"`, 1), "line 17: 0.0000000000000000001 has more than 18 decimal places"},
		{"an empty file", "", "empty document"},
		{"two documents", validBook + "---\n" + validBook, "more than one document"},
		{"not YAML", "version: [", "parse yaml"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pricing.ParseBook([]byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestBookValidationReportsEveryProblem(t *testing.T) {
	src := strings.NewReplacer(`"7"`, `"-7"`, "gpu_hours:", "gpu_seconds:", "code: USD", "code: usd").Replace(validBook)
	_, err := pricing.ParseBook([]byte(src))
	var ve *pricing.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 2 {
		t.Fatalf("want 2 problems (currency code, unknown meter; the meter's prices are not checked), got %v", err)
	}
	if ve.Problems[0].Path != "currency.code" || ve.Problems[1].Path != "skus.H100.meters.gpu_seconds" {
		t.Errorf("want problems in file order, got %v", err)
	}
}

// migWeights is a stand-in for the fleet's MIG profile table.
func migWeights(sku string) (decimal.Decimal, bool) {
	table := map[string]string{
		"H100-SXM5-80GB/3g.40gb":  "3/7",
		"H100-SXM5-80GB/1g.10gb":  "1/7",
		"H200-SXM5-141GB/1g.18gb": "1/7",
		"A100-SXM4-40GB/3g.20gb":  "3/7",
		"A100-SXM4-40GB/1g.5gb":   "1/7",
	}
	f, ok := table[sku]
	if !ok {
		return decimal.Decimal{}, false
	}
	num, den, _ := strings.Cut(f, "/")
	return decimal.RequireFromString(num).Div(decimal.RequireFromString(den)), true
}

func TestWeights(t *testing.T) {
	const src = `
version: test
currency: {code: USD, rounding: {minor_units: 2}}
skus:
  H100-SXM5-80GB: {weight: 1}
  H100-SXM5-80GB/3g.40gb: {weight: "0.428571429"}
  H100-SXM5-80GB/1g.10gb: {}
`
	b := mustBook(t, src)
	t.Run("a weight equal at 9 places agrees with the table", func(t *testing.T) {
		if err := b.CheckWeights(migWeights); err != nil {
			t.Error(err)
		}
	})
	t.Run("a weight that disagrees names its place in the book", func(t *testing.T) {
		bad := mustBook(t, strings.Replace(src, `"0.428571429"`, `"0.5"`, 1))
		err := bad.CheckWeights(migWeights)
		if err == nil || !strings.Contains(err.Error(), `skus["H100-SXM5-80GB/3g.40gb"].weight: book says 0.5`) || !strings.Contains(err.Error(), "(line 6)") {
			t.Errorf("got %v", err)
		}
		if _, err := bad.WithWeights(migWeights); err == nil {
			t.Error("WithWeights accepted a book that disagrees with the table")
		}
	})
	t.Run("a missing weight is filled from the table, the original book unchanged", func(t *testing.T) {
		if _, ok := b.Weight("H100-SXM5-80GB/1g.10gb"); ok {
			t.Fatal("the book gave no weight, but Weight reports one")
		}
		wb, err := b.WithWeights(migWeights)
		if err != nil {
			t.Fatal(err)
		}
		w, ok := wb.Weight("H100-SXM5-80GB/1g.10gb")
		if !ok || !w.Equal(decimal.NewFromInt(1).Div(decimal.NewFromInt(7))) {
			t.Errorf("weight = %s, %v; want 1/7", w, ok)
		}
		if _, ok := b.Weight("H100-SXM5-80GB/1g.10gb"); ok {
			t.Error("WithWeights changed the receiver")
		}
		if w, _ := wb.Weight("H100-SXM5-80GB"); !w.Equal(decimal.NewFromInt(1)) {
			t.Errorf("a SKU the table does not know keeps the book's weight, got %s", w)
		}
	})
	t.Run("instances need a known weight", func(t *testing.T) {
		book := mustBook(t, strings.Replace(src, "H100-SXM5-80GB/1g.10gb: {}", "H100-SXM5-80GB/1g.10gb: {meters: {gpu_hours: {unit_price: \"1\"}}}", 1))
		c := mustContract(t, "tenant: a\nreservations: [{sku: H100-SXM5-80GB/1g.10gb, instances: 7, rate: \"1\", start: 2026-01-01, end: 2027-01-01}]\n")
		_, err := pricing.Price(pricing.Input{Start: march, End: march.AddDate(0, 1, 0), Contract: c, Book: book})
		if err == nil || !strings.Contains(err.Error(), "reservations[0].instances: the weight of") {
			t.Fatalf("got %v", err)
		}
		wb, err := book.WithWeights(migWeights)
		if err != nil {
			t.Fatal(err)
		}
		r := mustPrice(t, pricing.Input{Contract: c, Book: wb})
		// 7 × the table's 1/7 (0.1428571428571429 at 16 places) for 744 hours.
		w, _ := migWeights("H100-SXM5-80GB/1g.10gb")
		wantDec(t, "7 instances of 1/7 reserved for March", r.Reservations[0].ReservedGPUHours, w.Mul(decimal.NewFromInt(7*744)).String())
	})
}

func TestInstancesOfAFractionalWeightConvertExactly(t *testing.T) {
	book := mustBook(t, `
version: test
currency: {code: USD, rounding: {minor_units: 2}}
skus:
  H100-SXM5-80GB/1g.10gb: {weight: 1/7, meters: {gpu_hours: {unit_price: "1"}}}
`)
	c := mustContract(t, "tenant: a\nreservations: [{sku: H100-SXM5-80GB/1g.10gb, instances: 7, rate: \"1\", start: 2026-01-01, end: 2027-01-01}]\n")
	r := mustPrice(t, pricing.Input{Contract: c, Book: book})
	wantDec(t, "7 instances of 1/7 for March's 744 hours", r.Reservations[0].ReservedGPUHours, "744")
	wantDec(t, "fee", r.Total, "744.00")
}

func TestExampleBooksAreValid(t *testing.T) {
	files, err := filepath.Glob("books/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("want example books in books/, got %v, %v", files, err)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			b, err := pricing.ParseBook(data)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.WithWeights(migWeights); err != nil {
				t.Errorf("weights disagree with the MIG table: %v", err)
			}
		})
	}
	data, err := os.ReadFile("contracts/acme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pricing.ParseContract(data); err != nil {
		t.Errorf("contracts/acme.yaml: %v", err)
	}
}
