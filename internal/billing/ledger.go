package billing

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// ledger is a run's view of the issuer's invoices: read once after the
// lease is taken, and kept up to date with what the run writes.
type ledger struct {
	byID           map[string]*StoredInvoice
	byTenant       map[string][]*StoredInvoice
	seq            map[string]uint64 // highest number drawn per sequence key
	rollupVersions map[[2]int64]map[string]uint64
}

func (r *Runner) loadState(ctx context.Context) (*ledger, error) {
	stored, err := r.store.Invoices(ctx, r.customers.Issuer.ID)
	if err != nil {
		return nil, err
	}
	st := &ledger{byID: map[string]*StoredInvoice{}, byTenant: map[string][]*StoredInvoice{},
		seq: map[string]uint64{}, rollupVersions: map[[2]int64]map[string]uint64{}}
	for _, s := range stored {
		st.put(s)
	}
	return st, nil
}

// put adds or replaces (by id) an invoice; pointers handed out before
// see the replacement.
func (st *ledger) put(s StoredInvoice) {
	if old, ok := st.byID[s.Invoice.ID]; ok {
		*old = s
	} else {
		c := s
		st.byID[s.Invoice.ID] = &c
		st.byTenant[s.Invoice.Tenant] = append(st.byTenant[s.Invoice.Tenant], &c)
	}
	if s.Invoice.Seq > 0 {
		st.claimSeq(s.Invoice.SequenceKey, s.Invoice.Seq)
	}
}

func (st *ledger) claimSeq(key string, seq uint64) {
	if seq > st.seq[key] {
		st.seq[key] = seq
	}
}

func (st *ledger) maxSeq(key string) uint64 { return st.seq[key] }

// current is the tenant's live (not void) invoice for the period label.
func (st *ledger) current(tenant, label string) *StoredInvoice {
	for _, s := range st.byTenant[tenant] {
		if s.Invoice.PeriodLabel == label && s.Invoice.Status != StatusVoid {
			return s
		}
	}
	return nil
}

// nextID names the next invoice of the tenant's period: one more than the
// invoices (void ones included) it already has.
func (st *ledger) nextID(tenant, label string) string {
	n := 1
	for _, s := range st.byTenant[tenant] {
		if s.Invoice.PeriodLabel == label {
			n++
		}
	}
	return InvoiceID(tenant, label, n)
}

// InvoiceID is the id of the n-th invoice of a tenant's period.
func InvoiceID(tenant, label string, n int) string { return fmt.Sprintf("%s/%s/%d", tenant, label, n) }

// finalizedBefore lists the tenant's finalized invoices of periods that
// ended by t, oldest first.
func (st *ledger) finalizedBefore(tenant string, t time.Time) []*Invoice {
	var out []*Invoice
	for _, s := range st.byTenant[tenant] {
		inv := s.Invoice
		if inv.Status == StatusFinalized && !inv.PeriodEnd.After(t) {
			out = append(out, inv)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PeriodStart.Before(out[j].PeriodStart) })
	return out
}

// correctionsOf lists the finalized invoices that carry corrections of
// orig (the draft being rebuilt, except, is recomputed from scratch).
func (st *ledger) correctionsOf(orig *Invoice, except *StoredInvoice) []*Invoice {
	var out []*Invoice
	for _, s := range st.byTenant[orig.Tenant] {
		if s == except || s.Invoice.Status != StatusFinalized {
			continue
		}
		for _, c := range s.Invoice.Corrections {
			if c.InvoiceID == orig.ID {
				out = append(out, s.Invoice)
				break
			}
		}
	}
	return out
}

// lastPriced is the usage hash and rollup version orig's period was last
// priced from: the latest correction on a finalized invoice, or orig's own.
func (st *ledger) lastPriced(orig *Invoice, except *StoredInvoice) (string, uint64) {
	hash, version := orig.InputsHash, orig.RollupVersion
	for _, inv := range st.correctionsOf(orig, except) {
		for _, c := range inv.Corrections {
			if c.InvoiceID == orig.ID && c.RollupVersion >= version {
				hash, version = c.InputsHash, c.RollupVersion
			}
		}
	}
	return hash, version
}

// versions caches RollupVersions per range for the run.
func (st *ledger) versions(ctx context.Context, s InvoiceStore, from, to time.Time) (map[string]uint64, error) {
	k := [2]int64{from.Unix(), to.Unix()}
	if v, ok := st.rollupVersions[k]; ok {
		return v, nil
	}
	v, err := s.RollupVersions(ctx, from, to)
	if err != nil {
		return nil, err
	}
	st.rollupVersions[k] = v
	return v, nil
}

// firstInvoice is the tenant's invoice (of any status) of the earliest period.
func (st *ledger) firstInvoice(tenant string) *Invoice {
	var first *Invoice
	for _, s := range st.byTenant[tenant] {
		if first == nil || s.Invoice.PeriodStart.Before(first.PeriodStart) {
			first = s.Invoice
		}
	}
	return first
}

// lastFinalized is the tenant's finalized invoice of the latest period.
func (st *ledger) lastFinalized(tenant string) *Invoice {
	var last *Invoice
	for _, s := range st.byTenant[tenant] {
		if s.Invoice.Status == StatusFinalized && (last == nil || s.Invoice.PeriodStart.After(last.PeriodStart)) {
			last = s.Invoice
		}
	}
	return last
}

func (st *ledger) isFinalized(tenant, label string) bool {
	cur := st.current(tenant, label)
	return cur != nil && cur.Invoice.Status == StatusFinalized
}

// checkWrite refuses a write that would change what must not change: a
// finalized invoice may only become void (keeping its number and lines),
// a void one never changes, and every write is a higher revision. Every
// path that stores invoices goes through it.
func (st *ledger) checkWrite(s StoredInvoice) error {
	old, ok := st.byID[s.Invoice.ID]
	if !ok {
		return nil
	}
	o, n := old.Invoice, s.Invoice
	switch {
	case s.Revision <= old.Revision:
		return fault.Conflictf("invoice %s: revision %d is not above the stored %d", n.ID, s.Revision, old.Revision)
	case o.Status == StatusVoid:
		return fault.Conflictf("invoice %s is void: it never changes", n.ID)
	case o.Status == StatusFinalized && n.Status != StatusVoid:
		return fault.Conflictf("invoice %s (%s) is finalized: it never changes", n.ID, o.Number)
	case o.Status == StatusFinalized && (n.Number != o.Number || n.TotalMinor != o.TotalMinor || len(n.Lines) != len(o.Lines)):
		return fault.Conflictf("invoice %s (%s): voiding keeps its number and lines", n.ID, o.Number)
	}
	return nil
}

// draftCorrecting is a draft that carries corrections of orig, if any.
func (st *ledger) draftCorrecting(orig *Invoice) *Invoice {
	for _, s := range st.byTenant[orig.Tenant] {
		if s.Invoice.Status != StatusDraft {
			continue
		}
		for _, c := range s.Invoice.Corrections {
			if c.InvoiceID == orig.ID {
				return s.Invoice
			}
		}
	}
	return nil
}
