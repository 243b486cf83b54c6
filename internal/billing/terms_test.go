package billing

import (
	"strings"
	"testing"
	"time"
)

func TestPaymentTerms(t *testing.T) {
	days := func(n int) *int { return &n }
	for _, tc := range []struct {
		name     string
		issuer   PaymentTerms
		customer *PaymentTerms
		days     int
		note     string
	}{
		{"none: 30 days", PaymentTerms{}, nil, DefaultPaymentDays, ""},
		{"the issuer's", PaymentTerms{Days: days(14), Note: "IBAN X"}, nil, 14, "IBAN X"},
		{"on receipt", PaymentTerms{Days: days(0)}, nil, 0, ""},
		{"the customer's days, the issuer's note", PaymentTerms{Days: days(14), Note: "IBAN X"}, &PaymentTerms{Days: days(45)}, 45, "IBAN X"},
		{"the customer's note, the issuer's days", PaymentTerms{Days: days(14), Note: "IBAN X"}, &PaymentTerms{Note: "PO 7"}, 14, "PO 7"},
		{"the customer's days over the default", PaymentTerms{}, &PaymentTerms{Days: days(0)}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, n := Issuer{PaymentTerms: tc.issuer}.termsOf(Customer{PaymentTerms: tc.customer})
			if d != tc.days || n != tc.note {
				t.Errorf("%d days, note %q; want %d, %q", d, n, tc.days, tc.note)
			}
		})
	}
}

// The due date is a calendar day in the invoice's zone: an invoice issued
// late on 31 March UTC is issued on 1 April in Berlin.
func TestDueDate(t *testing.T) {
	for _, tc := range []struct {
		issued time.Time
		days   int
		zone   string
		want   string
	}{
		{time.Date(2026, 3, 31, 23, 30, 0, 0, time.UTC), 30, "Europe/Berlin", "2026-05-01"},
		{time.Date(2026, 3, 31, 23, 30, 0, 0, time.UTC), 30, "UTC", "2026-04-30"},
		{time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC), 0, "America/New_York", "2026-02-28"},
		{time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), 30, "America/New_York", "2026-03-31"}, // across the DST change
	} {
		if got := dueDate(tc.issued, tc.days, tc.zone); got != tc.want {
			t.Errorf("dueDate(%s, %d, %s) = %s, want %s", tc.issued, tc.days, tc.zone, got, tc.want)
		}
	}
}

func TestPaymentTermsAreValidated(t *testing.T) {
	days := func(n int) *int { return &n }
	cs := Customers{Issuer: Issuer{ID: "gm", Name: "GM", PaymentTerms: PaymentTerms{Days: days(-1)}}, Schedule: DefaultInvoiceSchedule,
		Customers: []Customer{{Tenant: "acme", Name: "Acme", Currency: "USD", Book: "/b.yaml", PaymentTerms: &PaymentTerms{Days: days(400)}}}}
	err := cs.Validate()
	for _, want := range []string{"billing.issuer.payment_terms.days -1", "billing.customers[0].payment_terms.days 400"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
