package store

import (
	"reflect"
	"testing"

	"github.com/gpumeter/gpumeter/internal/auth"
)

// TestInvoiceSQLLeavesDraftsToOperators pins the API's invoice reads: the
// scope's predicate, and the draft filter unless the query asks for
// drafts (operators), for the list and for one invoice by id or number.
func TestInvoiceSQLLeavesDraftsToOperators(t *testing.T) {
	admin, dept := auth.Scope{Kind: auth.KindAdmin}, auth.Scope{Kind: auth.KindDepartment, Name: "research"}
	tenant := auth.Scope{Kind: auth.KindTenant, Name: "acme"}
	const list = "SELECT revision, document FROM invoices FINAL WHERE issuer = ?"
	const one = "SELECT revision, document FROM invoices FINAL WHERE issuer = ? AND (invoice_id = ? OR (number = ? AND number != ''))"
	for _, tc := range []struct {
		name     string
		build    func() (string, []any)
		want     string
		wantArgs []any
	}{
		{"a customer's list has no drafts",
			func() (string, []any) { return InvoiceQuery{Issuer: "gc", Scope: tenant}.toSQL() },
			list + " AND status != ? AND tenant = ? ORDER BY invoice_id LIMIT 1001", []any{"gc", "draft", "acme"}},
		{"a customer's page of a period has no drafts",
			func() (string, []any) {
				return InvoiceQuery{Issuer: "gc", Scope: tenant, Period: "2026-11", After: "acme/2026-10/1", Limit: 11}.toSQL()
			},
			list + " AND status != ? AND tenant = ? AND period_label = ? AND invoice_id > ? ORDER BY invoice_id LIMIT 11",
			[]any{"gc", "draft", "acme", "2026-11", "acme/2026-10/1"}},
		{"an operator's list has drafts",
			func() (string, []any) { return InvoiceQuery{Issuer: "gc", Scope: dept, Drafts: true}.toSQL() },
			list + " AND department = ? ORDER BY invoice_id LIMIT 1001", []any{"gc", "research"}},
		{"an admin's list has drafts",
			func() (string, []any) { return InvoiceQuery{Issuer: "gc", Scope: admin, Drafts: true}.toSQL() },
			list + " ORDER BY invoice_id LIMIT 1001", []any{"gc"}},
		{"a customer's invoice is never a draft",
			func() (string, []any) { return invoiceForSQL("gc", tenant, "acme/2026-11/1", false) },
			one + " AND status != ? AND tenant = ?", []any{"gc", "acme/2026-11/1", "acme/2026-11/1", "draft", "acme"}},
		{"an operator's invoice may be a draft",
			func() (string, []any) { return invoiceForSQL("gc", dept, "acme/2026-11/1", true) },
			one + " AND department = ?", []any{"gc", "acme/2026-11/1", "acme/2026-11/1", "research"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sql, args := tc.build()
			if sql != tc.want {
				t.Errorf("sql\n %s\nwant\n %s", sql, tc.want)
			}
			if !reflect.DeepEqual(args, tc.wantArgs) {
				t.Errorf("args %v, want %v", args, tc.wantArgs)
			}
		})
	}
}
