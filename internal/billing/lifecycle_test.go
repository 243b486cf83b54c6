package billing

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// Every refusal of billing is in one category, and the lifecycle's keep
// ErrInvalidRequest for the callers that match it.
func TestErrorCategories(t *testing.T) {
	is := map[string]func(error) bool{"validation": fault.IsValidation, "not found": fault.IsNotFound,
		"conflict": fault.IsConflict, "precondition": fault.IsPrecondition}
	for _, tc := range []struct {
		name, category string
		err            error
		invalidRequest bool // also wraps ErrInvalidRequest
	}{
		{"unknown invoice", "not found", fmt.Errorf("invoice %q: %w", "GC-9", ErrNotFound), false},
		{"unknown tenant of a run", "not found", fmt.Errorf("run: %w", &UnknownTenantError{Tenant: "nobody"}), false},
		{"bad period of a run", "validation", RunRequest{Period: "2026-13"}.Validate(), false},
		{"lease held", "conflict", fmt.Errorf("lease x: %w", ErrLeaseHeld), false},
		{"void without a reason", "validation", refuse(fault.Validation, "reason: required"), true},
		{"void twice", "conflict", refuse(fault.Conflict, "invoice %s is already void", "GC-1"), true},
		{"finalize before the rollup", "precondition", refuse(fault.Precondition, "draft %s cannot be finalized yet", "d"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, f := range is {
				if got := f(tc.err); got != (name == tc.category) {
					t.Errorf("%v: %s = %t, want category %s", tc.err, name, got, tc.category)
				}
			}
			if got := errors.Is(tc.err, ErrInvalidRequest); got != tc.invalidRequest {
				t.Errorf("%v: ErrInvalidRequest %t, want %t", tc.err, got, tc.invalidRequest)
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
