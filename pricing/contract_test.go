package pricing_test

import (
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/pricing"
	"github.com/shopspring/decimal"
)

const validContract = `tenant: acme
currency: USD
start: 2026-01-01T00:00:00Z
end: 2027-01-01T00:00:00Z
minimum_commitment:
  monthly_amount: "1000"
reservations:
  - sku: H100
    gpus: 4
    rate: "1.80"
    start: 2026-02-01
    end: 2026-08-01
burst:
  - sku: H100
    above_gpus: 6
`

func TestContractValidationNamesThePlace(t *testing.T) {
	if _, err := pricing.ParseContract([]byte(validContract)); err != nil {
		t.Fatalf("the base contract must be valid: %v", err)
	}
	cases := []placeCase{
		{"contract dates out of order", "end: 2027-01-01T00:00:00Z", "end: 2025-01-01T00:00:00Z", "end", 4, "is not after start"},
		{"reservation dates out of order", "end: 2026-08-01", "end: 2026-01-15", "reservations[0].end", 12, "is not after start"},
		{"reservation starting before the contract", "start: 2026-02-01", "start: 2025-12-01", "reservations[0].start", 11, "before the contract start"},
		{"reservation ending after the contract", "end: 2026-08-01", "end: 2027-08-01", "reservations[0].end", 12, "after the contract end"},
		{"reservation with rate and monthly fee", `rate: "1.80"`, `rate: "1.80"` + "\n    monthly_fee: \"100\"", "reservations[0]", 8, "rate or monthly_fee, not both"},
		{"reservation without a price", `    rate: "1.80"` + "\n", "", "reservations[0]", 8, "needs rate"},
		{"negative reserved rate", `rate: "1.80"`, `rate: "-1.80"`, "reservations[0].rate", 10, "negative price"},
		{"reservation with gpus and instances", "gpus: 4", "gpus: 4\n    instances: 2", "reservations[0]", 8, "not both"},
		{"reservation of zero GPUs", "gpus: 4", "gpus: 0", "reservations[0]", 8, "needs gpus"},
		{"reservation without a SKU", "  - sku: H100\n    gpus", "  - gpus", "reservations[0].sku", 8, "required"},
		{"burst threshold with both units", "above_gpus: 6", "above_gpus: 6\n    above_instances: 2", "burst[0]", 14, "not both"},
		{"negative burst threshold", "above_gpus: 6", "above_gpus: -6", "burst[0].above_gpus", 15, "must not be negative"},
		{"missing tenant", "tenant: acme\n", "", "tenant", 0, "required"},
		{"currency code", "currency: USD", "currency: $", "currency", 2, "three-letter"},
		{"commitment without an amount", "minimum_commitment:\n  monthly_amount: \"1000\"", "minimum_commitment: {}", "minimum_commitment.monthly_amount", 5, "required"},
		{"negative commitment", `"1000"`, `"-1000"`, "minimum_commitment.monthly_amount", 6, "must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pricing.ParseContract([]byte(tc.apply(t, validContract)))
			tc.wantProblem(t, err)
		})
	}
}

func TestContractIsCheckedAgainstTheBook(t *testing.T) {
	book := mustBook(t, reservedBook+"  A100: {meters: {energy_kwh: {unit_price: \"1\"}}}\n")
	cases := []struct {
		name, old, new, tenant, want string
	}{
		{"reservation of a SKU the book lacks", "  - sku: H100\n    gpus", "  - sku: B200\n    gpus", "", `reservations[0].sku: unknown SKU "B200" (not in book test) (line 8)`},
		{"reservation of a SKU without a gpu_hours price", "  - sku: H100\n    gpus", "  - sku: A100\n    gpus", "", "does not price gpu_hours"},
		{"burst threshold for a SKU the book lacks", "  - sku: H100\n    above", "  - sku: B200\n    above", "", `burst[0].sku: unknown SKU "B200"`},
		{"contract in another currency", "currency: USD", "currency: EUR", "", "currency: contract is in EUR but the book is in USD"},
		{"contract of another tenant", "", "", "globex", `input is for "globex" but the contract is "acme"'s`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustContract(t, strings.Replace(validContract, tc.old, tc.new, 1))
			_, err := pricing.Price(pricing.Input{Tenant: tc.tenant, Start: march, End: march.AddDate(0, 1, 0), Contract: c, Book: book})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestContractBuiltInCode(t *testing.T) {
	// Wiring may build contracts from a database instead of YAML: the same
	// rules apply, with paths but without lines.
	rate := dec("1")
	c := &pricing.Contract{Tenant: "acme", Start: march, End: march.AddDate(0, -1, 0),
		Reservations: []pricing.Reservation{{SKU: "H100", GPUs: dec("1"), Rate: &rate}}}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "end: 2026-02-01T00:00:00Z is not after start 2026-03-01T00:00:00Z") {
		t.Errorf("got %v", err)
	}
	c.End = march.AddDate(0, 1, 0)
	huge := decimal.New(1, 40)
	c.Reservations[0].Rate = &huge
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "reservations[0].rate: 1") {
		t.Errorf("a rate of 1e40 passed validation: %v", err)
	}
	c.Reservations[0].Rate = &rate
	if err := c.Validate(); err != nil {
		t.Errorf("reservation dates default to the contract term, got %v", err)
	}
	r := mustPrice(t, pricing.Input{Contract: c, Book: mustBook(t, reservedBook)})
	wantDec(t, "fee for March", r.Total, "744.00")
}
