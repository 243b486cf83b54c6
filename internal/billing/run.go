package billing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/pricing"
)

// TenantUsage is a tenant's hourly usage over a range, in price-book units.
type TenantUsage struct {
	Usage []pricing.Usage
}

// InvoiceStore is what the invoice run needs from storage.
type InvoiceStore interface {
	LeaseStore
	LoadRollupState(ctx context.Context, job string) (rollup.State, bool, error)
	// HoursInsertedSince lists the hours before `before` of samples
	// inserted at or after since: hours the rollup has not taken in yet.
	HoursInsertedSince(ctx context.Context, since, before time.Time) ([]time.Time, error)
	HourlyUsageReader
	// RollupVersions is the highest rollup version per tenant in [from, to).
	RollupVersions(ctx context.Context, from, to time.Time) (map[string]uint64, error)
	// Invoices is the latest revision of every invoice of the issuer.
	Invoices(ctx context.Context, issuer string) ([]StoredInvoice, error)
	// SaveInvoices writes the invoices and their lines in one insert each.
	SaveInvoices(ctx context.Context, invs []StoredInvoice) error
	MarkPeriodClosed(ctx context.Context, periodStart, closedAt time.Time) error
	ServerNow(ctx context.Context) (time.Time, error)
}

// StoredInvoice is an invoice with its revision (the highest wins) and
// its document exactly as stored.
type StoredInvoice struct {
	Invoice  *Invoice
	Revision uint64
	Document []byte
}

// RunRequest is one invoice run.
type RunRequest struct {
	Period string // YYYY-MM, the month in each customer's time zone
	Tenant string // only this customer; "" for all
	DryRun bool   // price and report, store nothing
	Draft  bool   // store drafts, leave finalizing to `invoice finalize`
	// KeepDrafts leaves a customer's existing draft for the period alone
	// (the scheduled run: an operator made it for review).
	KeepDrafts bool
}

// Validate checks the request's own fields.
func (r RunRequest) Validate() error {
	if _, err := MonthlyPeriod(r.Period, time.UTC); err != nil {
		return fault.Validation(err) // it names the period
	}
	return nil
}

// Outcome is what a run did for one customer.
type Outcome struct {
	Tenant  string
	Action  string // created, updated, finalized, unchanged, waiting, failed
	Invoice *Invoice
	Detail  string
}

// Actions an Outcome reports.
const (
	ActionCreated   = "created"   // a new draft
	ActionUpdated   = "updated"   // a draft recomputed
	ActionFinalized = "finalized" // numbered and final
	ActionUnchanged = "unchanged" // already final, or a draft with the same inputs
	ActionWaiting   = "waiting"   // the period is not closable yet
	ActionFailed    = "failed"
)

// Report is a run's outcome per customer and the UTC months it closed.
type Report struct {
	Outcomes     []Outcome
	ClosedMonths []time.Time
}

// Failed counts customers that could not be invoiced.
func (r Report) Failed() int {
	n := 0
	for _, o := range r.Outcomes {
		if o.Action == ActionFailed {
			n++
		}
	}
	return n
}

// Runner runs invoice periods for the configured customers.
type Runner struct {
	store     InvoiceStore
	customers Customers
	lease     LeaseConfig
	now       func() time.Time
	logger    *slog.Logger
	// readFile loads books and contracts; paths are as configured.
	readFile func(string) ([]byte, error)
	// Announce, when set, is told of the finalized invoices a call
	// stored or found, once they are stored (the webhook outbox): those it
	// finalized and those of its period finalized before. It must add only
	// what is missing for each invoice (webhook.Publisher), so a call cut
	// short between storing invoices and telling of them is made good by
	// the next run of the period. Its error fails the call.
	Announce FinalizedAnnouncer
	// Rollup, when set, is run once (the scheduled job: closed hours and
	// late samples) before a run or finalize that may store invoices, so
	// that hours imported or re-imported since the last rollup are billed
	// in their own period rather than waiting or becoming late usage.
	// Without it such a period waits (waitFor).
	Rollup *rollup.Service
	// Credits, when set, burns the customers' grants down, and invoices
	// apply them (credits.go); unset, no grant is applied.
	Credits CreditBalances
}

