package billing

import (
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/fault"
)

func TestAPIRequestsAreValidated(t *testing.T) {
	tenant := auth.Scope{Kind: auth.KindTenant, Name: "acme"}
	for _, tc := range []struct {
		name string
		err  error
		want string // "" for valid
	}{
		{"list, all periods", InvoiceListRequest{Scope: tenant, Limit: 101}.Validate(), ""},
		{"list, a month", InvoiceListRequest{Scope: tenant, Period: "2026-11"}.Validate(), ""},
		{"list, not a month", InvoiceListRequest{Scope: tenant, Period: "2026-13"}.Validate(), "period: "},
		{"list, negative limit", InvoiceListRequest{Scope: tenant, Limit: -1}.Validate(), "limit -1"},
		{"one, by number", InvoiceRequest{Scope: tenant, Ref: "GC-000001"}.Validate(), ""},
		{"one, no reference", InvoiceRequest{Scope: tenant}.Validate(), "invoice: give an id"},
		{"one, overlong reference", InvoiceRequest{Scope: tenant, Ref: strings.Repeat("a", 201)}.Validate(), "invoice: give an id"},
		{"chargeback, default idle", ScopedChargebackRequest{Scope: tenant, Month: "2026-11"}.Validate(), ""},
		{"chargeback, by use", ScopedChargebackRequest{Scope: tenant, Month: "2026-11", Idle: "by_use"}.Validate(), ""},
		{"chargeback, no month", ScopedChargebackRequest{Scope: tenant}.Validate(), "month: "},
		{"chargeback, unknown idle, cut", ScopedChargebackRequest{Month: "2026-11", Idle: strings.Repeat("x", 40)}.Validate(),
			`idle "` + strings.Repeat("x", 32) + `": want own_row`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.want == "" && tc.err != nil:
				t.Fatalf("refused: %v", tc.err)
			case tc.want == "":
			case !fault.IsValidation(tc.err) || !strings.Contains(tc.err.Error(), tc.want):
				t.Fatalf("err %v, want a validation error with %q", tc.err, tc.want)
			}
		})
	}
}
