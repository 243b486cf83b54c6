package server

import (
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/fault"
)

// A grant's body from outside never panics the decoder or the checks:
// it is refused as a validation error (a 400), or it decodes into a grant
// that Validate accepts, with an amount above zero.
func FuzzGrantBody(f *testing.F) {
	for _, seed := range []string{
		`{"tenant":"acme","kind":"prepaid","amount":"100.50"}`,
		`{"tenant":"acme","kind":"included","amount":"10","meter":"gpu_hours","sku_class":"H100-SXM5-80GB","expires_at":"2027-01-01T00:00:00Z"}`,
		`{"tenant":"acme","kind":"prepaid","amount":"-1"}`,
		`{"tenant":"acme","kind":"prepaid","amount":1}`,
		`{"tenant":"acme","colour":"red"}`,
		`{"tenant":`,
		`[]`,
		``,
		`{"tenant":"acme","kind":"promotional","amount":"1e400","effective_at":"9999-01-01T00:00:00Z"}`,
	} {
		f.Add(seed)
	}
	customers := []credits.Customer{{Tenant: "acme", Currency: "USD"}}
	f.Fuzz(func(t *testing.T, body string) {
		var b grantRequest
		err := decodeStrict(strings.NewReader(body), &b, grantFields)
		var g credits.Grant
		if err == nil {
			g, err = b.grant()
		}
		if err == nil {
			err = g.Validate(customers)
		}
		if err != nil {
			if !fault.IsValidation(err) {
				t.Fatalf("%q: %v is not a validation error", body, err)
			}
			return
		}
		if g.Amount.Cmp(decimal.Zero) <= 0 || g.Tenant != "acme" {
			t.Fatalf("%q: accepted %+v", body, g)
		}
	})
}
