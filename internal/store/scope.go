package store

import (
	"errors"

	"github.com/gpumeter/gpumeter/internal/auth"
)

// ErrUnscopable is a read the key's scope cannot be applied to, refused
// rather than answered wider: stored anomalies carry no department label,
// and fleet demand belongs to no tenant or department.
var ErrUnscopable = errors.New("the read cannot be kept to the key's scope")

// scopeWhere is the one rule by which every read that serves the API keeps
// to what a key may see, as predicates on the row's own tenant and
// department columns: a tenant key reads its tenant's rows, a department
// key the rows labelled with its department (a sample carries the label
// attribution gave it, an invoice its customer's), an admin key (or no
// scope: the operator's CLI) everything. A tenant whose rows carry several
// labels is seen by each of those departments with those rows only. Usage,
// invoices and the insights reads all build their predicate here, so
// /v1/usage and /v1/insights cannot disagree about who sees what.
//
// Callers validate the scope first; a kind this does not know reads
// nothing rather than everything.
func scopeWhere(sc auth.Scope) ([]string, []any) {
	switch sc.Kind {
	case "", auth.KindAdmin:
		return nil, nil
	case auth.KindTenant:
		return []string{"tenant = ?"}, []any{sc.Name}
	case auth.KindDepartment:
		return []string{"department = ?"}, []any{sc.Name}
	}
	return []string{"0 = 1"}, nil
}
