// Package fault holds the categories every domain error belongs to:
// validation, not found, conflict and precondition. A domain wraps its
// errors into one of them (its sentinels and types keep their names, for
// errors.Is and errors.As); the HTTP package maps the categories to
// statuses and the CLI to exit codes, each in one place; an error in no
// category is the callee's own failure (a 500, exit 1). Internal takes an
// error out of its category where a service, not its caller, fed the
// input. It is a leaf: the standard library only, so pricing may import
// it.
package fault

import (
	"errors"
	"fmt"
)

// The categories. Match them with errors.Is, or the IsXxx helpers.
var (
	// ErrValidation is input that is wrong in itself: a malformed field,
	// a value out of range, problems found in a file.
	ErrValidation = errors.New("validation")
	// ErrNotFound is something the input names that does not exist (or is
	// outside the caller's scope, which is the same to the caller).
	ErrNotFound = errors.New("not found")
	// ErrConflict is a request that clashes with the current state: what
	// it would do is done already, or another writer holds it.
	ErrConflict = errors.New("conflict")
	// ErrPrecondition is a well-formed request the current state does not
	// allow yet or any more (usage not rolled up, a draft out of date).
	ErrPrecondition = errors.New("precondition failed")
)

// categorized is an error put into a category: its message is the
// cause's, errors.Is and errors.As reach the cause, and errors.Is also
// matches the category.
type categorized struct {
	category error
	err      error
}

func (e *categorized) Error() string        { return e.err.Error() }
func (e *categorized) Unwrap() error        { return e.err }
func (e *categorized) Is(target error) bool { return target == e.category }

func wrap(category, err error) error {
	if err == nil {
		return nil
	}
	return &categorized{category: category, err: err}
}

// Validation puts err into the validation category; nil stays nil, so
// Validation(errors.Join(problems...)) is nil when nothing is wrong.
func Validation(err error) error { return wrap(ErrValidation, err) }

// NotFound puts err into the not-found category; nil stays nil.
func NotFound(err error) error { return wrap(ErrNotFound, err) }

// Conflict puts err into the conflict category; nil stays nil.
func Conflict(err error) error { return wrap(ErrConflict, err) }

// Precondition puts err into the precondition category; nil stays nil.
func Precondition(err error) error { return wrap(ErrPrecondition, err) }

// Validationf is Validation(fmt.Errorf(format, a...)); %w keeps its cause.
func Validationf(format string, a ...any) error { return Validation(fmt.Errorf(format, a...)) }

// NotFoundf is NotFound(fmt.Errorf(format, a...)).
func NotFoundf(format string, a ...any) error { return NotFound(fmt.Errorf(format, a...)) }

// Conflictf is Conflict(fmt.Errorf(format, a...)).
func Conflictf(format string, a ...any) error { return Conflict(fmt.Errorf(format, a...)) }

// Preconditionf is Precondition(fmt.Errorf(format, a...)).
func Preconditionf(format string, a ...any) error { return Precondition(fmt.Errorf(format, a...)) }

// IsValidation reports whether err is in the validation category.
func IsValidation(err error) bool { return errors.Is(err, ErrValidation) }

// IsNotFound reports whether err is in the not-found category.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsConflict reports whether err is in the conflict category.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsPrecondition reports whether err is in the precondition category.
func IsPrecondition(err error) bool { return errors.Is(err, ErrPrecondition) }

// Internal is err as the callee's own failure, whatever category it had
// further down: a service that handed pricing a configured book or stored
// usage passes pricing's validation error on as its own fault, not its
// caller's (a 500, never a 400 naming what the caller cannot see). The
// message is kept; the chain is cut, so errors.Is and errors.As find
// nothing of err, no category included. Use it only where nothing above
// needs the cause: a context's cancellation would be cut as well.
func Internal(err error) error {
	if err == nil {
		return nil
	}
	return internal{err.Error()}
}

type internal struct{ msg string }

func (e internal) Error() string { return e.msg }

// IsRefusal reports whether err is in any category: the request was
// refused (bad input, nothing by that name, a conflict, a precondition),
// as opposed to failing while it ran (a server down, a disk full).
func IsRefusal(err error) bool {
	return IsValidation(err) || IsNotFound(err) || IsConflict(err) || IsPrecondition(err)
}