// NewRunner builds a runner.
func NewRunner(st InvoiceStore, cs Customers, lease LeaseConfig, now func() time.Time, logger *slog.Logger) *Runner {
	return &Runner{store: st, customers: cs, lease: lease, now: now, logger: logger.With("component", "invoice"), readFile: os.ReadFile}
}

func (r *Runner) leaseName() string { return "invoices/" + r.customers.Issuer.ID }

// Progress is told how many customers are done out of how many.
type Progress func(done, total int)

// Run invoices the period for each customer (or the one asked for). It is
// idempotent: a finalized invoice is never touched again, and a draft with
// unchanged inputs is left as it is. Everything but a dry run happens
// under the issuer's lease, so two runs at once make one set of invoices
// and draw numbers one after the other, without gaps.
func (r *Runner) Run(ctx context.Context, req RunRequest, progress Progress) (Report, error) {
	if err := req.Validate(); err != nil {
		return Report{}, err
	}
	customers, err := r.select_(req.Tenant)
	if err != nil {
		return Report{}, err
	}
	var hold *heldLease
	if !req.DryRun {
		if hold, err = r.acquire(ctx); err != nil {
			return Report{}, err
		}
		defer hold.release()
		ctx = hold.ctx
	}
	st, err := r.loadState(ctx)
	if err != nil {
		return Report{}, err
	}
	state, _, err := r.store.LoadRollupState(ctx, rollup.StateKey)
	if err != nil {
		return Report{}, err
	}
	if !req.DryRun && st.anyUnfinalized(customers, req.Period) {
		if state, err = r.rollUpFor(ctx, state, customers, req.Period); err != nil {
			return Report{}, err
		}
	}
	pending, err := rollup.HoursNotRolledUp(ctx, r.store, state)
	if err != nil {
		return Report{}, err
	}

	type job struct {
		c      Customer
		loc    *time.Location
		period Period
	}
	var jobs []job
	var rep Report
	var from, to time.Time
	for _, c := range customers {
		loc, err := c.Location()
		if err == nil {
			var p Period
			if p, err = MonthlyPeriod(req.Period, loc); err == nil {
				if detail := waitFor(p, state, pending); detail != "" && !st.isFinalized(c.Tenant, p.Label) {
					rep.Outcomes = append(rep.Outcomes, Outcome{Tenant: c.Tenant, Action: ActionWaiting, Detail: detail})
					continue
				}
				jobs = append(jobs, job{c, loc, p})
				if from.IsZero() || p.Start.Before(from) {
					from = p.Start
				}
				if p.End.After(to) {
					to = p.End
				}
				continue
			}
		}
		rep.Outcomes = append(rep.Outcomes, Outcome{Tenant: c.Tenant, Action: ActionFailed, Detail: err.Error()})
	}
	var usage map[string]TenantUsage
	if len(jobs) > 0 {
		if usage, err = LoadTenantUsage(ctx, r.store, from, to, req.Tenant); err != nil {
			return Report{}, err
		}
	}
	now := r.now()
	files := &runFiles{readFile: r.readFile, books: map[string]loadedBook{}, contracts: map[string]loadedContract{}}
	var save []StoredInvoice
	for i, j := range jobs {
		out, stored, err := r.invoiceOne(ctx, st, files, j.c, j.loc, j.period, usage[j.c.Tenant], state.CompletedVersion, req, now)
		if err != nil {
			out = Outcome{Tenant: j.c.Tenant, Action: ActionFailed, Detail: err.Error()}
			r.logger.Error("invoice failed", "tenant", j.c.Tenant, "period", req.Period, "err", err)
		}
		if stored != nil {
			if err := st.checkWrite(*stored); err != nil {
				return Report{}, err
			}
			save = append(save, *stored)
			st.put(*stored)
		}
		rep.Outcomes = append(rep.Outcomes, out)
		if progress != nil {
			progress(i+1, len(jobs))
		}
	}
	if req.DryRun {
		return rep, nil
	}
	if err := hold.check(); err != nil {
		return Report{}, err
	}
	if err := r.store.SaveInvoices(ctx, save); err != nil {
		return Report{}, err
	}
	// Every invoice of the run, new or found (finalized keeps the
	// finalized ones): one finalized by a run that died before telling of
	// it is told of now.
	var invs []*Invoice
	for _, o := range rep.Outcomes {
		if o.Invoice != nil {
			invs = append(invs, o.Invoice)
		}
	}
	if err := r.finalized(ctx, invs); err != nil {
		return rep, err
	}
	if rep.ClosedMonths, err = r.closeMonths(ctx, st, req.Period); err != nil {
		return rep, err
	}
	return rep, nil
}

