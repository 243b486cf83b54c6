package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/pricing"
)

// HourlyUsage reads the hourly rollups of [from, to) per tenant, hour and
// SKU; tenant "" reads every tenant.
func (s *Store) HourlyUsage(ctx context.Context, from, to time.Time, tenant string) ([]billing.HourlyMeters, error) {
	sql, args := billingUsageSQL(from, to, tenant)
	what := fmt.Sprintf("hourly usage %s..%s", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	return queryAll(ctx, s, what, sql, args, func(scan scanFunc) (billing.HourlyMeters, error) {
		var h billing.HourlyMeters
		err := scan(meterDest([]any{&h.Tenant, &h.Hour, &h.SKU}, &h.Values)...)
		h.Hour = h.Hour.UTC()
		return h, err
	})
}

// billingUsageSQL is HourlyUsage's statement and arguments.
func billingUsageSQL(from, to time.Time, tenant string) (string, []any) {
	q := "SELECT tenant, hour, sku, " + meterColumns("sum") + " FROM usage_hourly FINAL WHERE hour >= ? AND hour < ?"
	args := []any{from.UTC(), to.UTC()}
	if tenant != "" {
		q += " AND tenant = ?"
		args = append(args, tenant)
	}
	return q + " GROUP BY tenant, hour, sku", args
}

// rollupVersionsSQL is RollupVersions' statement; its arguments are from
// and to.
const rollupVersionsSQL = "SELECT tenant, max(version) FROM usage_hourly WHERE hour >= ? AND hour < ? GROUP BY tenant"

// chargebackUsageSQL is ChargebackHours' statement; its arguments are from
// and to.
var chargebackUsageSQL = "SELECT hour, tenant, department, sku, " + meterColumns("sum") +
	", " + unmeasuredColumns("sum") + " FROM usage_hourly FINAL" +
	" WHERE hour >= ? AND hour < ? AND samples > 0 GROUP BY hour, tenant, department, sku ORDER BY hour, tenant, department, sku"

// RollupVersions is the highest usage_hourly version per tenant in
// [from, to): the highest version of a key is the one FINAL keeps, so no
// FINAL is needed to find it.
func (s *Store) RollupVersions(ctx context.Context, from, to time.Time) (map[string]uint64, error) {
	return queryMap[string, uint64](ctx, s, "rollup versions", rollupVersionsSQL, from.UTC(), to.UTC())
}

// invoicesSQL reads every invoice of an issuer, its argument.
const invoicesSQL = "SELECT revision, document FROM invoices FINAL WHERE issuer = ?"

// Invoices reads the latest revision of every invoice of the issuer.
func (s *Store) Invoices(ctx context.Context, issuer string) ([]billing.StoredInvoice, error) {
	return s.scanInvoices(ctx, "read invoices of "+issuer, invoicesSQL, issuer)
}

// SaveInvoices writes the invoices' lines, then the invoices, one insert
// each. Lines go first: a run cut short between the two leaves lines no
// current revision points at, which the repeated run overwrites. Readers
// of invoice_lines take the lines of an invoice's current revision up to
// its line_count, so lines left over by a cut-short run never count.
func (s *Store) SaveInvoices(ctx context.Context, invs []billing.StoredInvoice) error {
	if len(invs) == 0 {
		return nil
	}
	var lines [][]any
	for _, si := range invs {
		lines = append(lines, invoiceLineRows(si)...)
	}
	// A line row holds its invoice's id second and its number fourth.
	lineName := func(i int) string { return fmt.Sprintf("save invoice %s line %d", lines[i][1], lines[i][3]) }
	if err := s.insert(ctx, "save invoice lines", insertInvoiceLinesSQL, lines, lineName); err != nil {
		return err
	}
	now := time.Now().UTC()
	rows := make([][]any, len(invs))
	for i, si := range invs {
		rows[i] = invoiceRow(si, now)
	}
	return s.insert(ctx, "save invoices", insertInvoicesSQL, rows, func(i int) string { return "save invoice " + invs[i].Invoice.ID })
}

// The statements that write invoices (internal/chdbcheck runs them on chDB
// too), with the rows of one invoice.
const (
	insertInvoiceLinesSQL = "INSERT INTO invoice_lines (issuer, invoice_id, revision, line_no, tenant, period_label, " +
		"kind, sku, meter, description, line_from, line_to, quantity, unit, amount, amount_minor, currency, adjusts_period, adjusts_invoice)"
	insertInvoicesSQL = "INSERT INTO invoices (issuer, invoice_id, revision, tenant, department, period_label, " +
		"period_start, period_end, status, number, seq, sequence_key, currency, subtotal_minor, tax_minor, total_minor, " +
		"book_version, book_digest, contract_digest, inputs_hash, rollup_version, document, created_at, written_at, line_count)"
)

// invoiceLineRows are the rows of insertInvoiceLinesSQL for si's lines.
func invoiceLineRows(si billing.StoredInvoice) [][]any {
	inv := si.Invoice
	out := make([][]any, 0, len(inv.Lines))
	for _, l := range inv.Lines {
		out = append(out, []any{inv.Issuer.ID, inv.ID, si.Revision, uint32(l.No), inv.Tenant, inv.PeriodLabel,
			string(l.Kind), l.SKU, string(l.Meter), l.Description, l.From.UTC(), l.To.UTC(),
			storageDecimal(l.Quantity), l.Unit, storageDecimal(l.Amount), l.AmountMinor, inv.Currency.Code,
			l.AdjustsPeriod, l.AdjustsInvoice})
	}
	return out
}

// invoiceRow is the row of insertInvoicesSQL for si, written at now.
func invoiceRow(si billing.StoredInvoice, now time.Time) []any {
	inv := si.Invoice
	return []any{inv.Issuer.ID, inv.ID, si.Revision, inv.Tenant, inv.Customer.Department, inv.PeriodLabel,
		inv.PeriodStart.UTC(), inv.PeriodEnd.UTC(), string(inv.Status), inv.Number, inv.Seq, inv.SequenceKey,
		inv.Currency.Code, inv.SubtotalMinor, inv.TaxMinor, inv.TotalMinor, inv.BookVersion, inv.BookDigest,
		inv.ContractDigest, inv.InputsHash, inv.RollupVersion, string(si.Document), inv.CreatedAt.UTC(), now.UTC(), uint32(len(inv.Lines))}
}

// storageDecimal fits a quantity or amount into Decimal(38, 9).
func storageDecimal(d decimal.Decimal) decimal.Decimal { return d.Round(pricing.StoragePlaces) }

// ChargebackHours reads the hourly rollups of [from, to) per hour,
// tenant, department and SKU, idle capacity (tenant "") included, with
// the GPU time each meter group left unmeasured.
func (s *Store) ChargebackHours(ctx context.Context, from, to time.Time) ([]billing.HourlyMeters, error) {
	return queryAll(ctx, s, "chargeback usage", chargebackUsageSQL, []any{from.UTC(), to.UTC()},
		func(scan scanFunc) (billing.HourlyMeters, error) {
			var h billing.HourlyMeters
			err := scan(totalsDest([]any{&h.Hour, &h.Tenant, &h.Department, &h.SKU}, &h.Totals)...)
			h.Hour = h.Hour.UTC()
			return h, err
		})
}

var (
	_ billing.ScopedInvoiceStore = (*Store)(nil)
	_ billing.ChargebackStore    = (*Store)(nil)
)

// InvoiceQuery is billing.InvoiceQuery as the store runs it: the scope is
// applied in SQL, so no field can widen it.
type InvoiceQuery billing.InvoiceQuery

// InvoicesFor lists the latest revision of the issuer's invoices in the
// query's scope, by invoice id.
func (s *Store) InvoicesFor(ctx context.Context, q billing.InvoiceQuery) ([]billing.StoredInvoice, error) {
	if err := q.Scope.Validate(); err != nil {
		return nil, fmt.Errorf("list invoices: %w", err)
	}
	sql, args := InvoiceQuery(q).toSQL()
	return s.scanInvoices(ctx, "list invoices", sql, args...)
}

// toSQL is InvoicesFor's statement and arguments for a validated scope.
func (q InvoiceQuery) toSQL() (string, []any) {
	where := []string{"issuer = ?"}
	args := []any{q.Issuer}
	add := func(cond string, v any) { where = append(where, cond); args = append(args, v) }
	if !q.Drafts {
		add(notDraft, string(billing.StatusDraft))
	}
	conds, scopeArgs := scopeWhere(q.Scope)
	where, args = append(where, conds...), append(args, scopeArgs...)
	if q.Period != "" {
		add("period_label = ?", q.Period)
	}
	if q.Tenant != "" {
		add("tenant = ?", q.Tenant)
	}
	if q.After != "" {
		add("invoice_id > ?", q.After)
	}
	limit := q.Limit
	if limit <= 0 || limit > 1001 { // a page of 1,000 and one more, to know another follows
		limit = 1001
	}
	return "SELECT revision, document FROM invoices FINAL WHERE " + strings.Join(where, " AND ") +
		" ORDER BY invoice_id LIMIT " + strconv.Itoa(limit), args
}

// notDraft leaves drafts out; its argument is billing.StatusDraft. Applied
// with FINAL it gives the same rows before or after the merge, since an
// invoice's status only moves from draft to finalized to void: no draft
// revision ever follows a finalized one.
const notDraft = "status != ?"

// InvoiceFor reads one invoice by id or number within the scope; one
// outside it is as absent as one that never existed, and so is a draft
// unless drafts is set (operators; customers never see drafts).
func (s *Store) InvoiceFor(ctx context.Context, issuer string, scope auth.Scope, ref string, drafts bool) (billing.StoredInvoice, error) {
	if err := scope.Validate(); err != nil {
		return billing.StoredInvoice{}, fmt.Errorf("read invoice: %w", err)
	}
	sql, args := invoiceForSQL(issuer, scope, ref, drafts)
	invs, err := s.scanInvoices(ctx, "read invoice", sql, args...)
	if err != nil {
		return billing.StoredInvoice{}, err
	}
	if len(invs) == 0 {
		return billing.StoredInvoice{}, fmt.Errorf("invoice %q: %w", ref, billing.ErrNotFound)
	}
	return invs[0], nil
}

// invoiceForSQL is InvoiceFor's statement and arguments for a validated
// scope.
func invoiceForSQL(issuer string, scope auth.Scope, ref string, drafts bool) (string, []any) {
	where := []string{"issuer = ?", "(invoice_id = ? OR (number = ? AND number != ''))"}
	args := []any{issuer, ref, ref}
	if !drafts {
		where, args = append(where, notDraft), append(args, string(billing.StatusDraft))
	}
	conds, scopeArgs := scopeWhere(scope)
	where, args = append(where, conds...), append(args, scopeArgs...)
	return "SELECT revision, document FROM invoices FINAL WHERE " + strings.Join(where, " AND "), args
}

func (s *Store) scanInvoices(ctx context.Context, what, sql string, args ...any) ([]billing.StoredInvoice, error) {
	return queryAll(ctx, s, what, sql, args, func(scan scanFunc) (billing.StoredInvoice, error) {
		var rev uint64
		var doc string
		if err := scan(&rev, &doc); err != nil {
			return billing.StoredInvoice{}, err
		}
		inv, err := billing.ParseDocument([]byte(doc))
		if err != nil {
			return billing.StoredInvoice{}, fmt.Errorf("%s: revision %d: %w", what, rev, err)
		}
		return billing.StoredInvoice{Invoice: inv, Revision: rev, Document: []byte(doc)}, nil
	})
}
