package quota

import (
	"fmt"
	"sort"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// model is the name the evaluator counts a GPU model under: the
// catalogue's key however it is written (case, NVIDIA's device names),
// else the spelling of a quota rule or of the fleet's usage that differs
// from it in case only, else the sanitized name. known is false for a
// model that is in none of them.
func (e *Evaluator) model(name string) (model string, known bool) {
	m, inCatalogue := gpucatalog.CanonicalModel(name)
	if inCatalogue {
		return m, true
	}
	up := strings.ToUpper(m)
	if r, ok := e.ruleModels[up]; ok {
		return r, true
	}
	if f, ok := e.fleetModels[up]; ok {
		return f, true
	}
	return m, false
}

// canonical is s with every model key as model names it, so that usage
// under any spelling counts against the rules of its model. It first
// records the fleet's models outside the catalogue and the rules, which
// requests may then name: of spellings that differ in case only, the
// first in sort order.
func (e *Evaluator) canonical(s Snapshot) Snapshot {
	fleet := map[string]string{}
	for _, t := range s.Tenants {
		for _, byModel := range []map[string]decimal.Decimal{t.Concurrent, t.GPUHours} {
			for k := range byModel {
				m, inCatalogue := gpucatalog.CanonicalModel(k)
				up := strings.ToUpper(m)
				if _, ruled := e.ruleModels[up]; inCatalogue || ruled {
					continue
				}
				if f, ok := fleet[up]; !ok || m < f {
					fleet[up] = m
				}
			}
		}
	}
	e.fleetModels = fleet
	rename := func(in map[string]decimal.Decimal) map[string]decimal.Decimal {
		if in == nil {
			return nil
		}
		out := make(map[string]decimal.Decimal, len(in))
		for k, v := range in {
			m, _ := e.model(k)
			out[m] = out[m].Add(v)
		}
		return out
	}
	out := Snapshot{At: s.At, Tenants: make(map[string]TenantState, len(s.Tenants))}
	for k, t := range s.Tenants {
		t.Concurrent = rename(t.Concurrent)
		t.GPUHours = rename(t.GPUHours)
		out.Tenants[k] = t
	}
	return out
}

// unknownModel is the error for a request naming a model the evaluator
// does not know: it would match no model rule, so it is refused rather
// than admitted free of them. The hint lists the GPU catalogue only: the
// models other tenants' rules and usage name are theirs to know.
func (e *Evaluator) unknownModel(name string) error {
	names := gpucatalog.Models()
	sort.Strings(names)
	const most = 20
	more := ""
	if len(names) > most {
		more = fmt.Sprintf(" and %d more", len(names)-most)
		names = names[:most]
	}
	return fmt.Errorf("%w: gpu_model %q: unknown GPU model (the catalogue's: %s%s; or a model a quota rule names)", ErrInvalid, truncate(name, 64), strings.Join(names, ", "), more)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
