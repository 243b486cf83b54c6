package quota

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/credits"
)

// CreditBalances burns a customer's grants down against its priced usage
// up to now (credits.Service meets it).
type CreditBalances interface {
	Balance(ctx context.Context, tenant string) (credits.Result, error)
}

// creditGate refuses credit_only customers' work their balance cannot
// cover over the horizon (docs/credits.md, "Admission"). Balances are
// read by the refresher, like the rest of the snapshot, so admission
// decides from memory; credits.Holds keeps what admitted work holds.
type creditGate struct {
	balances  CreditBalances
	settings  credits.Settings
	customers map[string]credits.Customer // credit_only customers only
	holds     *credits.Holds

	// The holds not yet written to the admission log (LogAdmissions).
	logging   atomic.Bool
	unwritten logQueue[CreditHold]
}

// logged queues a hold for the admission log.
func (g *creditGate) logged(h CreditHold) {
	if g.logging.Load() {
		g.unwritten.add(h)
	}
}

// restore replaces the holds with those the log kept (a new leader's
// rebuild): credit_only tenants' only, since config decides who is gated.
func (g *creditGate) restore(hs []CreditHold) {
	if g == nil {
		return
	}
	byTenant := map[string][]credits.Hold{}
	for _, h := range hs {
		if g.gates(h.Tenant) {
			byTenant[h.Tenant] = append(byTenant[h.Tenant], h.Hold)
		}
	}
	g.holds.Restore(byTenant)
}

// GateCredits makes admission check credit_only customers' balances
// (billing.customers[].credits.settlement) under settings' horizon; other
// customers and tenants are decided as before. Call it before Run and
// the first admission.
func (q *Service) GateCredits(balances CreditBalances, settings credits.Settings) error {
	if err := settings.Validate(); err != nil {
		return err
	}
	cs, err := q.customers.CreditCustomers()
	if err != nil {
		return err
	}
	g := &creditGate{balances: balances, settings: settings, customers: map[string]credits.Customer{}, holds: credits.NewHolds()}
	g.logging.Store(q.log != nil)
	for _, c := range cs {
		if c.Plan.Settlement == credits.CreditOnly {
			g.customers[c.Tenant] = c
		}
	}
	q.gate = g
	return nil
}

func (g *creditGate) gates(tenant string) bool {
	if g == nil {
		return false
	}
	_, ok := g.customers[tenant]
	return ok
}

// refresh reads every credit_only customer's balance and installs it with
// the snapshot's rates; a customer whose balance cannot be read keeps its
// last one, which turns stale.
func (g *creditGate) refresh(ctx context.Context, s Snapshot) error {
	if g == nil {
		return nil
	}
	var errs []error
	for tenant, c := range g.customers {
		res, err := g.balances.Balance(ctx, tenant)
		if err != nil {
			errs = append(errs, fmt.Errorf("credit balance of %s: %w", tenant, err))
			continue
		}
		g.holds.SetCover(tenant, credits.CoverOf(c, res, s.Tenants[tenant].SpendRate, s.At))
	}
	return errors.Join(errs...)
}

// admitCredit decides a credit_only customer's requests (validated): the credit
// under the tenant's lock, then, when it covers them, the quotas, and the
// credit hold only when both admit.
func (q *Service) admitCredit(rs []Request) (Decision, error) {
	tenant := rs[0].Tenant
	needs := make([]credits.Need, 0, len(rs))
	demand := Demand{}
	for _, r := range rs {
		gpus, err := r.GPUEquivalents()
		if err != nil {
			return Decision{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		needs = append(needs, credits.Need{SKU: r.SKU(), GPUs: gpus})
		hours := decimal.NewFromInt(int64(r.Duration)).DivRound(decimal.NewFromInt(int64(time.Hour)), 18)
		demand.GPUs, demand.GPUHours = demand.GPUs.Add(gpus), demand.GPUHours.Add(gpus.Mul(hours))
	}
	policy := credits.Policy{Horizon: q.gate.settings.Horizon, StaleAfter: q.cfg.StaleAfter, FailOpen: q.cfg.OnStale == FailOpen}
	var d Decision
	chk, err := q.gate.holds.Admit(tenant, needs, policy, q.now(), func() (string, error) {
		var err error
		d, err = q.eval.AdmitAll(rs)
		if err != nil || !d.Allowed {
			return "", err
		}
		return d.ID, nil
	})
	if err != nil {
		return Decision{}, err
	}
	if !chk.Allowed {
		// The quotas were not asked: the spend over the request's own
		// duration is priced here, at the rates the credit used.
		_, cover, _ := q.gate.holds.Held(tenant)
		for i, n := range needs {
			hours := decimal.NewFromInt(int64(rs[i].Duration)).DivRound(decimal.NewFromInt(int64(time.Hour)), 18)
			demand.Spend = demand.Spend.Add(n.GPUs.Mul(hours).Mul(cover.Rates[n.SKU]))
		}
		return Decision{Reason: chk.Reason, Headroom: map[Metric]decimal.Decimal{}, Demand: demand, Stale: chk.Stale,
			DryRun: rs[0].DryRun, CreditRefused: true}, nil
	}
	if d.Allowed {
		d.Reason += "; " + chk.Reason
	}
	if d.Allowed && d.ID != "" {
		q.gate.logged(CreditHold{Tenant: tenant, Hold: chk.Take})
	}
	if chk.Stale {
		d.Stale = true
		d.Warnings = append(d.Warnings, chk.Reason)
	}
	return d, nil
}

// CreditHeld is what a credit_only tenant's admitted work holds now, and
// the cover it holds against (false when no balance has been read or the
// tenant is not credit_only).
func (q *Service) CreditHeld(tenant string) (credits.Held, credits.Cover, bool) {
	if !q.gate.gates(tenant) {
		return credits.Held{}, credits.Cover{}, false
	}
	return q.gate.holds.Held(tenant)
}
