package store

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// TestScopeWhereIsOneRuleForEveryRead: each kind of scope becomes one
// predicate on the row's own columns, and every read that serves the API
// (usage from raw and hourly rows, invoices, holdings, hourly series,
// anomalies) carries exactly that predicate and its argument, so no
// endpoint scopes a key differently.
func TestScopeWhereIsOneRuleForEveryRead(t *testing.T) {
	from := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	to := from.Add(24 * time.Hour)
	for _, tc := range []struct {
		name  string
		scope auth.Scope
		conds []string
		args  []any
	}{
		{"no scope (the CLI) reads all", auth.Scope{}, nil, nil},
		{"admin reads all", auth.Scope{Kind: auth.KindAdmin}, nil, nil},
		{"tenant key: its tenant's rows", auth.Scope{Kind: auth.KindTenant, Name: "acme"}, []string{"tenant = ?"}, []any{"acme"}},
		{"department key: the rows labelled with it", auth.Scope{Kind: auth.KindDepartment, Name: "research"}, []string{"department = ?"}, []any{"research"}},
		{"an unknown kind reads nothing", auth.Scope{Kind: "team", Name: "x"}, []string{"0 = 1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conds, args := scopeWhere(tc.scope)
			if !reflect.DeepEqual(conds, tc.conds) || !reflect.DeepEqual(args, tc.args) {
				t.Fatalf("scopeWhere: %q %v, want %q %v", conds, args, tc.conds, tc.args)
			}
			if tc.scope.Kind == "team" {
				return
			}
			reads := map[string]func() (string, []any){
				"usage raw":    usageQuery{From: from, To: to, GroupBy: []usage.Dimension{usage.DimTenant}, Scope: tc.scope}.toSQL,
				"usage hourly": usageQuery{From: from, To: to, GroupBy: []usage.Dimension{usage.DimTenant}, Source: usage.SourceHourly, Scope: tc.scope}.toSQL,
				"invoices":     InvoiceQuery{Issuer: "gc", Scope: tc.scope}.toSQL,
				"invoice":      func() (string, []any) { return invoiceForSQL("gc", tc.scope, "GC-1", false) },
				"holdings":     InsightsQuery{From: from, To: to, Scope: tc.scope}.holdingsSQL,
				"hourly":       InsightsQuery{From: from, To: to, Scope: tc.scope}.hourlyGPUSQL,
			}
			if tc.scope.Kind != auth.KindDepartment {
				reads["anomalies"] = AnomalyQuery{From: from, To: to, Scope: tc.scope}.toSQL
			}
			for name, build := range reads {
				sql, args := build()
				for _, c := range []string{"tenant = ?", "department = ?"} {
					want := len(tc.conds) > 0 && tc.conds[0] == c
					if got := strings.Contains(sql, " AND "+c); got != want {
						t.Errorf("%s: predicate %q present %v, want %v: %s", name, c, got, want, sql)
					}
				}
				if len(tc.args) > 0 && !slices.Contains(args, tc.args[0]) {
					t.Errorf("%s: arguments %v lack the scope's %v", name, args, tc.args[0])
				}
			}
		})
	}
}

// TestReadsWithoutTheScopesLabelAreRefused: stored anomalies carry no
// department and fleet demand is nobody's, so a scope those rows cannot be
// held to is refused (ErrUnscopable) rather than answered wider.
func TestReadsWithoutTheScopesLabelAreRefused(t *testing.T) {
	from := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	to := from.Add(24 * time.Hour)
	dept := auth.Scope{Kind: auth.KindDepartment, Name: "research"}
	tenant := auth.Scope{Kind: auth.KindTenant, Name: "acme"}
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
	}{
		{"anomalies, department key", AnomalyQuery{From: from, To: to, Scope: dept}.Validate(), true},
		{"anomalies, tenant key", AnomalyQuery{From: from, To: to, Scope: tenant}.Validate(), false},
		{"anomalies, admin key", AnomalyQuery{From: from, To: to, Scope: auth.Scope{Kind: auth.KindAdmin}}.Validate(), false},
		{"demand, department key", InsightsQuery{From: from, To: to, Scope: dept}.validateDemand(), true},
		{"demand, tenant key", InsightsQuery{From: from, To: to, Scope: tenant}.validateDemand(), true},
		{"demand of a tenant", InsightsQuery{From: from, To: to, Tenant: "acme"}.validateDemand(), true},
		{"demand, admin key", InsightsQuery{From: from, To: to, Scope: auth.Scope{Kind: auth.KindAdmin}}.validateDemand(), false},
		{"demand, no scope", InsightsQuery{From: from, To: to}.validateDemand(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errors.Is(tc.err, ErrUnscopable); got != tc.refused {
				t.Errorf("refused %v (%v), want %v", got, tc.err, tc.refused)
			}
			if !tc.refused && tc.err != nil {
				t.Errorf("unexpected error %v", tc.err)
			}
		})
	}
	if err := (InsightsQuery{From: from, To: to, Scope: auth.Scope{Kind: auth.KindDepartment}}).ValidateHoldings(); err == nil {
		t.Error("a department scope without a name validates: it would read every department")
	}
}
