package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/pricing"
)

// The fleet's balances equal each customer's own, to the last digit, on a
// real ClickHouse: customers in UTC, Europe/Berlin (October's last Sunday
// ends daylight time) and America/New_York, a graduated A100 tier, MIG
// slices counted by an included A100 grant, a reservation contract with
// burst, a recurring allowance, grants expiring and voided mid-month, a
// customer with grants and no usage, usage of tenants that are no
// customer (before, between and after the customers) and one without
// grants; October and November rolled up to Nov 18, the hours after it
// (an open month) read from raw samples only.
func TestFleetBalancesEqualEachBalance(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	dir := t.TempDir()
	book := writeTestBook(t, dir)
	contract := filepath.Join(dir, "contract.yaml")
	body := "tenant: delta\n" + invoiceTestContract[len("tenant: acme\n"):]
	if err := os.WriteFile(contract, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	oct := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	closed := time.Date(2026, 11, 18, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 11, 20, 10, 30, 0, 0, time.UTC)
	h100, a100, mig := gpucatalog.H100SXM5_80GB, gpucatalog.A100SXM4_80GB, gpucatalog.A100SXM4_80GB+"/3g.40gb"
	full := meter.Values{GPUMicroseconds: 3_600_000_000, EnergyMillijoules: 1_500_000_000}
	var samples []collectors.Sample
	add := func(from, to time.Time, tenant, sku, model, profile string, gpus int, m meter.Values) {
		samples = append(samples, usageHours(from, to, tenant, "ml", sku, model, profile, gpus, m)...)
	}
	nov20 := now.Truncate(time.Hour).Add(time.Hour) // the open hour's samples too
	add(oct, nov20, "acme", h100, h100, "", 1, full)
	add(oct.AddDate(0, 0, 3), nov20, "acme", a100, a100, "", 1, meter.Values{GPUMicroseconds: 1_800_000_000, MemPeakBytes: 3 << 30})
	add(oct.AddDate(0, 0, 20), nov20, "berlin", a100, a100, "", 1, full)
	add(oct.AddDate(0, 0, 20), nov20, "berlin", mig, a100, "3g.40gb", 2, full)
	add(oct.AddDate(0, 0, 10), nov20, "delta", h100, h100, "", 3, full)
	add(oct, nov20, "aaa-stranger", h100, h100, "", 1, full)
	add(oct, nov20, "cz-stranger", a100, a100, "", 1, full)
	add(oct, nov20, "zz-stranger", h100, h100, "", 1, full)
	add(oct, nov20, "nogrants", h100, h100, "", 1, full)
	add(oct.AddDate(0, 0, 30), nov20, "york", mig, a100, "3g.40gb", 1, full)
	// acme's A100 hours in a second department too: the rollups hold a
	// row per department, which the fleet's read sums (peaks by maximum).
	for _, x := range usageHours(oct.AddDate(0, 0, 3), nov20, "acme", "research", a100, a100, "", 2,
		meter.Values{GPUMicroseconds: 900_000_000, MemPeakBytes: 7 << 30, EnergyMillijoules: 333_333_333}) {
		x.GPUUUID += "-research"
		x.ID = collectors.SampleID(x.Host, x.GPUUUID, x.Tenant, x.Workload, x.Start)
		samples = append(samples, x)
	}
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	if err := s.RollupRange(ctx, oct, closed, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveRollupState(ctx, rollup.StateKey, rollup.State{ClosedThrough: closed, Watermark: closed, CompletedVersion: 1}, 1); err != nil {
		t.Fatal(err)
	}

	allowance := credits.Recurring{Series: "h100", Kind: credits.Included, Amount: decimal.NewFromInt(200), Meter: pricing.GPUHours,
		SKUClass: h100, Start: "2026-10", RolloverCap: decimalPtr("50")}
	cs := billing.Customers{
		Issuer:   billing.Issuer{ID: "gpucloud", Name: "GPU Cloud"},
		Schedule: billing.DefaultInvoiceSchedule,
		Customers: []billing.Customer{
			{Tenant: "york", Name: "York", Currency: "USD", TimeZone: "America/New_York", TaxRate: decimal.NewFromInt(8), Book: book},
			{Tenant: "acme", Name: "Acme", Currency: "USD", TimeZone: "UTC", TaxRate: decimal.NewFromInt(19), Book: book,
				Credits: credits.Plan{Recurring: []credits.Recurring{allowance}}},
			{Tenant: "berlin", Name: "Berlin", Currency: "USD", TimeZone: "Europe/Berlin", TaxRate: decimal.RequireFromString("7.5"), Book: book},
			{Tenant: "delta", Name: "Delta", Currency: "USD", TimeZone: "Europe/Berlin", Book: book, Contract: contract},
			{Tenant: "idle", Name: "Idle", Currency: "USD", Book: book},
			{Tenant: "nogrants", Name: "No grants", Currency: "USD", Book: book},
			{Tenant: "broken", Name: "Broken", Currency: "USD", Book: filepath.Join(dir, "missing.yaml")},
		},
	}
	customers, err := cs.CreditCustomers()
	if err != nil {
		t.Fatal(err)
	}
	clock := oct
	nowFunc := func() time.Time { return clock }
	svc := credits.NewService(s, usage.New(s, cs, nowFunc), customers, nowFunc)
	grant := func(g credits.Grant) credits.Grant {
		t.Helper()
		out, err := svc.Grant(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	money := func(tenant string, kind credits.Kind, amount string, from, expires time.Time, priority int) credits.Grant {
		return grant(credits.Grant{Tenant: tenant, Kind: kind, Amount: decimal.RequireFromString(amount), EffectiveAt: from, ExpiresAt: expires, Priority: priority})
	}
	money("acme", credits.Promotional, "500", oct, oct.AddDate(0, 1, 9), 0)
	money("acme", credits.Prepaid, "2000", oct.AddDate(0, 0, 5), time.Time{}, 1)
	grant(credits.Grant{Tenant: "berlin", Kind: credits.Included, Amount: decimal.NewFromInt(300), Meter: pricing.GPUHours, SKUClass: a100,
		EffectiveAt: oct.AddDate(0, 0, 15)})
	money("berlin", credits.Prepaid, "1000.55", oct.AddDate(0, 0, 15), time.Time{}, 0)
	voided := money("delta", credits.Promotional, "3000", oct.AddDate(0, 0, 12), time.Time{}, 0)
	money("delta", credits.Prepaid, "400", oct.AddDate(0, 0, 12), time.Time{}, 1)
	money("idle", credits.Prepaid, "10", oct, time.Time{}, 0)
	money("broken", credits.Prepaid, "10", oct, time.Time{}, 0)
	grant(credits.Grant{Tenant: "york", Kind: credits.Included, Amount: decimal.NewFromInt(40), Meter: pricing.GPUHours, SKUClass: a100,
		EffectiveAt: oct.AddDate(0, 1, 0)})
	money("york", credits.Promotional, "25", oct.AddDate(0, 1, 0), oct.AddDate(0, 1, 16), 0)
	clock = time.Date(2026, 11, 7, 12, 0, 0, 0, time.UTC)
	if _, err := svc.Void(ctx, credits.VoidRequest{ID: voided.ID, Reason: "goodwill withdrawn"}); err != nil {
		t.Fatal(err)
	}
	clock = now

	covered := map[time.Time]decimal.Decimal{}
	for _, at := range []time.Time{now, oct.AddDate(0, 1, 0).Add(-30 * time.Minute), closed} {
		fleet, err := svc.FleetBalances(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		if len(fleet) != len(customers) {
			t.Fatalf("at %s: %d balances for %d customers", at, len(fleet), len(customers))
		}
		for i, fb := range fleet {
			c := customers[i]
			one, err := svc.BalanceAt(ctx, c.Tenant, at)
			if c.Tenant == "broken" {
				// A book that cannot be read fails its customer alone.
				if fb.Err == nil || err == nil {
					t.Errorf("broken at %s: fleet %v, own %v; want both to fail", at, fb.Err, err)
				}
				continue
			}
			if fb.Customer.Tenant != c.Tenant || fb.Err != nil || err != nil {
				t.Fatalf("at %s: #%d is %s (%v; own %v), want %s", at, i, fb.Customer.Tenant, fb.Err, err, c.Tenant)
			}
			if got, want := balanceText(fb.Result), balanceText(one); got != want {
				t.Errorf("%s at %s:\nfleet %s\n own  %s", c.Tenant, at, got, want)
			}
		}
		// The comparison is of balances that moved: each of these customers
		// used some grant by then.
		for i := range 4 {
			used := false
			for _, b := range fleet[i].Result.Balances {
				used = used || b.Used.Sign() > 0
			}
			if !used && at != oct.AddDate(0, 1, 0).Add(-30*time.Minute) {
				t.Errorf("%s at %s: nothing used: %s", customers[i].Tenant, at, balanceText(fleet[i].Result))
			}
		}
		covered[at] = fleet[1].Result.Balances[len(fleet[1].Result.Balances)-1].Covered
	}
	// The raw hours after the rollups count: acme's prepaid covered more
	// at now than at the last rolled-up hour.
	if a, b := covered[now], covered[closed]; a.LessThanOrEqual(b) {
		t.Errorf("acme's prepaid covered %s at %s, %s at %s: the raw hours were not counted", a, now, b, closed)
	}
}

func decimalPtr(s string) *decimal.Decimal {
	d := decimal.RequireFromString(s)
	return &d
}

// balanceText is a burn-down's figures, every digit of them.
func balanceText(r credits.Result) string {
	out := fmt.Sprintf("as of %s uncovered %s;", r.AsOf.UTC().Format(time.RFC3339), r.Uncovered)
	for _, b := range r.Balances {
		out += fmt.Sprintf(" %s %s: granted %s used %s expired %s voided %s rolled %s remaining %s covered %s;", b.Grant.ID, b.Grant.Kind,
			b.Granted, b.Used, b.Expired, b.Voided, b.RolledOver, b.Remaining, b.Covered)
	}
	return out
}

var _ usage.TenantHoursReader = (*store.Store)(nil)

// BenchmarkFleetBalances10kCustomers is the balance benchmark:
// 10,000 customers (a shared price book, every third in Europe/Berlin,
// tax rates 0-19 %), three grants each (100 included H100 GPU-hours, 500
// USD promotional expiring November 16th, 2,000 USD prepaid), and a
// month of hourly rollups on two SKUs (an H100 half-used, a MIG
// 3g.40gb slice of an A100; 14.4 M rows), written by ClickHouse itself
// and merged before the clock starts. "read" streams the rollups of the
// whole fleet, batch by batch, and does nothing with them; "balances" is
// FleetBalances as of December 1st: the ledger, the read, pricing each
// customer's months, spreading them into charges, and the burn-down.
func BenchmarkFleetBalances10kCustomers(b *testing.B) {
	const tenants = 10_000
	ctx := context.Background()
	s := storetest.New(b)
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	dec := nov.AddDate(0, 1, 0)
	tenant := "concat('tenant-', toString(10000 + intDiv(number, %d)))"
	for _, stmt := range []string{
		fmt.Sprintf("INSERT INTO usage_hourly (hour, tenant, department, sku, samples, gpu_microseconds, energy_millijoules, version)"+
			" SELECT toDateTime(%d + intDiv(number %% 1440, 2) * 3600), "+tenant+", 'ml',"+
			" if(number %% 2 = 0, 'H100-SXM5-80GB', 'A100-SXM4-80GB/3g.40gb'), 1,"+
			" if(number %% 2 = 0, 1800000000, 3600000000), 700000000, 1 FROM system.numbers LIMIT %d",
			nov.Unix(), 1440, tenants*1440),
		fmt.Sprintf("INSERT INTO credit_grants (grant_id, tenant, kind, amount, currency, meter, sku_class, priority, effective_at,"+
			" expires_at, series, has_rollover, rollover_cap, source, note, created_at, voided_at, void_reason, version)"+
			" SELECT concat('g-', toString(number)), "+tenant+", ['included', 'promotional', 'prepaid'][number %% 3 + 1],"+
			" toDecimal128([100, 500, 2000][number %% 3 + 1], 9), if(number %% 3 = 0, '', 'USD'), if(number %% 3 = 0, 'gpu_hours', ''),"+
			" if(number %% 3 = 0, 'H100-SXM5-80GB', ''), 0, toDateTime(%d), toDateTime(if(number %% 3 = 1, %d, 0)), '', 0,"+
			" toDecimal128(0, 9), 'bench', '', toDateTime(%d), toDateTime(0), '', 1 FROM system.numbers LIMIT %d",
			3, nov.Unix(), nov.AddDate(0, 0, 15).Unix(), nov.Unix(), tenants*3),
		"OPTIMIZE TABLE usage_hourly FINAL",
		"OPTIMIZE TABLE credit_grants FINAL",
	} {
		if err := s.ExecForTest(ctx, stmt); err != nil {
			b.Fatalf("%s: %v", stmt, err)
		}
	}
	if n, err := s.CountForTest(ctx, "SELECT count() FROM usage_hourly"); err != nil || n != tenants*1440 {
		b.Fatalf("%d rollup rows, %v", n, err)
	}
	if err := s.SaveRollupState(ctx, rollup.StateKey, rollup.State{ClosedThrough: dec, Watermark: dec, CompletedVersion: 1}, 1); err != nil {
		b.Fatal(err)
	}
	waitForMerges(b, s)
	book := writeTestBook(b, b.TempDir())
	cs := billing.Customers{Issuer: billing.Issuer{ID: "bench", Name: "Bench"}, Schedule: billing.DefaultInvoiceSchedule}
	for i := range tenants {
		c := billing.Customer{Tenant: fmt.Sprintf("tenant-%d", 10000+i), Name: fmt.Sprint(i), Currency: "USD", TimeZone: "UTC",
			TaxRate: decimal.NewFromInt(int64(i % 20)), Book: book}
		if i%3 == 0 {
			c.TimeZone = "Europe/Berlin"
		}
		cs.Customers = append(cs.Customers, c)
	}
	customers, err := cs.CreditCustomers()
	if err != nil {
		b.Fatal(err)
	}
	now := func() time.Time { return dec }
	svc := credits.NewService(s, usage.New(s, cs, now), customers, now)
	// One customer's fleet balance against its own, outside the clock.
	fleet, err := svc.FleetBalances(ctx, dec)
	if err != nil {
		b.Fatal(err)
	}
	for _, i := range []int{0, 1, tenants - 1} {
		one, err := svc.BalanceAt(ctx, customers[i].Tenant, dec)
		if err != nil || fleet[i].Err != nil || balanceText(one) != balanceText(fleet[i].Result) || len(one.Balances) != 3 {
			b.Fatalf("%s: fleet %s (%v), own %s (%v)", customers[i].Tenant, balanceText(fleet[i].Result), fleet[i].Err, balanceText(one), err)
		}
	}

	b.Run("read", func(b *testing.B) {
		for range b.N {
			rows := 0
			q := usage.TenantHoursQuery{From: nov.Add(-time.Hour), To: dec, Source: usage.SourceHourly}
			for k := 0; k < tenants; k += 500 {
				q.FirstTenant, q.LastTenant = customers[k].Tenant, customers[min(k+500, tenants)-1].Tenant
				if err := s.TenantHours(ctx, q, func(_ string, r []usage.Row) error { rows += len(r); return nil }); err != nil {
					b.Fatal(err)
				}
			}
			if rows != tenants*1440 {
				b.Fatalf("%d rows", rows)
			}
		}
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
	})
	b.Run("balances", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			fleet, err := svc.FleetBalances(ctx, dec)
			if err != nil {
				b.Fatal(err)
			}
			for _, fb := range fleet {
				if fb.Err != nil || len(fb.Result.Balances) != 3 {
					b.Fatalf("%s: %v, %d balances", fb.Customer.Tenant, fb.Err, len(fb.Result.Balances))
				}
			}
		}
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
	})
}
