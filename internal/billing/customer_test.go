package billing

import (
	"strings"
	"testing"

	"github.com/shopspring/decimal"
	"go.yaml.in/yaml/v3"
)

func validCustomers() Customers {
	return Customers{
		Issuer:   Issuer{ID: "gpumeter-gmbh", Name: "GPU Cloud GmbH", NumberPrefix: "GC-"},
		Schedule: DefaultInvoiceSchedule,
		Customers: []Customer{
			{Tenant: "acme", Name: "Acme Corp", Currency: "EUR", TimeZone: "Europe/Berlin", TaxRate: decimal.RequireFromString("19"), Book: "book.yaml"},
			{Tenant: "globex", Name: "Globex", Currency: "USD", TimeZone: "America/New_York", Book: "book.yaml", Contract: "globex.yaml"},
		},
	}
}

func TestCustomersValidate(t *testing.T) {
	if err := validCustomers().Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	if err := (Customers{}).Validate(); err != nil {
		t.Fatalf("an absent billing section refused: %v", err)
	}
	cases := []struct {
		name  string
		edit  func(*Customers)
		wants []string
	}{
		{"issuer id", func(c *Customers) { c.Issuer.ID = "has space" }, []string{"billing.issuer.id"}},
		{"issuer name", func(c *Customers) { c.Issuer.Name = " " }, []string{"billing.issuer.name: required"}},
		{"reset", func(c *Customers) { c.Issuer.NumberReset = "monthly" }, []string{"number_reset \"monthly\""}},
		{"prefix", func(c *Customers) { c.Issuer.NumberPrefix = "A B" }, []string{"number_prefix"}},
		{"prefix with a path", func(c *Customers) { c.Issuer.NumberPrefix = "../x-" }, []string{"number_prefix \"../x-\""}},
		{"prefix with a slash", func(c *Customers) { c.Issuer.NumberPrefix = "GC/" }, []string{"number_prefix"}},
		{"tax rate places", func(c *Customers) { c.Customers[0].TaxRate = decimal.RequireFromString("19.00001") }, []string{"at most 4 decimal places"}},
		{"schedule", func(c *Customers) { c.Schedule = "" }, []string{"billing.schedule: required"}},
		{"duplicate tenant", func(c *Customers) { c.Customers[1].Tenant = "acme" }, []string{"customers[1] (acme).tenant: also customers[0]"}},
		{"no tenant", func(c *Customers) { c.Customers[0].Tenant = "" }, []string{"customers[0].tenant: required"}},
		{"currency", func(c *Customers) { c.Customers[0].Currency = "EURO" }, []string{"(acme).currency \"EURO\""}},
		{"tax rate", func(c *Customers) { c.Customers[0].TaxRate = decimal.RequireFromString("-1") }, []string{"(acme).tax_rate -1"}},
		{"tax rate over 100", func(c *Customers) { c.Customers[0].TaxRate = decimal.RequireFromString("100.5") }, []string{"tax_rate 100.5"}},
		{"book", func(c *Customers) { c.Customers[1].Book = "" }, []string{"(globex).book: required"}},
		{"unknown zone", func(c *Customers) { c.Customers[0].TimeZone = "Mars/Olympus" }, []string{"(acme).time_zone \"Mars/Olympus\""}},
		{"half-hour zone", func(c *Customers) { c.Customers[1].TimeZone = "Asia/Kolkata" }, []string{"(globex).time_zone", "whole UTC hour"}},
		{"every problem at once", func(c *Customers) { c.Customers[0].Name = ""; c.Customers[1].Currency = "" },
			[]string{"(acme).name: required", "(globex).currency"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validCustomers()
			c.Customers = append([]Customer(nil), c.Customers...)
			tc.edit(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestCustomersFromYAML(t *testing.T) {
	doc := `
issuer: {id: gc, name: GPU Cloud, number_reset: yearly}
customers:
  - tenant: acme
    name: Acme Corp
    address: [1 Main St, Springfield]
    currency: EUR
    time_zone: Europe/Berlin
    tax_rate: 19.5
    book: books/standard.yaml
`
	c := Customers{Schedule: DefaultInvoiceSchedule} // the config's default
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	got := c.Customers[0]
	if !got.TaxRate.Equal(decimal.RequireFromString("19.5")) || got.Address[1] != "Springfield" || c.Issuer.NumberReset != "yearly" {
		t.Fatalf("decoded %+v", c)
	}
	loc, err := got.Location()
	if err != nil || loc.String() != "Europe/Berlin" {
		t.Fatalf("location %v %v", loc, err)
	}
}