// rollUpFor runs the rollup job once, if the runner has one and the
// customers' periods need it: one is not closed yet, or holds samples
// inserted since the last rollup run started (that second included, which
// the run may or may not have seen). It returns the rollup state to
// invoice by. Only when needed: each run re-reads the hours inserted in
// the InsertSlack before it, so a needless run would touch periods that
// are already invoiced, and later invoices would re-check them.
func (r *Runner) rollUpFor(ctx context.Context, state rollup.State, customers []Customer, label string) (rollup.State, error) {
	if r.Rollup == nil {
		return state, nil
	}
	need := false
	var from, to time.Time
	for _, c := range customers {
		loc, err := c.Location()
		if err != nil {
			continue // the run reports it as failed
		}
		p, err := MonthlyPeriod(label, loc)
		if err != nil {
			continue
		}
		need = need || !p.Closable(state.ClosedThrough)
		if from.IsZero() || p.Start.Before(from) {
			from = p.Start
		}
		if p.End.After(to) {
			to = p.End
		}
	}
	if !need && !state.ClosedThrough.IsZero() {
		hours, err := r.store.HoursInsertedSince(ctx, state.Watermark.Add(rollup.InsertSlack), state.ClosedThrough)
		if err != nil {
			return state, err
		}
		for _, h := range hours {
			need = need || (!h.Before(from) && h.Before(to))
		}
	}
	if !need {
		return state, nil
	}
	if _, err := r.Rollup.Run(ctx); err != nil {
		return state, fmt.Errorf("roll up usage before invoicing %s: %w", label, err)
	}
	state, _, err := r.store.LoadRollupState(ctx, rollup.StateKey)
	return state, err
}

// anyUnfinalized says whether a customer lacks a finalized invoice for the
// period: only then may the run store one, and so roll up first.
func (st *ledger) anyUnfinalized(cs []Customer, label string) bool {
	for _, c := range cs {
		if !st.isFinalized(c.Tenant, label) {
			return true
		}
	}
	return false
}

// waitFor says why p cannot be invoiced yet, and what to run; "" when it
// can. Its hourly rollups must be closed through its end, and hold every
// sample of it: a month imported after later hours closed is behind the
// mark but not rolled up, and billing it would bill nothing, its usage
// coming back as late usage on the next invoice.
func waitFor(p Period, state rollup.State, pending []time.Time) string {
	const run = "run the scheduled rollup (an invoice run that is not a dry run rolls up by itself), then invoice again"
	if !p.Closable(state.ClosedThrough) {
		closed := state.ClosedThrough.Format(time.RFC3339)
		if state.ClosedThrough.IsZero() {
			closed = "nothing (no rollup has run)"
		}
		return fmt.Sprintf("hourly rollups are closed through %s; the period ends %s: once its last hour is past the rollup grace, %s",
			closed, p.End.UTC().Format(time.RFC3339), run)
	}
	var in []time.Time
	for _, h := range pending {
		if !h.Before(p.Start) && h.Before(p.End) {
			in = append(in, h)
		}
	}
	if len(in) == 0 {
		return ""
	}
	return fmt.Sprintf("%d hour(s) of the period, from %s, hold samples inserted since the last rollup, not rolled up yet: %s",
		len(in), in[0].UTC().Format(time.RFC3339), run)
}

