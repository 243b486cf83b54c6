package fault_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// pathErr is a typed cause, to prove errors.As reaches through a category.
type pathErr struct{ path string }

func (e *pathErr) Error() string { return "bad path " + e.path }

func TestCategories(t *testing.T) {
	cause := errors.New("period: not a month")
	typed := &pathErr{"a.csv"}
	sentinel := fault.NotFound(errors.New("no such invoice"))
	for _, tc := range []struct {
		name     string
		err      error
		category error
		msg      string
		cause    error // errors.Is must still find it; nil: none
	}{
		{"validation keeps the cause", fault.Validation(cause), fault.ErrValidation, "period: not a month", cause},
		{"validationf with %w", fault.Validationf("run: %w", cause), fault.ErrValidation, "run: period: not a month", cause},
		{"not found", fault.NotFound(fs.ErrNotExist), fault.ErrNotFound, "file does not exist", fs.ErrNotExist},
		{"not foundf", fault.NotFoundf("tenant %q: not found", "acme"), fault.ErrNotFound, `tenant "acme": not found`, nil},
		{"conflict", fault.Conflict(cause), fault.ErrConflict, "period: not a month", cause},
		{"conflictf", fault.Conflictf("invoice %s is already void", "GC-1"), fault.ErrConflict, "invoice GC-1 is already void", nil},
		{"precondition", fault.Precondition(cause), fault.ErrPrecondition, "period: not a month", cause},
		{"preconditionf", fault.Preconditionf("draft %s: %w", "d1", cause), fault.ErrPrecondition, "draft d1: period: not a month", cause},
		{"wrapped further with context", fmt.Errorf("finalize: %w", fault.Conflict(cause)), fault.ErrConflict, "finalize: period: not a month", cause},
		{"a categorized sentinel, wrapped", fmt.Errorf("invoice %q: %w", "x", sentinel), fault.ErrNotFound, `invoice "x": no such invoice`, sentinel},
		{"joined", errors.Join(errors.New("other"), fault.Validation(cause)), fault.ErrValidation, "other\nperiod: not a month", cause},
		{"typed cause", fault.Validation(typed), fault.ErrValidation, "bad path a.csv", typed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.msg {
				t.Errorf("message %q, want %q", got, tc.msg)
			}
			if tc.cause != nil && !errors.Is(tc.err, tc.cause) {
				t.Errorf("errors.Is(err, cause) = false: the cause is lost")
			}
			is := map[error]func(error) bool{
				fault.ErrValidation:   fault.IsValidation,
				fault.ErrNotFound:     fault.IsNotFound,
				fault.ErrConflict:     fault.IsConflict,
				fault.ErrPrecondition: fault.IsPrecondition,
			}
			for cat, isFn := range is {
				want := cat == tc.category
				if got := isFn(tc.err); got != want {
					t.Errorf("Is %v = %t, want %t", cat, got, want)
				}
				if got := errors.Is(tc.err, cat); got != want {
					t.Errorf("errors.Is(err, %v) = %t, want %t", cat, got, want)
				}
			}
		})
	}
}

func TestTypedCauseStaysReachable(t *testing.T) {
	err := fmt.Errorf("import: %w", fault.Validation(&pathErr{"b.csv"}))
	var pe *pathErr
	if !errors.As(err, &pe) || pe.path != "b.csv" {
		t.Fatalf("errors.As through a category: %v, %+v", err, pe)
	}
}

func TestNilStaysNil(t *testing.T) {
	for name, wrap := range map[string]func(error) error{
		"validation": fault.Validation, "not found": fault.NotFound, "conflict": fault.Conflict, "precondition": fault.Precondition,
	} {
		if err := wrap(nil); err != nil {
			t.Errorf("%s(nil) = %v, want nil", name, err)
		}
		if err := wrap(errors.Join()); err != nil {
			t.Errorf("%s(errors.Join()) = %v, want nil", name, err)
		}
	}
}

func TestUncategorized(t *testing.T) {
	for _, err := range []error{nil, errors.New("disk full"), fmt.Errorf("read: %w", fs.ErrNotExist)} {
		if fault.IsValidation(err) || fault.IsNotFound(err) || fault.IsConflict(err) || fault.IsPrecondition(err) || fault.IsRefusal(err) {
			t.Errorf("%v: in a category, want none", err)
		}
	}
	for _, err := range []error{fault.Validationf("a"), fault.NotFoundf("b"), fault.Conflictf("c"), fmt.Errorf("d: %w", fault.Preconditionf("d"))} {
		if !fault.IsRefusal(err) {
			t.Errorf("%v: not a refusal", err)
		}
	}
}

func TestInternalCutsTheCategory(t *testing.T) {
	cause := fault.Validationf("usage[3].sku: unknown SKU %q", "B200")
	err := fmt.Errorf("quota spend of acme: %w", fault.Internal(fmt.Errorf("price: %w", cause)))
	if fault.IsValidation(err) || errors.Is(err, cause) {
		t.Fatalf("%v: still in its category", err)
	}
	if got, want := err.Error(), `quota spend of acme: price: usage[3].sku: unknown SKU "B200"`; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if fault.Internal(nil) != nil {
		t.Fatal("Internal(nil) is not nil")
	}
}
