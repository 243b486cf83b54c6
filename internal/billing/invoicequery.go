package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/fault"
)

// Reading invoices in an API key's scope: what /v1/invoices serves.

// InvoiceQuery lists invoices as an API key may see them: the store
// applies the scope in SQL, so no field can widen it.
type InvoiceQuery struct {
	Issuer string
	Scope  auth.Scope
	Period string // "" for all
	Tenant string // "" for all the scope allows
	// After is the last invoice id of the previous page; Limit bounds the page.
	After string
	Limit int
	// Drafts includes draft invoices, which only operators review;
	// without it (customers) only finalized and void invoices are listed.
	Drafts bool
}

// ScopedInvoiceStore is what InvoiceService reads (internal/store).
type ScopedInvoiceStore interface {
	InvoicesFor(ctx context.Context, q InvoiceQuery) ([]StoredInvoice, error)
	// InvoiceFor reads one invoice by id or number within the scope (an
	// error wrapping ErrNotFound outside it); drafts only with drafts set.
	InvoiceFor(ctx context.Context, issuer string, scope auth.Scope, ref string, drafts bool) (StoredInvoice, error)
}

// InvoiceListRequest lists invoices in the caller's scope.
type InvoiceListRequest struct {
	Scope auth.Scope
	// Portal: the caller holds a portal token, a customer's view whatever
	// its scope (no drafts).
	Portal bool
	Period string // YYYY-MM, "" for all
	Tenant string
	After  string // page token: the last id of the previous page
	Limit  int    // 0: the store's largest page
}

// Validate reports every problem.
func (r InvoiceListRequest) Validate() error {
	var errs []error
	if r.Period != "" {
		if _, err := MonthlyPeriod(r.Period, time.UTC); err != nil {
			errs = append(errs, fmt.Errorf("period: %w", err))
		}
	}
	if r.Limit < 0 {
		errs = append(errs, fmt.Errorf("limit %d: must not be negative", r.Limit))
	}
	return fault.Validation(errors.Join(errs...))
}

// maxInvoiceRef bounds an invoice reference: ids are tenant/period/n.
const maxInvoiceRef = 200

// InvoiceRequest is one invoice by id (tenant/period/n) or number, in the
// caller's scope.
type InvoiceRequest struct {
	Scope  auth.Scope
	Portal bool // as in InvoiceListRequest
	Ref    string
}

// Validate reports a missing or overlong reference.
func (r InvoiceRequest) Validate() error {
	if r.Ref == "" || len(r.Ref) > maxInvoiceRef {
		return fault.Validation(errors.New("invoice: give an id (tenant/period/n) or a number"))
	}
	return nil
}

// InvoiceService reads the issuer's invoices in a caller's scope.
type InvoiceService struct {
	store  ScopedInvoiceStore
	issuer string
}

// NewInvoiceService reads the invoices issuer issued (Customers.Issuer.ID).
func NewInvoiceService(st ScopedInvoiceStore, issuer string) *InvoiceService {
	return &InvoiceService{store: st, issuer: issuer}
}

// Invoices lists the issuer's invoices in the request's scope: drafts
// only for operators (seesDrafts).
func (s *InvoiceService) Invoices(ctx context.Context, r InvoiceListRequest) ([]StoredInvoice, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return s.store.InvoicesFor(ctx, InvoiceQuery{Issuer: s.issuer, Scope: r.Scope, Period: r.Period, Tenant: r.Tenant,
		After: r.After, Limit: r.Limit, Drafts: seesDrafts(r.Scope, r.Portal)})
}

// Invoice reads one invoice in the scope; a draft is as absent to a
// customer as another tenant's invoice.
func (s *InvoiceService) Invoice(ctx context.Context, r InvoiceRequest) (StoredInvoice, error) {
	if err := r.Validate(); err != nil {
		return StoredInvoice{}, err
	}
	return s.store.InvoiceFor(ctx, s.issuer, r.Scope, r.Ref, seesDrafts(r.Scope, r.Portal))
}

// seesDrafts says whether a caller reviews drafts: operators (admin and
// department API keys) do; customers (tenant keys, and every portal token,
// which is handed to people outside operations) see an invoice once it is
// finalized.
func seesDrafts(scope auth.Scope, portal bool) bool {
	return !portal && (scope.Kind == auth.KindAdmin || scope.Kind == auth.KindDepartment)
}
