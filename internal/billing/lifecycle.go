package billing

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// ErrNotFound is returned for an invoice id or number nobody issued.
var ErrNotFound = errors.New("no such invoice")

// find is the invoice named by id or number.
func (st *ledger) find(ref string) (*StoredInvoice, error) {
	if s, ok := st.byID[ref]; ok {
		return s, nil
	}
	for _, s := range st.byID {
		if s.Invoice.Number != "" && s.Invoice.Number == ref {
			return s, nil
		}
	}
	return nil, fmt.Errorf("invoice %q: %w (give an id such as acme/2026-11/1 or a number)", ref, ErrNotFound)
}

// Invoices lists the issuer's invoices (latest revision), optionally of
// one period and tenant, by period, tenant and id.
func (r *Runner) Invoices(ctx context.Context, period, tenant string) ([]StoredInvoice, error) {
	all, err := r.store.Invoices(ctx, r.customers.Issuer.ID)
	if err != nil {
		return nil, err
	}
	var out []StoredInvoice
	for _, s := range all {
		if (period == "" || s.Invoice.PeriodLabel == period) && (tenant == "" || s.Invoice.Tenant == tenant) {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Invoice, out[j].Invoice
		if a.PeriodLabel != b.PeriodLabel {
			return a.PeriodLabel < b.PeriodLabel
		}
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		return a.ID < b.ID
	})
	return out, nil
}

// Invoice is one invoice by id or number, as stored.
func (r *Runner) Invoice(ctx context.Context, ref string) (StoredInvoice, error) {
	st, err := r.loadState(ctx)
	if err != nil {
		return StoredInvoice{}, err
	}
	s, err := st.find(ref)
	if err != nil {
		return StoredInvoice{}, err
	}
	return *s, nil
}

// Finalize numbers the drafts named (by id), or every draft of period when
// no id is given, under the issuer's lease.
func (r *Runner) Finalize(ctx context.Context, refs []string, period string) ([]Outcome, error) {
	if len(refs) == 0 && period == "" {
		return nil, errors.New("name the drafts to finalize, or give --period")
	}
	if period != "" {
		if _, err := MonthlyPeriod(period, time.UTC); err != nil {
			return nil, fmt.Errorf("--period: %w", err)
		}
	}
	hold, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer hold.release()
	ctx = hold.ctx
	st, err := r.loadState(ctx)
	if err != nil {
		return nil, err
	}
	var targets []*StoredInvoice
	for _, ref := range refs {
		s, err := st.find(ref)
		if err != nil {
			return nil, err
		}
		if s.Invoice.Status != StatusDraft {
			return nil, fmt.Errorf("invoice %s is %s: only a draft can be finalized", ref, s.Invoice.Status)
		}
		targets = append(targets, s)
	}
	if period != "" {
		ids := make([]string, 0, len(st.byID))
		for id, s := range st.byID {
			if s.Invoice.PeriodLabel == period && s.Invoice.Status == StatusDraft {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		for _, id := range ids {
			targets = append(targets, st.byID[id])
		}
	}
	now := r.now()
	var save []StoredInvoice
	var outs []Outcome
	for _, s := range targets {
		inv := *s.Invoice
		if err := r.finalize(st, &inv, now); err != nil {
			return nil, err
		}
		doc, err := inv.Document()
		if err != nil {
			return nil, err
		}
		ns := StoredInvoice{Invoice: &inv, Revision: s.Revision + 1, Document: doc}
		if err := st.checkWrite(ns); err != nil {
			return nil, err
		}
		save = append(save, ns)
		st.put(ns)
		outs = append(outs, Outcome{Tenant: inv.Tenant, Action: ActionFinalized, Invoice: &inv})
	}
	if err := hold.check(); err != nil {
		return nil, err
	}
	if err := r.store.SaveInvoices(ctx, save); err != nil {
		return nil, err
	}
	return outs, nil
}

// Void marks an invoice void with a reason. A finalized invoice keeps its
// number (the sequence stays gapless) and its lines; the next run of its
// period issues a new invoice. One whose period has been corrected on a
// later invoice cannot be voided: that would bill the corrections twice.
func (r *Runner) Void(ctx context.Context, ref, reason string) (*Invoice, error) {
	if strings.TrimSpace(reason) == "" {
		return nil, errors.New("--reason: required (it is printed on the void invoice)")
	}
	hold, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer hold.release()
	ctx = hold.ctx
	st, err := r.loadState(ctx)
	if err != nil {
		return nil, err
	}
	s, err := st.find(ref)
	if err != nil {
		return nil, err
	}
	if s.Invoice.Status == StatusVoid {
		return nil, fmt.Errorf("invoice %s is already void (%s)", ref, s.Invoice.VoidReason)
	}
	if later := st.correctionsOf(s.Invoice, nil); len(later) > 0 {
		return nil, fmt.Errorf("invoice %s: its period was corrected on invoice %s; void that one first", ref, later[0].Number)
	}
	inv := *s.Invoice
	at := r.now().UTC().Truncate(time.Second)
	inv.Status, inv.VoidReason, inv.VoidedAt = StatusVoid, reason, &at
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	doc, err := inv.Document()
	if err != nil {
		return nil, err
	}
	ns := StoredInvoice{Invoice: &inv, Revision: s.Revision + 1, Document: doc}
	if err := st.checkWrite(ns); err != nil {
		return nil, err
	}
	if err := hold.check(); err != nil {
		return nil, err
	}
	if err := r.store.SaveInvoices(ctx, []StoredInvoice{ns}); err != nil {
		return nil, err
	}
	return &inv, nil
}
