package store

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
)

// TestInsightsSQL pins each insights read: FINAL, the period, idle and
// unattributed time left out, and the tenant predicate exactly when a
// tenant is asked for.
func TestInsightsSQL(t *testing.T) {
	from := time.Date(2026, 11, 2, 1, 0, 0, 0, time.FixedZone("CET", 3600))
	to := from.Add(time.Hour)
	u := collectors.UnattributedTenant
	adminKey, tenantKey := auth.Scope{Kind: auth.KindAdmin}, auth.Scope{Kind: auth.KindTenant, Name: "acme"}
	deptKey := auth.Scope{Kind: auth.KindDepartment, Name: "research"}
	for _, tc := range []struct {
		name  string
		build func(InsightsQuery) (string, []any)
		q     InsightsQuery
		args  []any
	}{
		{"holdings", InsightsQuery.holdingsSQL, InsightsQuery{From: from, To: to}, []any{from.UTC(), to.UTC(), u}},
		{"holdings of a tenant", InsightsQuery.holdingsSQL, InsightsQuery{From: from, To: to, Tenant: "acme"}, []any{from.UTC(), to.UTC(), u, "acme"}},
		{"hourly", InsightsQuery.hourlyGPUSQL, InsightsQuery{From: from, To: to}, []any{from.UTC(), to.UTC(), u}},
		{"hourly of a tenant", InsightsQuery.hourlyGPUSQL, InsightsQuery{From: from, To: to, Tenant: "acme"}, []any{from.UTC(), to.UTC(), u, "acme"}},
		{"demand", InsightsQuery.demandSQL, InsightsQuery{From: from, To: to}, []any{from.UTC(), to.UTC()}},
		{"holdings of a tenant key", InsightsQuery.holdingsSQL, InsightsQuery{From: from, To: to, Scope: tenantKey}, []any{from.UTC(), to.UTC(), u, "acme"}},
		{"holdings of a department key", InsightsQuery.holdingsSQL, InsightsQuery{From: from, To: to, Scope: deptKey}, []any{from.UTC(), to.UTC(), u, "research"}},
		{"holdings of a tenant within a department key", InsightsQuery.holdingsSQL, InsightsQuery{From: from, To: to, Tenant: "acme", Scope: deptKey}, []any{from.UTC(), to.UTC(), u, "acme", "research"}},
		{"holdings of an admin key", InsightsQuery.holdingsSQL, InsightsQuery{From: from, To: to, Scope: adminKey}, []any{from.UTC(), to.UTC(), u}},
		{"hourly of a department key", InsightsQuery.hourlyGPUSQL, InsightsQuery{From: from, To: to, Scope: deptKey}, []any{from.UTC(), to.UTC(), u, "research"}},
		{"hourly of a tenant key", InsightsQuery.hourlyGPUSQL, InsightsQuery{From: from, To: to, Scope: tenantKey}, []any{from.UTC(), to.UTC(), u, "acme"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sql, args := tc.build(tc.q)
			if !strings.Contains(sql, " FINAL WHERE ") || !strings.Contains(sql, "tenant != ''") || !strings.Contains(sql, " ORDER BY ") {
				t.Errorf("sql lacks FINAL, the idle filter or an order: %s", sql)
			}
			wantTenant := tc.q.Tenant != "" || tc.q.Scope.Kind == auth.KindTenant
			if got := strings.Contains(sql, "AND tenant = ?"); got != wantTenant {
				t.Errorf("tenant predicate present %v, want %v: %s", got, wantTenant, sql)
			}
			wantDept := tc.q.Scope.Kind == auth.KindDepartment
			if got := strings.Contains(sql, "AND department = ?"); got != wantDept {
				t.Errorf("department predicate present %v, want %v: %s", got, wantDept, sql)
			}
			if !reflect.DeepEqual(args, tc.args) {
				t.Errorf("args %v, want %v", args, tc.args)
			}
		})
	}
	sql, _ := InsightsQuery{From: from, To: to}.holdingsSQL()
	if want := " GROUP BY gpu_uuid, mig_uuid, tenant, start ORDER BY gpu_uuid, mig_uuid, tenant, start"; !strings.HasSuffix(sql, want) {
		t.Errorf("holdings must come in key order for streaming: %s", sql)
	}
	sql, args := AnomalyQuery{From: from, To: to, Tenant: "acme"}.toSQL()
	if !strings.Contains(sql, "insight_anomalies FINAL WHERE start >= ? AND start < ? AND tenant = ?") || !reflect.DeepEqual(args, []any{from.UTC(), to.UTC(), "acme"}) {
		t.Errorf("anomalies: %s %v", sql, args)
	}
	sql, args = AnomalyQuery{From: from, To: to, Scope: tenantKey}.toSQL()
	if !strings.Contains(sql, "insight_anomalies FINAL WHERE start >= ? AND start < ? AND tenant = ?") || !reflect.DeepEqual(args, []any{from.UTC(), to.UTC(), "acme"}) {
		t.Errorf("anomalies of a tenant key: %s %v", sql, args)
	}
}
