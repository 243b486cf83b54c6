package billing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/rollup"
)

// ErrNotFound is returned for an invoice id or number nobody issued; it
// is in the not-found category.
var ErrNotFound = fault.NotFound(errors.New("no such invoice"))

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

// lockLedger takes the issuer's lease and loads the ledger under it; the
// caller releases the lease. On error nothing is held.
func (r *Runner) lockLedger(ctx context.Context) (*heldLease, *ledger, error) {
	hold, err := r.acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	st, err := r.loadState(hold.ctx)
	if err != nil {
		hold.release()
		return nil, nil, err
	}
	return hold, st, nil
}

// nextRevision is inv stored as the revision after s, refused when the
// ledger forbids that change.
func (st *ledger) nextRevision(s *StoredInvoice, inv *Invoice) (StoredInvoice, error) {
	doc, err := inv.Document()
	if err != nil {
		return StoredInvoice{}, err
	}
	ns := StoredInvoice{Invoice: inv, Revision: s.Revision + 1, Document: doc}
	if err := st.checkWrite(ns); err != nil {
		return StoredInvoice{}, err
	}
	return ns, nil
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
		return nil, fault.Validationf("name the drafts to finalize, or a period")
	}
	if period != "" {
		if _, err := MonthlyPeriod(period, time.UTC); err != nil {
			return nil, fault.Validationf("%v", err)
		}
	}
	hold, st, err := r.lockLedger(ctx)
	if err != nil {
		return nil, err
	}
	defer hold.release()
	ctx = hold.ctx
	var targets []*StoredInvoice
	for _, ref := range refs {
		s, err := st.find(ref)
		if err != nil {
			return nil, err
		}
		if s.Invoice.Status != StatusDraft {
			return nil, fault.Conflictf("invoice %s is %s: only a draft can be finalized", ref, s.Invoice.Status)
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
	state, _, err := r.store.LoadRollupState(ctx, rollup.StateKey)
	if err != nil {
		return nil, err
	}
	// Usage imported since the drafts were made is rolled up first (where
	// the runner rolls up), so that checkCurrent sees it; without that it
	// must not be left out of a numbered invoice either.
	for _, s := range targets {
		if c, ok := r.customer(s.Invoice.Tenant); ok {
			if state, err = r.rollUpFor(ctx, state, []Customer{c}, s.Invoice.PeriodLabel); err != nil {
				return nil, err
			}
		}
	}
	pending, err := rollup.HoursNotRolledUp(ctx, r.store, state)
	if err != nil {
		return nil, err
	}
	for _, s := range targets {
		if detail := waitFor(s.Invoice.Period(), state, pending); detail != "" {
			return nil, fault.Preconditionf("draft %s cannot be finalized yet: %s", s.Invoice.ID, detail)
		}
	}
	now := r.now()
	files := &runFiles{readFile: r.readFile, books: map[string]loadedBook{}, contracts: map[string]loadedContract{}}
	for _, s := range targets {
		if err := r.checkCurrent(ctx, st, files, s, state.CompletedVersion, now); err != nil {
			return nil, err
		}
	}
	var save []StoredInvoice
	var outs []Outcome
	for _, s := range targets {
		inv := *s.Invoice
		if err := r.finalize(st, &inv, now); err != nil {
			return nil, err
		}
		ns, err := st.nextRevision(s, &inv)
		if err != nil {
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
	// The invoices finalized now, and with a period every one of it found
	// finalized: a finalize or run that died before telling of them is
	// made good here too.
	var final []*Invoice
	for _, s := range save {
		final = append(final, s.Invoice)
	}
	if period != "" {
		var found []*Invoice
		for _, s := range st.byID {
			if s.Invoice.PeriodLabel == period && s.Invoice.Status == StatusFinalized && !slices.Contains(final, s.Invoice) {
				found = append(found, s.Invoice)
			}
		}
		sort.Slice(found, func(i, j int) bool { return found[i].ID < found[j].ID })
		final = append(final, found...)
	}
	if err := r.finalized(ctx, final); err != nil {
		return outs, err
	}
	return outs, nil
}

// checkCurrent prices a draft again before it is numbered. A draft made
// before later usage arrived, or before another invoice corrected the
// periods it corrects, would bill what no longer holds, or a correction
// twice; such a draft is refused, to be refreshed and reviewed again.
func (r *Runner) checkCurrent(ctx context.Context, st *ledger, files *runFiles, s *StoredInvoice, completed uint64, now time.Time) error {
	inv := s.Invoice
	c, ok := r.customer(inv.Tenant)
	if !ok {
		return fault.Preconditionf("draft %s: %s is no longer a customer in the config", inv.ID, inv.Tenant)
	}
	loc, err := c.Location()
	if err != nil {
		return err
	}
	p, err := MonthlyPeriod(inv.PeriodLabel, loc)
	if err != nil {
		return err
	}
	usage, err := LoadTenantUsage(ctx, r.store, p.Start, p.End, c.Tenant)
	if err != nil {
		return err
	}
	out, _, err := r.invoiceOne(ctx, st, files, c, loc, p, usage[c.Tenant], completed, RunRequest{Period: p.Label, DryRun: true}, now)
	if err != nil {
		return err
	}
	if out.Action != ActionUnchanged {
		return fault.Preconditionf("draft %s is out of date: its usage, prices or corrections changed since it was made; "+
			"refresh it with a draft invoice run of period %s for tenant %s, review it, then finalize", inv.ID, inv.PeriodLabel, inv.Tenant)
	}
	return nil
}

func (r *Runner) customer(tenant string) (Customer, bool) {
	for _, c := range r.customers.Customers {
		if c.Tenant == tenant {
			return c, true
		}
	}
	return Customer{}, false
}

// Void marks an invoice void with a reason. A finalized invoice keeps its
// number (the sequence stays gapless) and its lines; the next run of its
// period issues a new invoice. One whose period has been corrected on a
// later invoice cannot be voided: that would bill the corrections twice.
func (r *Runner) Void(ctx context.Context, ref, reason string) (*Invoice, error) {
	if strings.TrimSpace(reason) == "" {
		return nil, fault.Validationf("reason: required (it is printed on the void invoice)")
	}
	hold, st, err := r.lockLedger(ctx)
	if err != nil {
		return nil, err
	}
	defer hold.release()
	ctx = hold.ctx
	s, err := st.find(ref)
	if err != nil {
		return nil, err
	}
	if s.Invoice.Status == StatusVoid {
		return nil, fault.Conflictf("invoice %s is already void (%s)", ref, s.Invoice.VoidReason)
	}
	if later := st.correctionsOf(s.Invoice, nil); len(later) > 0 {
		return nil, fault.Preconditionf("invoice %s: its period was corrected on invoice %s; void that one first", ref, later[0].Number)
	}
	if d := st.draftCorrecting(s.Invoice); d != nil {
		return nil, fault.Preconditionf("invoice %s: draft %s corrects its period; void or refresh that draft first", ref, d.ID)
	}
	// An invoice whose corrections a later invoice built on cannot go
	// either: the later one billed only the difference from this one's.
	for _, c := range s.Invoice.Corrections {
		for _, other := range st.byTenant[s.Invoice.Tenant] {
			o := other.Invoice
			if o.ID == s.Invoice.ID || o.Status != StatusFinalized || !o.PeriodStart.After(s.Invoice.PeriodStart) {
				continue
			}
			for _, oc := range o.Corrections {
				if oc.InvoiceID == c.InvoiceID {
					return nil, fault.Preconditionf("invoice %s: invoice %s corrected %s again after it; void that one first", ref, o.Number, c.Period)
				}
			}
		}
	}
	inv := *s.Invoice
	at := r.now().UTC().Truncate(time.Second)
	inv.Status, inv.VoidReason, inv.VoidedAt = StatusVoid, reason, &at
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	ns, err := st.nextRevision(s, &inv)
	if err != nil {
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
