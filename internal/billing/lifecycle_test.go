package billing

import (
	"fmt"
	"testing"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// Every refusal of billing is in one category.
func TestErrorCategories(t *testing.T) {
	is := map[string]func(error) bool{"validation": fault.IsValidation, "not found": fault.IsNotFound,
		"conflict": fault.IsConflict, "precondition": fault.IsPrecondition}
	for _, tc := range []struct {
		name, category string
		err            error
	}{
		{"unknown invoice", "not found", fmt.Errorf("invoice %q: %w", "GC-9", ErrNotFound)},
		{"unknown tenant of a run", "not found", fmt.Errorf("run: %w", &UnknownTenantError{Tenant: "nobody"})},
		{"bad period of a run", "validation", RunRequest{Period: "2026-13"}.Validate()},
		{"lease held", "conflict", fmt.Errorf("lease x: %w", ErrLeaseHeld)},
		{"void without a reason", "validation", fault.Validationf("reason: required")},
		{"void twice", "conflict", fault.Conflictf("invoice %s is already void", "GC-1")},
		{"finalize before the rollup", "precondition", fault.Preconditionf("draft %s cannot be finalized yet", "d")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, f := range is {
				if got := f(tc.err); got != (name == tc.category) {
					t.Errorf("%v: %s = %t, want category %s", tc.err, name, got, tc.category)
				}
			}
		})
	}
	if err := (&UnknownTenantError{Tenant: "nobody"}).Error(); err != `tenant "nobody": not a customer in the config's billing.customers` {
		t.Errorf("unknown tenant: %q names no input field", err)
	}
	if err := (RunRequest{Period: "2026-13"}).Validate().Error(); err != `period "2026-13": want YYYY-MM, e.g. 2026-11` {
		t.Errorf("bad period: %q", err)
	}
}