func (r *Runner) select_(tenant string) ([]Customer, error) {
	if len(r.customers.Customers) == 0 {
		return nil, fault.Precondition(errors.New("no customers: the config's billing.customers is empty"))
	}
	if tenant == "" {
		return r.customers.Customers, nil
	}
	for _, c := range r.customers.Customers {
		if c.Tenant == tenant {
			return []Customer{c}, nil
		}
	}
	return nil, &UnknownTenantError{Tenant: tenant}
}

// UnknownTenantError is a run asked for a tenant that is not a customer;
// it is in the not-found category.
type UnknownTenantError struct{ Tenant string }

func (e *UnknownTenantError) Error() string {
	return fmt.Sprintf("tenant %q: not a customer in the config's billing.customers", e.Tenant)
}

func (e *UnknownTenantError) Is(target error) bool { return target == fault.ErrNotFound }

// invoiceOne builds the customer's invoice for the period, or says why
// there is nothing to do. stored is nil when nothing is to be written.
func (r *Runner) invoiceOne(ctx context.Context, st *ledger, files *runFiles, c Customer, loc *time.Location, p Period,
	tu TenantUsage, completed uint64, req RunRequest, now time.Time) (Outcome, *StoredInvoice, error) {
	current := st.current(c.Tenant, p.Label)
	if current != nil && current.Invoice.Status == StatusFinalized {
		return Outcome{Tenant: c.Tenant, Action: ActionUnchanged, Invoice: current.Invoice, Detail: "already finalized"}, nil, nil
	}
	if current != nil && req.KeepDrafts {
		return Outcome{Tenant: c.Tenant, Action: ActionUnchanged, Invoice: current.Invoice, Detail: "a draft awaits review (invoice finalize)"}, nil, nil
	}
	// Periods in another zone than the last invoice's would overlap it or
	// leave hours between them unbilled.
	if last := st.lastFinalized(c.Tenant); last != nil && last.TimeZone != zoneName(c) {
		return Outcome{}, nil, fault.Preconditionf("customer %s: time_zone is %s, but invoice %s (%s) was in %s; a change of zone would bill hours twice or not at all, so it needs a new tenant or a manual invoice",
			c.Tenant, zoneName(c), last.Number, last.PeriodLabel, last.TimeZone)
	}
	book, err := files.book(c.Book)
	if err != nil {
		return Outcome{}, nil, err
	}
	contract, err := files.contract(c.Contract)
	if err != nil {
		return Outcome{}, nil, err
	}
	in := Inputs{Tenant: c.Tenant, Period: p, BookDigest: book.digest, ContractDigest: contract.digest, Usage: inPeriod(tu.Usage, p)}
	priced, err := pricing.Price(pricing.Input{Tenant: c.Tenant, Start: p.Start.In(loc), End: p.End.In(loc),
		Usage: in.Usage, Book: book.book, Contract: contract.contract})
	if err != nil {
		return Outcome{}, nil, fmt.Errorf("price %s %s: %w", c.Tenant, p.Label, err)
	}
	lines, corrections, err := r.corrections(ctx, st, c, p, book, contract, current, completed)
	if err != nil {
		return Outcome{}, nil, err
	}
	credit, err := r.creditInput(ctx, st, c, loc, p)
	if err != nil {
		return Outcome{}, nil, err
	}
	id := st.nextID(c.Tenant, p.Label)
	revision := uint64(1)
	if current != nil {
		id, revision = current.Invoice.ID, current.Revision+1
	}
	inv, err := BuildInvoice(Draft{ID: id, Issuer: r.customers.Issuer, Customer: c, Period: p, Priced: priced,
		CorrectionLines: lines, Corrections: corrections, Credits: credit, BookDigest: book.digest, ContractDigest: contract.digest,
		InputsHash: in.Hash(), RollupVersion: completed, Now: now})
	if err != nil {
		return Outcome{}, nil, err
	}
	action := ActionCreated
	if current != nil {
		action = ActionUpdated
		if sameDraft(current.Invoice, inv) {
			if req.Draft || req.DryRun {
				return Outcome{Tenant: c.Tenant, Action: ActionUnchanged, Invoice: current.Invoice, Detail: "draft with the same inputs"}, nil, nil
			}
			same := *current.Invoice // a copy: the ledger's entry changes only by put
			inv = &same
		}
	}
	if !req.Draft && !req.DryRun {
		if err := r.finalize(st, inv, now); err != nil {
			return Outcome{}, nil, err
		}
		action = ActionFinalized
	}
	if req.DryRun {
		return Outcome{Tenant: c.Tenant, Action: action, Invoice: inv, Detail: "dry run: not stored"}, nil, nil
	}
	doc, err := inv.Document()
	if err != nil {
		return Outcome{}, nil, err
	}
	return Outcome{Tenant: c.Tenant, Action: action, Invoice: inv}, &StoredInvoice{Invoice: inv, Revision: revision, Document: doc}, nil
}

