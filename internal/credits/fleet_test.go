package credits

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// fleetHourly is hourly as a FleetCharger: each customer's charges from
// one call, one customer's pricing failing, or the whole pass.
type fleetHourly struct {
	hourly
	failTenant string
	failAll    bool
	calls      int
}

func (f *fleetHourly) FleetCharges(ctx context.Context, from map[string]time.Time, to time.Time,
	each func(string, []Charge, time.Time, error) error) error {
	f.calls++
	if f.failAll {
		return errors.New("usage unreachable")
	}
	for tenant, start := range from {
		charges, asOf, err := f.Charges(ctx, tenant, start, to)
		if tenant == f.failTenant {
			charges, err = nil, errors.New("book unreadable")
		}
		if err := each(tenant, charges, asOf, err); err != nil {
			return err
		}
	}
	return nil
}

// FleetBalances gives each customer what BalanceAt gives it (without the
// draws), in the customers' order, from one pass of a FleetCharger; a
// customer that cannot be priced carries its error alone; a failed pass
// is the call's error; without a FleetCharger it asks BalanceAt per
// customer.
func TestFleetBalances(t *testing.T) {
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	now := nov.Add(60*time.Hour + 30*time.Minute)
	customers := []Customer{
		{Tenant: "zeta", Currency: "USD"},
		{Tenant: "acme", Currency: "USD", Plan: Plan{Recurring: []Recurring{{Series: "m", Kind: Promotional, Amount: decimal.NewFromInt(100), Start: "2026-10"}}}},
		{Tenant: "none", Currency: "USD"},
		{Tenant: "broken", Currency: "USD"},
	}
	ledger := &memLedger{}
	clock := func() time.Time { return now }
	for _, g := range []Grant{
		{ID: "z1", Tenant: "zeta", Kind: Prepaid, Amount: decimal.NewFromInt(50), Currency: "USD", EffectiveAt: nov.Add(10 * time.Hour)},
		{ID: "z2", Tenant: "zeta", Kind: Promotional, Amount: decimal.NewFromInt(20), Currency: "USD", EffectiveAt: nov, ExpiresAt: nov.Add(30 * time.Hour)},
		{ID: "b1", Tenant: "broken", Kind: Prepaid, Amount: decimal.NewFromInt(5), Currency: "USD", EffectiveAt: nov},
	} {
		ledger.grants = append(ledger.grants, g)
	}
	charger := &fleetHourly{hourly: hourly{from: nov}, failTenant: "broken"}
	svc := NewService(ledger, charger, customers, clock)
	perCustomer := NewService(ledger, charger.hourly, customers, clock)
	fleet, err := svc.FleetBalances(context.Background(), now)
	if err != nil || charger.calls != 1 || len(fleet) != len(customers) {
		t.Fatalf("fleet: %d balances, %d passes, %v", len(fleet), charger.calls, err)
	}
	fallback, err := perCustomer.FleetBalances(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range customers {
		one, err := svc.BalanceAt(context.Background(), c.Tenant, now)
		if err != nil {
			t.Fatal(err)
		}
		one.Draws = nil
		if fleet[i].Customer.Tenant != c.Tenant || fallback[i].Customer.Tenant != c.Tenant {
			t.Fatalf("#%d: %s and %s, want %s", i, fleet[i].Customer.Tenant, fallback[i].Customer.Tenant, c.Tenant)
		}
		if c.Tenant == "broken" {
			if fleet[i].Err == nil {
				t.Errorf("broken: no error")
			}
			continue
		}
		fallback[i].Result.Draws = nil
		// Two times from one pricing burn as two calls do.
		early := nov.Add(20 * time.Hour)
		both, err := svc.BalancesAt(context.Background(), c.Tenant, early, now)
		if err != nil {
			t.Fatal(err)
		}
		first, err := svc.BalanceAt(context.Background(), c.Tenant, early)
		if err != nil {
			t.Fatal(err)
		}
		if balanceFigures(both[0]) != balanceFigures(first) || balanceFigures(both[1]) != balanceFigures(one) {
			t.Errorf("BalancesAt %s: %s and %s, want %s and %s", c.Tenant, balanceFigures(both[0]), balanceFigures(both[1]),
				balanceFigures(first), balanceFigures(one))
		}
		for name, got := range map[string]FleetBalance{"fleet": fleet[i], "fallback": fallback[i]} {
			if got.Err != nil || balanceFigures(got.Result) != balanceFigures(one) {
				t.Errorf("%s %s: %s (%v), want %s", name, c.Tenant, balanceFigures(got.Result), got.Err, balanceFigures(one))
			}
		}
	}
	// zeta: 60 hours at 1 USD; the promotional 20 first (it expires),
	// then 40 of the prepaid 50 (z1, first by id).
	if z := fleet[0].Result; len(z.Balances) != 2 || !z.Balances[1].Used.Equal(decimal.NewFromInt(20)) ||
		!z.Balances[0].Used.Equal(decimal.NewFromInt(40)) {
		t.Errorf("zeta: %s", balanceFigures(z))
	}

	charger.failAll = true
	if _, err := svc.FleetBalances(context.Background(), now); err == nil {
		t.Error("a failed pass: no error")
	}
	// The job fails before publishing anything.
	pub := &memPublisher{}
	rep, err := NewJob(svc, pub, DefaultSettings(), clock, slog.New(slog.DiscardHandler)).Run(context.Background())
	if err == nil || len(pub.got) != 0 || rep.Customers != 0 {
		t.Errorf("job over a failed pass: %+v, %v, published %d", rep, err, len(pub.got))
	}
}

func balanceFigures(r Result) string {
	out := r.AsOf.UTC().Format(time.RFC3339) + " uncovered " + r.Uncovered.String()
	for _, b := range r.Balances {
		out += " | " + b.Grant.ID + " " + b.Granted.String() + " used " + b.Used.String() + " expired " + b.Expired.String() +
			" remaining " + b.Remaining.String() + " covered " + b.Covered.String()
	}
	return out
}
