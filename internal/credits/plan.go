package credits

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/pricing"
)

// Settlement is what happens to usage no grant covers.
type Settlement string

const (
	// CreditThenInvoice invoices usage beyond the credit as usual (the
	// default).
	CreditThenInvoice Settlement = "credit_then_invoice"
	// CreditOnly is prepaid only: admission refuses new GPU work the
	// balance cannot cover, and nothing is invoiced beyond it.
	CreditOnly Settlement = "credit_only"
)

// Plan is a customer's credit configuration (billing.customers[].credits).
type Plan struct {
	// Settlement: credit_then_invoice (default) or credit_only.
	Settlement Settlement `yaml:"settlement" json:"settlement,omitempty"`
	// Recurring are allowances granted every month.
	Recurring []Recurring `yaml:"recurring" json:"recurring,omitempty"`
}

// Recurring is a monthly allowance: a grant of Amount effective each
// month (in the customer's time zone) from Start on, expiring when the
// month ends, with up to RolloverCap of what is left moving into the next
// month's grant.
type Recurring struct {
	// Series names the allowance; each month's grant has a stable id
	// derived from the tenant, the series and the month.
	Series      string           `yaml:"series" json:"series"`
	Kind        Kind             `yaml:"kind" json:"kind"`
	Amount      decimal.Decimal  `yaml:"amount" json:"amount"`
	Meter       pricing.Meter    `yaml:"meter" json:"meter,omitempty"`
	SKUClass    string           `yaml:"sku_class" json:"sku_class,omitempty"`
	Priority    int              `yaml:"priority" json:"priority,omitempty"`
	Start       string           `yaml:"start" json:"start"` // first month, YYYY-MM
	RolloverCap *decimal.Decimal `yaml:"rollover_cap" json:"rollover_cap,omitempty"`
	Note        string           `yaml:"note" json:"note,omitempty"`
}

var seriesPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Validate names every problem of the plan, each prefixed with at (the
// config path, e.g. "billing.customers[0].credits").
func (p Plan) Validate(at string) error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch p.Settlement {
	case "", CreditThenInvoice, CreditOnly:
	default:
		add("%s.settlement %q: want credit_then_invoice or credit_only", at, p.Settlement)
	}
	seen := map[string]bool{}
	for i, r := range p.Recurring {
		rat := fmt.Sprintf("%s.recurring[%d]", at, i)
		if !seriesPattern.MatchString(r.Series) {
			add("%s.series %q: 1-64 letters, digits, '.', '_' or '-'", rat, r.Series)
		} else if seen[r.Series] {
			add("%s.series %q: used twice", rat, r.Series)
		}
		seen[r.Series] = true
		if _, err := time.Parse("2006-01", r.Start); err != nil {
			add("%s.start %q: want a month, YYYY-MM", rat, r.Start)
		}
		if r.Amount.Sign() <= 0 {
			add("%s.amount %s: must be above zero", rat, r.Amount)
		}
		if r.RolloverCap != nil && r.RolloverCap.Sign() < 0 {
			add("%s.rollover_cap %s: negative", rat, r.RolloverCap)
		}
		switch r.Kind {
		case Prepaid, Promotional:
			if r.Meter != "" || r.SKUClass != "" {
				add("%s: meter and sku_class are only for included grants", rat)
			}
		case Included:
			if r.Meter.Spec().Name == "" {
				add("%s.meter %q: not a priced meter", rat, r.Meter)
			}
			if _, known := gpucatalog.LookupModel(r.SKUClass); r.SKUClass != "" && !known {
				add("%s.sku_class %q: not a GPU model of the catalogue", rat, r.SKUClass)
			}
		default:
			add("%s.kind %q: want prepaid, promotional or included", rat, r.Kind)
		}
	}
	return errors.Join(errs...)
}

// GrantsThrough are the allowance's grants of every month from its start
// to the month holding now, in loc; money grants are in currency. They
// are the same every time (ids, times and all), so writing them again
// changes nothing.
func (r Recurring) GrantsThrough(tenant, currency string, loc *time.Location, now time.Time) ([]Grant, error) {
	first, err := time.ParseInLocation("2006-01", r.Start, loc)
	if err != nil {
		return nil, fmt.Errorf("recurring %s: start %q: %w", r.Series, r.Start, err)
	}
	if r.Kind == Included {
		currency = ""
	}
	var out []Grant
	for m := first; !m.After(now); m = m.AddDate(0, 1, 0) {
		g := Grant{
			ID: recurringID(tenant, r.Series, m), Tenant: tenant, Kind: r.Kind, Amount: r.Amount, Currency: currency,
			Meter: r.Meter, SKUClass: r.SKUClass, Priority: r.Priority,
			EffectiveAt: m.UTC(), ExpiresAt: m.AddDate(0, 1, 0).UTC(), Series: r.Series, RolloverCap: r.RolloverCap,
			Source: "recurring " + r.Series + " " + m.Format("2006-01"), Note: r.Note, CreatedAt: m.UTC(),
		}
		out = append(out, g)
	}
	return out, nil
}

// recurringID is "cg_" and 12 hex digits of a hash of the allowance's
// month: stable, and not one NewID gives by chance in practice.
func recurringID(tenant, series string, month time.Time) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + series + "\x00" + month.Format("2006-01")))
	return "cg_" + hex.EncodeToString(sum[:6])
}