// creditInput burns the customer's grants down at the period's start and
// end, with what its earlier finalized invoices applied of each; nil when
// the runner has no credits or the customer no grants.
func (r *Runner) creditInput(ctx context.Context, st *ledger, c Customer, loc *time.Location, p Period) (*CreditInput, error) {
	if r.Credits == nil {
		return nil, nil
	}
	rs, err := r.Credits.BalancesAt(ctx, c.Tenant, p.Start, p.End)
	if err != nil {
		return nil, fmt.Errorf("credits of %s for %s: %w", c.Tenant, p.Label, err)
	}
	start, end := rs[0], rs[1]
	if len(end.Balances) == 0 {
		return nil, nil
	}
	next, err := MonthlyPeriod(p.End.In(loc).Format("2006-01"), loc)
	if err != nil {
		return nil, err
	}
	minor, qty := AppliedBefore(st.finalizedBefore(c.Tenant, p.Start))
	return &CreditInput{Start: start, End: end, AppliedMinor: minor, AppliedQty: qty, NextPeriodEnd: next.End}, nil
}

func zoneName(c Customer) string {
	if c.TimeZone == "" {
		return "UTC"
	}
	return c.TimeZone
}

// sameDraft says whether two drafts bill the same: equal documents apart
// from when each was made and the rollup versions they were priced after
// (a rollup run that changed nothing for the tenant leaves its bill).
func sameDraft(a, b *Invoice) bool {
	x, y := *a, *b
	x.CreatedAt, y.CreatedAt = time.Time{}, time.Time{}
	x.RollupVersion, y.RollupVersion = 0, 0
	x.Corrections, y.Corrections = withoutVersions(x.Corrections), withoutVersions(y.Corrections)
	dx, errX := x.Document()
	dy, errY := y.Document()
	return errX == nil && errY == nil && string(dx) == string(dy)
}

func withoutVersions(cs []Correction) []Correction {
	out := make([]Correction, len(cs))
	for i, c := range cs {
		c.RollupVersion = 0
		out[i] = c
	}
	return out
}

