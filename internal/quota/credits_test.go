package quota

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/pricing"
)

// noUsage is a fleet with nothing measured this month, priced by one book.
type noUsage struct{ book *pricing.Book }

func (noUsage) RollupState(context.Context) (rollup.State, error) { return rollup.State{}, nil }
func (noUsage) Rows(context.Context, usage.Query, rollup.State) ([]usage.Row, error) {
	return nil, nil
}
func (noUsage) HourlyUsage(context.Context, auth.Scope, string, time.Time, time.Time) ([]pricing.Usage, error) {
	return nil, nil
}
func (u noUsage) Pricing(billing.Customer) (*pricing.Book, *pricing.Contract, error) {
	return u.book, nil, nil
}

type noneLive struct{}

func (noneLive) LatestHoldings(context.Context, time.Time, time.Time) ([]Holding, error) {
	return nil, nil
}

// balances answers a prepaid balance per tenant, or err.
type balances struct {
	left  map[string]decimal.Decimal
	asOf  time.Time
	err   error
	reads int
}

func (b *balances) Balance(_ context.Context, tenant string) (credits.Result, error) {
	b.reads++
	if b.err != nil {
		return credits.Result{}, b.err
	}
	g := credits.Grant{ID: "cg_" + tenant, Tenant: tenant, Kind: credits.Prepaid, Amount: b.left[tenant], Currency: "USD",
		EffectiveAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	return credits.Result{AsOf: b.asOf, Balances: []credits.Balance{{Grant: g, Granted: g.Amount, Remaining: b.left[tenant]}}}, nil
}

const creditBook = `version: credit-gate-1
currency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}
skus:
  H100-SXM5-80GB: {meters: {gpu_hours: {unit_price: "3.00"}}}
`

// creditService is a quota service over no usage with astro credit_only
// and acme credit_then_invoice, both on creditBook, its clock at *now.
func creditService(t *testing.T, cfg Config, b *balances, now *time.Time) *Service {
	t.Helper()
	book, err := pricing.ParseBook([]byte(creditBook))
	if err != nil {
		t.Fatal(err)
	}
	cs := billing.Customers{Customers: []billing.Customer{
		{Tenant: "astro", Currency: "USD", Book: "book.yaml", Credits: credits.Plan{Settlement: credits.CreditOnly}},
		{Tenant: "acme", Currency: "USD", Book: "book.yaml"},
	}}
	q, err := NewService(noUsage{book}, noneLive{}, cs, cfg, func() time.Time { return *now }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.GateCredits(b, credits.DefaultSettings()); err != nil {
		t.Fatal(err)
	}
	return q
}

func h100s(tenant string, n int) []Request {
	return []Request{{Tenant: tenant, GPUModel: "H100-SXM5-80GB", Count: n, Duration: time.Hour}}
}

func TestCreditGate(t *testing.T) {
	admin := auth.Scope{Kind: auth.KindAdmin}
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 10, 20, 0, 0, time.UTC)

	t.Run("a credit refusal consults no quota and holds nothing", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Rules = []Rule{{Tenant: "astro", ConcurrentGPUs: &Limit{Limit: decimal.NewFromInt(100)}}}
		b := &balances{left: map[string]decimal.Decimal{"astro": decimal.NewFromInt(9)}, asOf: now.Truncate(time.Hour)}
		q := creditService(t, cfg, b, &now)
		if err := q.Refresh(ctx, nil); err != nil {
			t.Fatal(err)
		}
		d, err := q.AdmitAll(ctx, admin, h100s("astro", 4))
		if err != nil || d.Allowed || !d.CreditRefused || d.ID != "" ||
			!strings.Contains(d.Reason, "balance 9.00 USD, held 0.00 USD by 0 admitted, needed 12.00 USD") {
			t.Fatalf("4 GPUs on 9 USD: %+v %v", d, err)
		}
		states, _ := q.eval.State()
		if len(states) != 1 || !states[0].Admitted.IsZero() {
			t.Fatalf("quota state %+v: the refusal reserved quota", states)
		}
		d, err = q.AdmitAll(ctx, admin, h100s("astro", 3))
		if err != nil || !d.Allowed || d.ID == "" || !strings.HasPrefix(d.Reason, "within every quota; credit_only: balance 9.00 USD") {
			t.Fatalf("3 GPUs on 9 USD: %+v %v", d, err)
		}
		if states, _ := q.eval.State(); !states[0].Admitted.Equal(decimal.NewFromInt(3)) {
			t.Fatalf("quota state %+v: the admission holds 3 GPUs", states)
		}
	})

	t.Run("a shared GPU holds its share of the credit", func(t *testing.T) {
		b := &balances{left: map[string]decimal.Decimal{"astro": decimal.NewFromInt(3)}, asOf: now.Truncate(time.Hour)}
		q := creditService(t, DefaultConfig(), b, &now)
		if err := q.Refresh(ctx, nil); err != nil {
			t.Fatal(err)
		}
		quarter := h100s("astro", 1)
		quarter[0].Share = decimal.RequireFromString("0.25")
		for i := range 4 { // 0.75 USD each: four fit 3 USD exactly
			if d, err := q.AdmitAll(ctx, admin, quarter); err != nil || !d.Allowed {
				t.Fatalf("quarter %d: %+v %v", i+1, d, err)
			}
		}
		d, err := q.AdmitAll(ctx, admin, quarter)
		if err != nil || d.Allowed || !d.CreditRefused || !strings.Contains(d.Reason, "held 3.00 USD by 4 admitted") {
			t.Fatalf("a fifth quarter on 3 USD: %+v %v", d, err)
		}
	})

	t.Run("credit_then_invoice customers are not gated", func(t *testing.T) {
		b := &balances{left: map[string]decimal.Decimal{}, asOf: now.Truncate(time.Hour)}
		q := creditService(t, DefaultConfig(), b, &now)
		if err := q.Refresh(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if b.reads != 1 {
			t.Fatalf("balances read %d times, want astro's only", b.reads)
		}
		d, err := q.AdmitAll(ctx, admin, h100s("acme", 1000))
		if err != nil || !d.Allowed || d.Reason != "no quota applies" {
			t.Fatalf("acme: %+v %v", d, err)
		}
	})

	t.Run("an unreadable balance fails closed, by on_stale", func(t *testing.T) {
		b := &balances{err: errors.New("clickhouse down")}
		q := creditService(t, DefaultConfig(), b, &now)
		if err := q.Refresh(ctx, nil); err == nil || !strings.Contains(err.Error(), "credit balance of astro: clickhouse down") {
			t.Fatalf("refresh: %v", err)
		}
		d, err := q.AdmitAll(ctx, admin, h100s("astro", 1))
		if err != nil || d.Allowed || !d.Stale || !strings.Contains(d.Reason, "no credit balance read yet; failing closed") {
			t.Fatalf("%+v %v", d, err)
		}
	})

	t.Run("holds end once a balance has measured their horizon", func(t *testing.T) {
		now := now
		b := &balances{left: map[string]decimal.Decimal{"astro": decimal.NewFromInt(6)}, asOf: now.Truncate(time.Hour)}
		q := creditService(t, DefaultConfig(), b, &now)
		if err := q.Refresh(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if d, _ := q.AdmitAll(ctx, admin, h100s("astro", 2)); !d.Allowed {
			t.Fatal(d.Reason)
		}
		if d, _ := q.AdmitAll(ctx, admin, h100s("astro", 1)); d.Allowed {
			t.Fatal("admitted past the balance")
		}
		// 11:25: usage measured to 11:00, the hold runs to 11:20 and stays.
		now = now.Add(65 * time.Minute)
		b.asOf = now.Truncate(time.Hour)
		if err := q.Refresh(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if held, _, _ := q.CreditHeld("astro"); held.Count != 1 {
			t.Fatalf("held %+v at 11:25", held)
		}
		// 12:05: measured to 12:00; the balance shows the 6 USD spent and
		// a top-up of 3: one GPU fits again.
		now = now.Add(40 * time.Minute)
		b.asOf, b.left["astro"] = now.Truncate(time.Hour), decimal.NewFromInt(3)
		if err := q.Refresh(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if held, _, _ := q.CreditHeld("astro"); held.Count != 0 {
			t.Fatalf("held %+v at 12:05", held)
		}
		if d, _ := q.AdmitAll(ctx, admin, h100s("astro", 1)); !d.Allowed {
			t.Fatal(d.Reason)
		}
	})
}

// memLog is an admission log in memory, shared by a leader and its
// successor as the store's tables are.
type memLog struct {
	admitted []Admitted
	holds    []CreditHold
	fail     error
}

func (m *memLog) SaveAdmissions(_ context.Context, as []Admitted) error {
	if m.fail != nil {
		return m.fail
	}
	m.admitted = append(m.admitted, as...)
	return nil
}

func (m *memLog) HeldAdmissions(_ context.Context, now time.Time) ([]Admitted, error) {
	latest := map[string]Admitted{}
	var order []string
	for _, a := range m.admitted {
		k := a.ID + "/" + strconv.Itoa(a.Part)
		if _, ok := latest[k]; !ok {
			order = append(order, k)
		}
		if !latest[k].Released {
			latest[k] = a
		}
	}
	var out []Admitted
	for _, k := range order {
		if a := latest[k]; !a.Released && a.Expires.After(now) {
			out = append(out, a)
		}
	}
	return out, nil
}

func (m *memLog) SaveCreditHolds(_ context.Context, hs []CreditHold) error {
	if m.fail != nil {
		return m.fail
	}
	m.holds = append(m.holds, hs...)
	return nil
}

func (m *memLog) CreditHolds(_ context.Context, since time.Time) ([]CreditHold, error) {
	var out []CreditHold
	for _, h := range m.holds {
		if h.Until.After(since) {
			out = append(out, h)
		}
	}
	return out, nil
}

// A leader's credit holds go to the admission log with its admissions; a
// successor (fresh state, same log) rebuilds them and refuses what would
// take the balance below zero. A refusal or a dry run logs no hold, and
// holds the log refused are written on the next flush.
func TestCreditHoldsSurviveFailover(t *testing.T) {
	admin := auth.Scope{Kind: auth.KindAdmin}
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 10, 20, 0, 0, time.UTC)
	b := &balances{left: map[string]decimal.Decimal{"astro": decimal.NewFromInt(9)}, asOf: now.Truncate(time.Hour)}
	log := &memLog{fail: errors.New("clickhouse down")}

	old := creditService(t, DefaultConfig(), b, &now)
	old.LogAdmissions(log)
	if err := old.Refresh(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if d, err := old.AdmitAll(ctx, admin, h100s("astro", 2)); err != nil || !d.Allowed {
		t.Fatalf("2 GPUs on 9 USD: %+v %v", d, err)
	}
	dry := h100s("astro", 1)
	dry[0].DryRun = true
	if d, err := old.AdmitAll(ctx, admin, dry); err != nil || !d.Allowed {
		t.Fatalf("dry run: %+v %v", d, err)
	}
	if d, err := old.AdmitAll(ctx, admin, h100s("astro", 2)); err != nil || d.Allowed {
		t.Fatalf("2 more GPUs on the 3 USD left: %+v %v", d, err)
	}
	old.FlushLog(ctx) // refused: kept for the next try
	log.fail = nil
	old.FlushLog(ctx)
	if len(log.holds) != 1 || log.holds[0].Tenant != "astro" || !log.holds[0].Money.Equal(decimal.NewFromInt(6)) ||
		log.holds[0].ID == "" || !log.holds[0].Until.Equal(now.Add(time.Hour)) {
		t.Fatalf("logged holds %+v, want the one admission's 6 USD until 11:20", log.holds)
	}

	successor := creditService(t, DefaultConfig(), b, &now)
	successor.LogAdmissions(log)
	if err := successor.Refresh(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// Before the rebuild the successor would admit 3 GPUs on 9 USD.
	if err := successor.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := successor.AdmitAll(ctx, admin, h100s("astro", 2))
	if err != nil || d.Allowed || !d.CreditRefused || !strings.Contains(d.Reason, "balance 9.00 USD, held 6.00 USD by 1 admitted, needed 6.00 USD") {
		t.Fatalf("successor, 2 GPUs on 9 USD less 6 held: %+v %v", d, err)
	}
	if d, err := successor.AdmitAll(ctx, admin, h100s("astro", 1)); err != nil || !d.Allowed {
		t.Fatalf("successor, 1 GPU on the 3 USD left: %+v %v", d, err)
	}
	if held, _, _ := successor.CreditHeld("astro"); held.Count != 2 || !held.Money.Equal(decimal.NewFromInt(9)) {
		t.Fatalf("successor holds %+v, want 9 USD by 2", held)
	}
	// Without a log nothing is queued.
	plain := creditService(t, DefaultConfig(), b, &now)
	if err := plain.Refresh(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if d, _ := plain.AdmitAll(ctx, admin, h100s("astro", 1)); !d.Allowed {
		t.Fatal(d.Reason)
	}
	if hs, _ := plain.gate.unwritten.take(); len(hs) != 0 {
		t.Errorf("a service without a log queued %d holds", len(hs))
	}
}
