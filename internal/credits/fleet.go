package credits

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// FleetCharger is a Charger that prices every customer's usage in one
// pass (the usage domain): the charges of each customer named in from
// (from that time on) up to to (or now, if earlier), each customer's
// handed to each with the hour they run to, or the error that kept them
// from being priced. each may be called from several goroutines at once,
// once per customer, in any order; charges may be reused after it
// returns. An error of each, or of a read, ends the pass.
type FleetCharger interface {
	FleetCharges(ctx context.Context, from map[string]time.Time, to time.Time,
		each func(tenant string, charges []Charge, asOf time.Time, err error) error) error
}

// FleetBalance is one customer's burn-down as of a time, or the error
// that kept it from being derived.
type FleetBalance struct {
	Customer Customer
	// Result has no draws on the fleet path (Balances); its balances and
	// uncovered money are BalanceAt's, to the last digit.
	Result Result
	Err    error
}

// FleetBalances burns every billing customer's grants down against its
// priced usage up to at (or now, if earlier), in the customers' order:
// one read of the grant ledger, and the usage of all of them read and
// priced in one pass when the charger can (FleetCharger), otherwise one
// BalanceAt per customer. A customer whose usage cannot be priced or
// whose grants cannot be burnt carries its error and keeps the others'
// balances; an error reading the ledger or the usage is the call's.
func (s *Service) FleetBalances(ctx context.Context, at time.Time) ([]FleetBalance, error) {
	out := make([]FleetBalance, len(s.customers))
	fc, ok := s.charges.(FleetCharger)
	if !ok {
		for i, c := range s.customers {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			r, err := s.BalanceAt(ctx, c.Tenant, at)
			out[i] = FleetBalance{Customer: c, Result: r, Err: err}
		}
		return out, nil
	}
	grants, err := s.Grants(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("fleet balances: %w", err)
	}
	byTenant := map[string][]Grant{}
	for _, g := range grants { // in each tenant's order, as Grants of one gives it
		byTenant[g.Tenant] = append(byTenant[g.Tenant], g)
	}
	index := map[string]int{}
	from := map[string]time.Time{}
	for i, c := range s.customers {
		out[i] = FleetBalance{Customer: c, Result: Result{AsOf: at.UTC().Truncate(time.Hour), Uncovered: decimal.Zero}}
		if _, dup := index[c.Tenant]; dup {
			continue
		}
		index[c.Tenant] = i
		gs := byTenant[c.Tenant]
		if len(gs) == 0 {
			continue // no grant: nothing to burn, as BalanceAt says
		}
		// Usage before the first grant no grant could cover.
		first := gs[0].EffectiveAt
		for _, g := range gs {
			first = minTime(first, g.EffectiveAt)
		}
		from[c.Tenant] = first
	}
	// Called concurrently: index is only read, and each call writes its
	// own customer's entries.
	done := make([]bool, len(s.customers))
	var mu sync.Mutex
	err = fc.FleetCharges(ctx, from, at, func(tenant string, charges []Charge, asOf time.Time, err error) error {
		i, ok := index[tenant]
		mu.Lock()
		again := ok && done[i]
		if ok {
			done[i] = true
		}
		mu.Unlock()
		if !ok || again {
			return nil
		}
		if err == nil {
			out[i].Result, err = Balances(byTenant[tenant], charges, asOf)
		}
		if err != nil {
			out[i].Result, out[i].Err = Result{}, fmt.Errorf("balance of %s: %w", tenant, err)
		}
		return ctx.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("fleet balances: %w", err)
	}
	for tenant := range from {
		if i := index[tenant]; !done[i] {
			out[i].Result, out[i].Err = Result{}, fmt.Errorf("balance of %s: its usage was not priced", tenant)
		}
	}
	// A tenant configured twice has the first one's balance.
	for i, c := range s.customers {
		if j := index[c.Tenant]; j != i {
			out[i].Result, out[i].Err = out[j].Result, out[j].Err
		}
	}
	return out, nil
}
