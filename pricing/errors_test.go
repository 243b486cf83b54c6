package pricing_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/pricing"
)

// Every input pricing refuses is in the validation category, so the API
// and the CLI map it without knowing pricing's types.
func TestRefusalsAreValidation(t *testing.T) {
	b := bookWith(t, `unit_price: "2"`)
	end := march.AddDate(0, 1, 0)
	for _, tc := range []struct {
		name string
		run  func() error
	}{
		{"book that is not YAML", func() error { _, err := pricing.ParseBook([]byte("{")); return err }},
		{"book with problems", func() error {
			_, err := pricing.ParseBook([]byte(strings.Replace(validBook, "code: USD", "code: usd", 1)))
			return err
		}},
		{"contract that is not YAML", func() error { _, err := pricing.ParseContract([]byte("[")); return err }},
		{"unknown meter", func() error { _, err := pricing.ParseMeter("gpu_minutes"); return err }},
		{"quantity that is not a number", func() error { _, err := pricing.ParseQuantity("1,5"); return err }},
		{"negative quantity", func() error { _, err := pricing.ParseQuantity("-1"); return err }},
		{"time", func() error { _, err := pricing.ParseTime("March"); return err }},
		{"quantity without a meter", func() error { _, err := pricing.ParsePeriodQuantity("H100=1"); return err }},
		{"period without a whole hour", func() error {
			q, _ := pricing.ParsePeriodQuantity("H100:gpu_hours=1")
			_, err := q.Spread(march.Add(10*time.Minute), march.Add(50*time.Minute))
			return err
		}},
		{"usage JSON that is not an array", func() error { _, _, err := pricing.ParseUsageFile("u.json", []byte(`{}`)); return err }},
		{"usage CSV without a column", func() error { _, _, err := pricing.ParseUsageFile("u.csv", []byte("hour,sku\n")); return err }},
		{"usage CSV rows", func() error {
			_, _, err := pricing.ParseUsageFile("u.csv", []byte("hour,sku,meter,quantity\nx,H100,gpu_hours,1\n"))
			return err
		}},
		{"engine input", func() error {
			_, err := pricing.Price(pricing.Input{Book: b, Start: march, End: end, Usage: []pricing.Usage{{Hour: march, SKU: "B200", Meter: pricing.GPUHours}}})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if !fault.IsValidation(err) {
				t.Fatalf("%v: not a validation error", err)
			}
			if fault.IsNotFound(err) || fault.IsConflict(err) || fault.IsPrecondition(err) {
				t.Fatalf("%v: in a second category", err)
			}
		})
	}
}

// A ValidationError that dropped problems says how many, apart from the
// problems it lists; its text still ends with the count.
func TestValidationErrorCountsDropped(t *testing.T) {
	b := bookWith(t, `unit_price: "2"`)
	var usage []pricing.Usage
	for i := range 60 {
		usage = append(usage, pricing.Usage{Hour: march, SKU: fmt.Sprintf("B%d", i), Meter: pricing.GPUHours})
	}
	_, err := pricing.Price(pricing.Input{Book: b, Start: march, End: march.AddDate(0, 1, 0), Usage: usage})
	var ve *pricing.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want a *ValidationError, got %v", err)
	}
	if ve.Dropped != 10 || len(ve.Listed()) != 50 || len(ve.Problems) != 51 {
		t.Fatalf("dropped %d, listed %d, problems %d; want 10, 50, 51", ve.Dropped, len(ve.Listed()), len(ve.Problems))
	}
	for _, p := range ve.Listed() {
		if !strings.HasPrefix(p.Path, "usage[") {
			t.Fatalf("listed %q: the count is not a problem", p)
		}
	}
	if !strings.HasSuffix(err.Error(), "; and 10 more problems") {
		t.Errorf("%v: want the count at the end", err)
	}

	few := pricing.NewValidationError("input", []pricing.Problem{{Path: "a", Message: "x"}, {Message: "no path"}}, 0)
	if few.Dropped != 0 || len(few.Listed()) != 2 || few.Error() != "invalid input: a: x; no path" {
		t.Errorf("nothing dropped: %+v, listed %v", few, few.Listed())
	}
}