// finalize draws the invoice's number: the next in its sequence. Only the
// lease holder calls it, so no other run draws from the sequence at once.
func (r *Runner) finalize(st *ledger, inv *Invoice, now time.Time) error {
	is := r.customers.Issuer
	at := now.UTC().Truncate(time.Second)
	key := is.SequenceKey(at)
	seq := st.maxSeq(key) + 1
	inv.Status, inv.Seq, inv.SequenceKey = StatusFinalized, seq, key
	inv.Number = is.FormatNumber(seq, at)
	inv.FinalizedAt = &at
	// A draft made before the terms changed is issued on today's terms.
	for _, c := range r.customers.Customers {
		if c.Tenant == inv.Tenant {
			inv.PaymentDays, inv.PaymentNote = is.termsOf(c)
		}
	}
	inv.DueDate = dueDate(at, inv.PaymentDays, inv.TimeZone)
	st.claimSeq(key, seq)
	return inv.Validate()
}

// corrections re-prices the customer's finalized periods before p whose
// rollups changed since they were billed, and returns the adjustment and
// credit lines for the new invoice with what each period was re-priced
// from. A period whose usage is unchanged gets no line.
func (r *Runner) corrections(ctx context.Context, st *ledger, c Customer, p Period, book loadedBook, contract loadedContract,
	current *StoredInvoice, completed uint64) ([]Line, []Correction, error) {
	var lines []Line
	var out []Correction
	for _, orig := range st.finalizedBefore(c.Tenant, p.Start) {
		hash, version := st.lastPriced(orig, current)
		versions, err := st.versions(ctx, r.store, orig.PeriodStart, orig.PeriodEnd)
		if err != nil {
			return nil, nil, err
		}
		if versions[c.Tenant] <= version {
			continue
		}
		usage, err := LoadTenantUsage(ctx, r.store, orig.PeriodStart, orig.PeriodEnd, c.Tenant)
		if err != nil {
			return nil, nil, err
		}
		tu := usage[c.Tenant]
		op := orig.Period()
		in := Inputs{Tenant: c.Tenant, Period: op, BookDigest: orig.BookDigest, ContractDigest: orig.ContractDigest, Usage: tu.Usage}
		corr := Correction{InvoiceID: orig.ID, Number: orig.Number, Period: orig.PeriodLabel, InputsHash: in.Hash(), RollupVersion: completed}
		if corr.InputsHash != hash {
			loc, err := time.LoadLocation(orig.TimeZone)
			if err != nil {
				return nil, nil, fmt.Errorf("invoice %s: time zone %q: %w", orig.Number, orig.TimeZone, err)
			}
			// Re-priced with the book as configured now: a book keeps old
			// prices as dated versions, so old hours keep their price.
			repriced, err := pricing.Price(pricing.Input{Tenant: c.Tenant, Start: op.Start.In(loc), End: op.End.In(loc),
				Usage: tu.Usage, Book: book.book, Contract: contract.contract})
			if err != nil {
				return nil, nil, fmt.Errorf("re-price %s %s (invoice %s): %w", c.Tenant, orig.PeriodLabel, orig.Number, err)
			}
			if repriced.Currency.Code != orig.Currency.Code {
				return nil, nil, fault.Preconditionf("re-price %s %s (invoice %s): the book now prices in %s, the invoice is in %s",
					c.Tenant, orig.PeriodLabel, orig.Number, repriced.Currency.Code, orig.Currency.Code)
			}
			lines = append(lines, Correct(orig, BilledFor(orig, st.correctionsOf(orig, current)), repriced)...)
		}
		out = append(out, corr)
	}
	return lines, out, nil
}

// inPeriod keeps the rows whose hour lies in p.
func inPeriod(rows []pricing.Usage, p Period) []pricing.Usage {
	out := make([]pricing.Usage, 0, len(rows))
	for _, u := range rows {
		if !u.Hour.Before(p.Start) && u.Hour.Before(p.End) {
			out = append(out, u)
		}
	}
	return out
}

