// Package cli holds the command-line conventions every gpumeter command
// shares: which errors are bad input (exit status 2), how stray arguments
// and flags are refused, the -o flag, and the version.
package cli

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// ExitCode is the one place errors become exit statuses: 0 none; 2 when
// the request was refused (a UsageError from the command line, or a domain
// error in any fault category: validation, not found, conflict,
// precondition), found before anything changed; 1 when it failed while
// running (ClickHouse down, say).
func ExitCode(err error) int {
	var ue UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue), fault.IsRefusal(err):
		return 2
	}
	return 1
}

// UsageError marks bad command-line input (exit status 2).
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usage marks err as bad command-line input; nil stays nil.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return UsageError{err}
}

// Usagef is a UsageError with a formatted message.
func Usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

// FlagNamed is err, a domain config's refusal, with the field names in its
// message written as the flags that set them (names: field → flag), for a
// reader of the command line. It stays what err is (errors.Is, the fault
// category).
func FlagNamed(err error, names map[string]string) error {
	msg := []rune(err.Error())
	var b strings.Builder
	for i := 0; i < len(msg); {
		j := i
		for j < len(msg) && (unicode.IsLower(msg[j]) || unicode.IsDigit(msg[j]) || msg[j] == '_' || msg[j] == '.') {
			j++
		}
		if j == i {
			b.WriteRune(msg[i])
			i++
			continue
		}
		word := strings.TrimRight(string(msg[i:j]), ".")
		if flag, ok := names[word]; ok && (i == 0 || msg[i-1] != '-') {
			b.WriteString(flag + string(msg[i+len([]rune(word)):j]))
		} else {
			b.WriteString(string(msg[i:j]))
		}
		i = j
	}
	return renamed{b.String(), err}
}

type renamed struct {
	msg string
	err error
}

func (r renamed) Error() string { return r.msg }
func (r renamed) Unwrap() error { return r.err }
