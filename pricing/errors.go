package pricing

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// Problem is one thing wrong with a book, contract or input, at Path (for
// example `skus["H100-SXM5-80GB"].meters.gpu_hours.tiers[2]`; indexes count
// from 0). Line is the line in the YAML file, 0 when the value was not read
// from a file.
type Problem struct {
	Path    string
	Line    int
	Message string
}

func (p Problem) String() string {
	s := p.Message
	if p.Path != "" {
		s = p.Path + ": " + s
	}
	if p.Line > 0 {
		s += " (line " + strconv.Itoa(p.Line) + ")"
	}
	return s
}

// ValidationError carries every problem found in one book, contract or
// input, so a user fixes a file in one pass. Match it with errors.As for
// its problems; errors.Is(err, fault.ErrValidation) holds for it.
type ValidationError struct {
	What string // "book", "contract" or "input"
	// Problems are the problems listed, then, when Dropped > 0, one
	// without a path reading "and N more problems" (NewValidationError
	// adds it): Listed and Dropped give them apart.
	Problems []Problem
	Dropped  int // problems found past those listed
}

// NewValidationError is the error of what with the problems found, the
// first of them listed and dropped more counted.
func NewValidationError(what string, listed []Problem, dropped int) *ValidationError {
	out := append([]Problem(nil), listed...)
	if dropped > 0 {
		out = append(out, Problem{Message: fmt.Sprintf("and %d more problems", dropped)})
	}
	return &ValidationError{What: what, Problems: out, Dropped: dropped}
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "invalid " + e.What + ": " + strings.Join(parts, "; ")
}

// Is puts every ValidationError in the validation category.
func (e *ValidationError) Is(target error) bool { return target == fault.ErrValidation }

// Listed is the problems found, without the count of the dropped ones.
func (e *ValidationError) Listed() []Problem {
	if e.Dropped > 0 && len(e.Problems) > 0 && e.Problems[len(e.Problems)-1].Path == "" {
		return e.Problems[:len(e.Problems)-1]
	}
	return e.Problems
}

// maxProblems caps what one error carries: a usage file with 20,000 bad
// rows needs the first few reported, not all of them.
const maxProblems = 50

// problems collects validation problems while walking a value.
type problems struct {
	list    []Problem
	dropped int
}

func (ps *problems) add(p path, format string, args ...any) {
	if len(ps.list) >= maxProblems {
		ps.dropped++
		return
	}
	ps.list = append(ps.list, Problem{Path: string(p), Message: fmt.Sprintf(format, args...)})
}

// err returns nil when nothing was found; lines, when given, attach file
// lines and order problems as they appear in the file.
func (ps *problems) err(what string, lines lineIndex) error {
	if len(ps.list) == 0 {
		return nil
	}
	out := append([]Problem(nil), ps.list...)
	if lines != nil {
		for i := range out {
			out[i].Line = lines.lookup(out[i].Path)
		}
		sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	}
	return NewValidationError(what, out, ps.dropped)
}

// path names a place in a YAML document: keys that are plain identifiers
// join with dots, anything else (SKUs hold '-', '/' and '.') is quoted in
// brackets so the path stays unambiguous.
type path string

func (p path) key(k string) path {
	if isIdent(k) {
		if p == "" {
			return path(k)
		}
		return p + "." + path(k)
	}
	return p + path("["+strconv.Quote(k)+"]")
}

func (p path) index(i int) path { return p + path("["+strconv.Itoa(i)+"]") }

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