// closeMonths writes closed_periods for every UTC month the period
// touches that every customer has a finalized invoice for, in each of its
// own periods overlapping that month (a zone west of UTC reaches into the
// next UTC month, one east into the one before). Periods before a
// customer's first invoice (of any status) do not count: it was not
// billed then. Raw retention drops only closed months.
func (r *Runner) closeMonths(ctx context.Context, st *ledger, label string) ([]time.Time, error) {
	months := map[time.Time]bool{}
	for _, c := range r.customers.Customers {
		loc, err := c.Location()
		if err != nil {
			return nil, err
		}
		p, err := MonthlyPeriod(label, loc)
		if err != nil {
			return nil, err
		}
		for m := utcMonth(p.Start); m.Before(p.End); m = m.AddDate(0, 1, 0) {
			months[m] = true
		}
	}
	var closed []time.Time
	for m := range months {
		ok := true
		for _, c := range r.customers.Customers {
			loc, _ := c.Location()
			first := st.firstInvoice(c.Tenant)
			for _, t := range []time.Time{m, m.AddDate(0, 1, 0).Add(-time.Second)} {
				p, err := MonthContaining(t, loc)
				if err != nil {
					return nil, err
				}
				if first == nil || (p.End.After(first.PeriodStart) && !st.isFinalized(c.Tenant, p.Label)) {
					ok = false
				}
			}
		}
		if ok {
			closed = append(closed, m)
		}
	}
	sort.Slice(closed, func(i, j int) bool { return closed[i].Before(closed[j]) })
	now, err := r.store.ServerNow(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range closed {
		if err := r.store.MarkPeriodClosed(ctx, m, now); err != nil {
			return nil, err
		}
	}
	return closed, nil
}

type loadedBook struct {
	book   *pricing.Book
	digest string
}

type loadedContract struct {
	contract *pricing.Contract
	digest   string
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// runFiles reads each book and contract once per run: customers share
// books, and a run sees one version of each file.
type runFiles struct {
	readFile  func(string) ([]byte, error)
	books     map[string]loadedBook
	contracts map[string]loadedContract
}

func (f *runFiles) book(path string) (loadedBook, error) {
	return loadOnce(f.books, path, f.loadBook)
}

func (f *runFiles) contract(path string) (loadedContract, error) {
	return loadOnce(f.contracts, path, f.loadContract)
}

// loadOnce is loaded[path], loaded by load on first use; a failed load is
// not kept, so it fails again for the next customer naming the file.
func loadOnce[T any](loaded map[string]T, path string, load func(string) (T, error)) (T, error) {
	if v, ok := loaded[path]; ok {
		return v, nil
	}
	v, err := load(path)
	if err == nil {
		loaded[path] = v
	}
	return v, err
}

func (f *runFiles) loadBook(path string) (loadedBook, error) {
	data, err := f.readFile(path)
	if err != nil {
		return loadedBook{}, fmt.Errorf("read price book: %w", err)
	}
	b, err := pricing.ParseBookFile(path, data)
	if err != nil {
		return loadedBook{}, err
	}
	return loadedBook{book: b, digest: digest(data)}, nil
}

func (f *runFiles) loadContract(path string) (loadedContract, error) {
	if path == "" {
		return loadedContract{}, nil
	}
	data, err := f.readFile(path)
	if err != nil {
		return loadedContract{}, fmt.Errorf("read contract: %w", err)
	}
	c, err := pricing.ParseContractFile(path, data)
	if err != nil {
		return loadedContract{}, err
	}
	return loadedContract{contract: c, digest: digest(data)}, nil
}

// heldLease keeps the issuer's lease renewed while a run works. ctx is
// cancelled when a renewal fails, and check refuses to write once the
// last renewal is older than half the TTL: by then another run may
// believe the lease expired.
type heldLease struct {
	lease   *Lease
	ctx     context.Context
	cancel  context.CancelFunc
	ttl     time.Duration
	mu      sync.Mutex
	last    time.Time
	err     error
	done    chan struct{}
	stopped chan struct{} // closed when renew has returned
	logger  *slog.Logger
}

func (r *Runner) acquire(ctx context.Context) (*heldLease, error) {
	l, err := Acquire(ctx, r.store, r.leaseName(), r.lease)
	if err != nil {
		return nil, err
	}
	// The claim was stamped before the settle delay: count its age from then.
	h := &heldLease{lease: l, ttl: r.lease.TTL, last: time.Now().Add(-r.lease.Settle), done: make(chan struct{}),
		stopped: make(chan struct{}), logger: r.logger}
	h.ctx, h.cancel = context.WithCancel(ctx)
	go func() {
		defer close(h.stopped)
		h.renew()
	}()
	return h, nil
}

func (h *heldLease) renew() {
	t := time.NewTicker(h.ttl / 4)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-h.ctx.Done():
			return
		case <-t.C:
			began := time.Now()
			err := h.lease.Renew(h.ctx)
			h.mu.Lock()
			if err != nil {
				h.err = fmt.Errorf("renew billing lease: %w", err)
				h.mu.Unlock()
				h.cancel()
				return
			}
			h.last = began
			h.mu.Unlock()
		}
	}
}

