package credits

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/pricing"
)

// memLedger is a grant ledger in memory; reading one tenant's grants can
// be made to fail.
type memLedger struct {
	grants []Grant
	broken string
}

func (m *memLedger) SaveGrant(_ context.Context, g Grant) error {
	m.grants = append(m.grants, g)
	return nil
}
func (m *memLedger) Grants(_ context.Context, tenant string) ([]Grant, error) {
	if tenant != "" && tenant == m.broken {
		return nil, errors.New("ledger unreachable")
	}
	var out []Grant
	for _, g := range m.grants {
		if tenant == "" || g.Tenant == tenant {
			out = append(out, g)
		}
	}
	return out, nil
}
func (m *memLedger) Grant(context.Context, string) (Grant, error) {
	return Grant{}, fault.NotFoundf("no")
}
func (m *memLedger) VoidGrant(context.Context, string, time.Time, string) (Grant, error) {
	return Grant{}, errors.New("not here")
}

// hourly charges 1 USD an hour of usage from a time on.
type hourly struct{ from time.Time }

func (h hourly) Charges(_ context.Context, _ string, _, to time.Time) ([]Charge, time.Time, error) {
	asOf := to.Truncate(time.Hour)
	var out []Charge
	for at := h.from; at.Before(asOf); at = at.Add(time.Hour) {
		out = append(out, Charge{At: at, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: decimal.NewFromInt(1), Amount: decimal.NewFromInt(1)})
	}
	return out, asOf, nil
}

// memPublisher is an outbox in memory: each notice once, by key.
type memPublisher struct{ got []Notice }

func (m *memPublisher) CreditNotices(_ context.Context, ns []Notice) (int, error) {
	fresh := m.unpublished(ns)
	m.got = append(m.got, fresh...)
	return len(fresh), nil
}

func (m *memPublisher) UnpublishedCreditNotices(_ context.Context, ns []Notice) (int, error) {
	return len(m.unpublished(ns)), nil
}

func (m *memPublisher) unpublished(ns []Notice) []Notice {
	var fresh []Notice
	for _, n := range ns {
		if !slices.ContainsFunc(m.got, func(o Notice) bool { return o.Key == n.Key }) &&
			!slices.ContainsFunc(fresh, func(o Notice) bool { return o.Key == n.Key }) {
			fresh = append(fresh, n)
		}
	}
	return fresh
}

// A run writes the allowances due, reads every customer's balance and
// publishes what is due; a customer whose balance cannot be read does not
// keep the others' notices back, and fails the run.
func TestJobRun(t *testing.T) {
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	now := nov.Add(60 * time.Hour)
	customers := []Customer{
		{Tenant: "acme", Currency: "USD", Plan: Plan{Recurring: []Recurring{{Series: "m", Kind: Promotional, Amount: decimal.NewFromInt(100), Start: "2026-10"}}}},
		{Tenant: "broken", Currency: "USD"},
	}
	ledger := &memLedger{broken: "broken"}
	svc := NewService(ledger, hourly{from: nov}, customers, func() time.Time { return now })
	pub := &memPublisher{}
	job := NewJob(svc, pub, DefaultSettings(), func() time.Time { return now }, slog.New(slog.DiscardHandler))
	rep, err := job.Run(context.Background())
	if err == nil || rep.Failed != 1 || rep.Customers != 1 || rep.Recurring != 2 || len(ledger.grants) != 2 {
		t.Fatalf("run: %+v, %v; want October's and November's allowance, acme read, broken failed", rep, err)
	}
	// November's 100 USD, 60 hours used: 40 % left, the 50 % threshold.
	if rep.Due != 1 || rep.Published != 1 || len(pub.got) != 1 || pub.got[0].Kind != NoticeThreshold || pub.got[0].Threshold != 50 ||
		!pub.got[0].Remaining.Equal(decimal.NewFromInt(40)) {
		t.Errorf("published %+v (report %+v)", pub.got, rep)
	}
	ledger.broken = ""
	if rep, err := job.Run(context.Background()); err != nil || rep.Recurring != 0 || rep.Customers != 2 {
		t.Errorf("again, all readable: %+v, %v", rep, err)
	}
}

// countingLedger is a memLedger counting its reads.
type countingLedger struct {
	memLedger
	reads int
}

func (c *countingLedger) Grants(ctx context.Context, tenant string) ([]Grant, error) {
	c.reads++
	return c.memLedger.Grants(ctx, tenant)
}

