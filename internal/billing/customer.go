package billing

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/pricing"
)

// Issuer is who sends the invoices. Numbers are sequential per issuer.
type Issuer struct {
	ID      string   `yaml:"id"` // stable key of the number sequence
	Name    string   `yaml:"name"`
	Address []string `yaml:"address"`
	TaxID   string   `yaml:"tax_id"`
	// NumberPrefix starts every invoice number ("GM-" gives GM-000001).
	NumberPrefix string `yaml:"number_prefix"`
	// NumberReset restarts the sequence: never (the default), or yearly,
	// when the prefix gains the year of issue (GM-2026-000001).
	NumberReset string `yaml:"number_reset"`
	// PaymentTerms are every customer's unless it has its own.
	PaymentTerms PaymentTerms `yaml:"payment_terms"`
}

// Customer is one tenant that is invoiced, with what its invoice needs.
type Customer struct {
	Tenant     string   `yaml:"tenant"`
	Department string   `yaml:"department"`
	Name       string   `yaml:"name"`
	Address    []string `yaml:"address"`
	TaxID      string   `yaml:"tax_id"`
	Currency   string   `yaml:"currency"`
	TimeZone   string   `yaml:"time_zone"`
	// TaxRate is a plain percentage added as one tax line ("19" is 19 %):
	// no tax engine.
	TaxRate  decimal.Decimal `yaml:"tax_rate"`
	Book     string          `yaml:"book"`     // price book file
	Contract string          `yaml:"contract"` // contract file; empty: on demand
	// PaymentTerms override the issuer's, field by field; nil: the issuer's.
	PaymentTerms *PaymentTerms `yaml:"payment_terms"`
	// Credits are the customer's settlement mode and recurring allowances.
	Credits credits.Plan `yaml:"credits"`
}

// Customers is the billing section of the config.
type Customers struct {
	Issuer    Issuer     `yaml:"issuer"`
	Customers []Customer `yaml:"customers"`
	// Schedule is the cron spec of the invoice run in `gpumeter serve`.
	// Each run invoices the previous UTC month for every customer whose
	// month has closed; runs are idempotent, so the default tries hourly
	// on the 1st and 2nd, which covers every zone's month end plus the
	// rollup grace period.
	Schedule string `yaml:"schedule"`
}

// DefaultInvoiceSchedule runs hourly on the first two days of a month.
const DefaultInvoiceSchedule = "0 * 1,2 * *"

var (
	idPattern     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	prefixPattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,15}$`)
)

// RelativeTo resolves relative book and contract paths against dir (the
// config file's directory), so a config works from any working directory.
func (cs Customers) RelativeTo(dir string) Customers {
	if len(cs.Customers) == 0 {
		return cs
	}
	out := cs
	out.Customers = make([]Customer, len(cs.Customers))
	for i, c := range cs.Customers {
		for _, p := range []*string{&c.Book, &c.Contract} {
			if *p != "" && !filepath.IsAbs(*p) {
				*p = filepath.Join(dir, *p)
			}
		}
		out.Customers[i] = c
	}
	return out
}

// Location is the customer's billing time zone (UTC when empty).
func (c Customer) Location() (*time.Location, error) {
	if c.TimeZone == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(c.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("time_zone %q: not an IANA time zone", c.TimeZone)
	}
	return loc, nil
}

// CreditCustomers are the customers as the credit domain knows them.
func (cs Customers) CreditCustomers() ([]credits.Customer, error) {
	out := make([]credits.Customer, 0, len(cs.Customers))
	for _, c := range cs.Customers {
		loc, err := c.Location()
		if err != nil {
			return nil, fmt.Errorf("customer %s: %w", c.Tenant, err)
		}
		out = append(out, credits.Customer{Tenant: c.Tenant, Currency: c.Currency, Location: loc, TaxRate: c.TaxRate, Plan: c.Credits})
	}
	return out, nil
}

// Validate names the field path of every problem. A time zone must put
// every month boundary on a whole UTC hour (see MonthlyPeriod); the years
// checked are the ones invoices can name.
func (cs Customers) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	is := cs.Issuer
	if len(cs.Customers) > 0 || is.ID != "" || is.Name != "" {
		if !idPattern.MatchString(is.ID) {
			add("billing.issuer.id %q: 1-64 letters, digits, '.', '_' or '-'", is.ID)
		}
		if strings.TrimSpace(is.Name) == "" {
			add("billing.issuer.name: required")
		}
		if is.NumberPrefix != "" && !prefixPattern.MatchString(is.NumberPrefix) {
			add("billing.issuer.number_prefix %q: at most 16 letters, digits, '.', '_' or '-', not starting with '.' (numbers name files)", is.NumberPrefix)
		}
		switch is.NumberReset {
		case "", "never", "yearly":
		default:
			add("billing.issuer.number_reset %q: want never or yearly", is.NumberReset)
		}
		if err := is.PaymentTerms.validate("billing.issuer.payment_terms"); err != nil {
			errs = append(errs, err)
		}
		if strings.TrimSpace(cs.Schedule) == "" {
			add("billing.schedule: required (a cron spec, e.g. %q)", DefaultInvoiceSchedule)
		}
	}
	seen := map[string]int{}
	for i, c := range cs.Customers {
		at := fmt.Sprintf("billing.customers[%d]", i)
		if c.PaymentTerms != nil {
			if err := c.PaymentTerms.validate(at + ".payment_terms"); err != nil {
				errs = append(errs, err)
			}
		}
		if c.Tenant == "" {
			add("%s.tenant: required", at)
		} else {
			at = fmt.Sprintf("billing.customers[%d] (%s)", i, c.Tenant)
			if j, dup := seen[c.Tenant]; dup {
				add("%s.tenant: also customers[%d]", at, j)
			}
			seen[c.Tenant] = i
		}
		if strings.TrimSpace(c.Name) == "" {
			add("%s.name: required", at)
		}
		if !pricing.IsCurrencyCode(c.Currency) {
			add("%s.currency %q: not an ISO 4217 code", at, c.Currency)
		}
		if c.TaxRate.IsNegative() || c.TaxRate.GreaterThan(decimal.NewFromInt(100)) {
			add("%s.tax_rate %s: want a percentage from 0 to 100", at, c.TaxRate)
		} else if c.TaxRate.Exponent() < -4 && !c.TaxRate.Equal(c.TaxRate.Round(4)) {
			// At most 4 places keep the tax on a subtotal in minor units
			// exact at the 9 places amounts are stored at, so it is rounded
			// once, to the minor unit.
			add("%s.tax_rate %s: at most 4 decimal places", at, c.TaxRate)
		}
		if c.Book == "" {
			add("%s.book: required (a price book file)", at)
		}
		if err := c.Credits.Validate(at + ".credits"); err != nil {
			errs = append(errs, err)
		}
		loc, err := c.Location()
		if err != nil {
			add("%s.%w", at, err)
			continue
		}
		if err := checkMonthBoundaries(loc); err != nil {
			add("%s.time_zone: %w", at, err)
		}
	}
	return errors.Join(errs...)
}

// checkMonthBoundaries refuses a zone whose month starts are not on whole
// UTC hours in any month from last year to ten years ahead.
func checkMonthBoundaries(loc *time.Location) error {
	from := time.Now().Year() - 1
	for y := from; y <= from+11; y++ {
		for m := time.January; m <= time.December; m++ {
			if _, err := MonthlyPeriod(fmt.Sprintf("%04d-%02d", y, m), loc); err != nil {
				return err
			}
		}
	}
	return nil
}