func (h *heldLease) check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return h.err
	}
	if age := time.Since(h.last); age > h.ttl/2 {
		return fmt.Errorf("billing lease last renewed %s ago (TTL %s): not writing, another run may hold it now", age.Round(time.Second), h.ttl)
	}
	return nil
}

func (h *heldLease) release() {
	close(h.done)
	<-h.stopped // no renewal may land after the release
	if err := h.lease.Release(context.WithoutCancel(h.ctx)); err != nil {
		h.logger.Warn("release billing lease; it expires by itself", "err", err)
	}
	h.cancel()
}

// describe is a one-line account of an outcome for logs and the CLI.
func (o Outcome) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", o.Tenant, o.Action)
	if o.Invoice != nil {
		if o.Invoice.Number != "" {
			fmt.Fprintf(&b, " %s", o.Invoice.Number)
		}
		fmt.Fprintf(&b, " %s %s", o.Invoice.Money(o.Invoice.TotalMinor), o.Invoice.Currency.Code)
	}
	if o.Detail != "" {
		fmt.Fprintf(&b, " (%s)", o.Detail)
	}
	return b.String()
}

// String is describe, for printing.
func (o Outcome) String() string { return o.describe() }

// LoadPricing reads a customer's price book (with the MIG table's
// weights) and contract (nil without one).
func LoadPricing(c Customer, readFile func(string) ([]byte, error)) (*pricing.Book, *pricing.Contract, error) {
	f := &runFiles{readFile: readFile, books: map[string]loadedBook{}, contracts: map[string]loadedContract{}}
	b, err := f.book(c.Book)
	if err != nil {
		return nil, nil, err
	}
	k, err := f.contract(c.Contract)
	if err != nil {
		return nil, nil, err
	}
	return b.book, k.contract, nil
}

// FinalizedAnnouncer puts an invoice.finalized event in the webhook
// outbox for each invoice that has none yet (webhook.Publisher).
type FinalizedAnnouncer interface {
	InvoicesFinalized(ctx context.Context, invs []*Invoice) (int, error)
}

// finalized tells Announce of the finalized invoices among invs.
func (r *Runner) finalized(ctx context.Context, invs []*Invoice) error {
	if r.Announce == nil {
		return nil
	}
	var final []*Invoice
	for _, inv := range invs {
		if inv.Status == StatusFinalized {
			final = append(final, inv)
		}
	}
	if len(final) == 0 {
		return nil
	}
	if _, err := r.Announce.InvoicesFinalized(ctx, final); err != nil {
		return fmt.Errorf("tell of %d finalized invoices: %w", len(final), err)
	}
	return nil
}

// utcMonth is the UTC calendar month holding t, as raw samples are
// partitioned (toYYYYMM of a UTC time).
func utcMonth(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}