// A ledger without grants (none stored, no allowance due yet) is one read:
// no lock, no usage priced, nothing published, every customer counted as
// read. A run with something to write (an allowance, a notice) holds the
// lock while it writes; one whose notices are all published already reads
// what it needs to know that and takes no lock.
func TestJobRunTakesTheLockOnlyToWrite(t *testing.T) {
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	now := nov.Add(60 * time.Hour)
	customers := []Customer{
		{Tenant: "acme", Currency: "USD", Plan: Plan{Recurring: []Recurring{{Series: "m", Kind: Promotional, Amount: decimal.NewFromInt(100), Start: "2026-12"}}}},
		{Tenant: "globex", Currency: "USD"},
	}
	ledger := &countingLedger{}
	charger := &countingCharger{Charger: hourly{from: nov}}
	svc := NewService(ledger, charger, customers, func() time.Time { return now })
	pub := &memPublisher{}
	locks, releases := 0, 0
	job := NewJob(svc, pub, DefaultSettings(), func() time.Time { return now }, slog.New(slog.DiscardHandler)).
		WithLock(func(context.Context) (func(), error) { locks++; return func() { releases++ }, nil })
	rep, err := job.Run(context.Background())
	if err != nil || rep != (JobReport{Customers: 2}) {
		t.Fatalf("empty ledger: %+v, %v; want both customers read, nothing else", rep, err)
	}
	if ledger.reads != 1 || charger.calls != 0 || locks != 0 || len(pub.got) != 0 {
		t.Errorf("empty ledger: %d ledger reads, %d usage reads, %d locks, %d notices; want 1, 0, 0, 0", ledger.reads, charger.calls, locks, len(pub.got))
	}

	// December's allowance is due: written, burnt, under the lock.
	now = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	charger.Charger = hourly{from: now.Truncate(24 * time.Hour)}
	rep, err = job.Run(context.Background())
	if err != nil || rep.Recurring != 1 || rep.Customers != 2 || rep.Published != 0 || charger.calls != 1 || locks != 1 || releases != 1 {
		t.Errorf("allowance due: %+v, %v, %d usage reads, %d locks, %d releases; want 1 grant, 2 customers, 1, 1, 1", rep, err, charger.calls, locks, releases)
	}

	// 60 of its 100 USD used: the 50 % threshold is due, and published
	// under the lock; the next run finds it published and takes no lock.
	now = now.Add(50 * time.Hour)
	want := JobReport{Customers: 2, Due: 1, Published: 1}
	if rep, err := job.Run(context.Background()); err != nil || rep != want || locks != 2 || releases != 2 || len(pub.got) != 1 {
		t.Errorf("threshold due: %+v, %v, %d locks, %d releases, %d published; want %+v, 2, 2, 1", rep, err, locks, releases, len(pub.got), want)
	}
	want.Published = 0
	if rep, err := job.Run(context.Background()); err != nil || rep != want || locks != 2 || len(pub.got) != 1 {
		t.Errorf("threshold published: %+v, %v, %d locks, %d published; want %+v, 2, 1", rep, err, locks, len(pub.got), want)
	}
}

// countingCharger counts the usage reads of a Charger.
type countingCharger struct {
	Charger
	calls int
}

func (c *countingCharger) Charges(ctx context.Context, tenant string, from, to time.Time) ([]Charge, time.Time, error) {
	c.calls++
	return c.Charger.Charges(ctx, tenant, from, to)
}

// A lock that cannot be taken ends the run before anything is written.
func TestJobRunLockRefused(t *testing.T) {
	now := time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	ledger := &memLedger{}
	customers := []Customer{{Tenant: "acme", Currency: "USD", Plan: Plan{Recurring: []Recurring{{Series: "m", Kind: Promotional,
		Amount: decimal.NewFromInt(100), Start: "2026-11"}}}}}
	svc := NewService(ledger, hourly{from: now}, customers, func() time.Time { return now })
	held := errors.New("held by another run")
	job := NewJob(svc, &memPublisher{}, DefaultSettings(), func() time.Time { return now }, slog.New(slog.DiscardHandler)).
		WithLock(func(context.Context) (func(), error) { return nil, held })
	if rep, err := job.Run(context.Background()); !errors.Is(err, held) || rep != (JobReport{}) || len(ledger.grants) != 0 {
		t.Errorf("lock refused: %+v, %v, %d grants written; want the lock's error and nothing written", rep, err, len(ledger.grants))
	}
}
