package billing

import (
	"fmt"
	"time"
)

// DefaultPaymentDays is when an invoice is due without payment terms in
// the config: 30 days after it is issued.
const DefaultPaymentDays = 30

// PaymentTerms say when an invoice is due and how to pay it: Days after
// the invoice is issued (0: on receipt), and a Note printed beside the due
// date (bank details, a purchase-order reference). The issuer's are the
// default; a customer's replace the fields they set.
type PaymentTerms struct {
	Days *int   `yaml:"days"`
	Note string `yaml:"note"`
}

// termsOf is the terms a customer's invoices get: its own fields over the
// issuer's, over the default.
func (is Issuer) termsOf(c Customer) (days int, note string) {
	days, note = DefaultPaymentDays, is.PaymentTerms.Note
	if is.PaymentTerms.Days != nil {
		days = *is.PaymentTerms.Days
	}
	if t := c.PaymentTerms; t != nil {
		if t.Days != nil {
			days = *t.Days
		}
		if t.Note != "" {
			note = t.Note
		}
	}
	return days, note
}

func (t PaymentTerms) validate(field string) error {
	if t.Days != nil && (*t.Days < 0 || *t.Days > 365) {
		return fmt.Errorf("%s.days %d: want 0 (due on receipt) to 365", field, *t.Days)
	}
	if len(t.Note) > 500 {
		return fmt.Errorf("%s.note: %d characters, at most 500", field, len(t.Note))
	}
	return nil
}

// dueDate is the day an invoice issued at issued is due, days later in
// the invoice's time zone (a calendar day: DST changes nothing).
func dueDate(issued time.Time, days int, zone string) string {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		loc = time.UTC
	}
	d := issued.In(loc)
	return time.Date(d.Year(), d.Month(), d.Day()+days, 0, 0, 0, 0, loc).Format(time.DateOnly)
}
