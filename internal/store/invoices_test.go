package store_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/pricing"
)

const invoiceTestBook = `version: test-2026
currency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}
skus:
  H100-SXM5-80GB:
    meters:
      gpu_hours: {unit_price: "3.00", burst: {multiplier: "1.5"}}
      energy_kwh: {unit_price: "0.10"}
  A100-SXM4-80GB:
    meters:
      gpu_hours:
        mode: graduated
        tiers:
          - {up_to: 100, unit_price: "2.00"}
          - {unit_price: "1.50"}
  A100-SXM4-80GB/3g.40gb:
    meters:
      gpu_hours: {unit_price: "1.75"}
`

const invoiceTestContract = `tenant: acme
currency: USD
start: 2026-01-01T00:00:00Z
end: 2027-01-01T00:00:00Z
reservations:
  - {sku: H100-SXM5-80GB, gpus: 2, rate: "2.00"}
`

// usageHours writes one sample per GPU and hour over [from, to).
func usageHours(from, to time.Time, tenant, dept, sku, model, mig string, gpus int, m meter.Values) []collectors.Sample {
	var out []collectors.Sample
	for h := from; h.Before(to); h = h.Add(time.Hour) {
		for g := range gpus {
			s := collectors.Sample{Host: "host-" + tenant, GPUUUID: fmt.Sprintf("GPU-%s-%d", tenant, g), GPUModel: model,
				MIGProfile: mig, SKU: sku, Tenant: tenant, Department: dept, Workload: "job-" + tenant,
				Start: h, End: h.Add(time.Hour), Values: m}
			if mig != "" {
				s.MIGUUID = fmt.Sprintf("MIG-%s-%d", tenant, g)
			}
			s.ID = collectors.SampleID(s.Host, s.GPUUUID+s.MIGUUID, s.Tenant, s.Workload, s.Start)
			out = append(out, s)
		}
	}
	return out
}

// testLease is the billing lease of the invoice tests: short, so a test
// never waits long on one it left behind.
var testLease = billing.LeaseConfig{TTL: 30 * time.Second, Settle: 2 * time.Second, Retry: 200 * time.Millisecond}

// gpucloudCustomers bills customers as the issuer GPU Cloud (numbers GC-…)
// on the default schedule.
func gpucloudCustomers(customers ...billing.Customer) billing.Customers {
	return billing.Customers{
		Issuer:    billing.Issuer{ID: "gpucloud", Name: "GPU Cloud GmbH", NumberPrefix: "GC-"},
		Schedule:  billing.DefaultInvoiceSchedule,
		Customers: customers,
	}
}

// writeTestBook writes invoiceTestBook into dir and returns its path.
func writeTestBook(tb testing.TB, dir string) string {
	tb.Helper()
	book := filepath.Join(dir, "book.yaml")
	if err := os.WriteFile(book, []byte(invoiceTestBook), 0o644); err != nil {
		tb.Fatal(err)
	}
	return book
}

// insertRolledUp stores samples and runs the scheduled rollup over them.
func insertRolledUp(tb testing.TB, s *store.Store, samples []collectors.Sample) {
	tb.Helper()
	ctx := context.Background()
	if err := s.InsertSamples(ctx, samples); err != nil {
		tb.Fatal(err)
	}
	if _, err := rollup.New(s, rollup.DefaultConfig(), time.Now, slog.New(slog.DiscardHandler)).Run(ctx); err != nil {
		tb.Fatal(err)
	}
}

// finalizedRun runs period and returns its invoices by tenant; every
// outcome must be a finalized invoice.
func finalizedRun(t *testing.T, runner *billing.Runner, period string) map[string]*billing.Invoice {
	t.Helper()
	rep, err := runner.Run(context.Background(), billing.RunRequest{Period: period}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*billing.Invoice{}
	for _, o := range rep.Outcomes {
		if o.Action != billing.ActionFinalized {
			t.Fatalf("%s: %s", o.Tenant, o)
		}
		out[o.Tenant] = o.Invoice
	}
	return out
}

func hoursIn(p billing.Period) int64 { return int64(p.End.Sub(p.Start) / time.Hour) }

func cents(s string) int64 { return decimal.RequireFromString(s).Shift(2).IntPart() }

// byKey sums an invoice's line amounts per kind, SKU and meter.
func byKey(inv *billing.Invoice) map[string]int64 {
	out := map[string]int64{}
	for _, l := range inv.Lines {
		out[fmt.Sprintf("%s %s %s", l.Kind, l.SKU, l.Meter)] += l.AmountMinor
	}
	return out
}

func checkLines(t *testing.T, inv *billing.Invoice, want map[string]int64, total int64) {
	t.Helper()
	got := byKey(inv)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s %s: %s = %d cents, want %d", inv.Tenant, inv.PeriodLabel, k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok && v != 0 {
			t.Errorf("%s %s: unexpected line %s = %d cents", inv.Tenant, inv.PeriodLabel, k, v)
		}
	}
	if inv.TotalMinor != total {
		t.Errorf("%s %s: total %d cents, want %d", inv.Tenant, inv.PeriodLabel, inv.TotalMinor, total)
	}
}

// Three tenants in two departments (reservation + burst, tiered on
// demand across a DST month, MIG), invoiced from the real ClickHouse;
// a re-run changes nothing; late samples become an adjustment on the next
// month's invoice and leave the finalized one byte-identical.
func TestInvoiceRunEndToEnd(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	logger := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	book := writeTestBook(t, dir)
	contract := filepath.Join(dir, "acme.yaml")
	if err := os.WriteFile(contract, []byte(invoiceTestContract), 0o644); err != nil {
		t.Fatal(err)
	}
	customers := gpucloudCustomers(
		billing.Customer{Tenant: "acme", Department: "research", Name: "Acme Corp", Currency: "USD", TimeZone: "UTC",
			TaxRate: decimal.NewFromInt(10), Book: book, Contract: contract},
		billing.Customer{Tenant: "globex", Department: "research", Name: "Globex", Currency: "USD", TimeZone: "America/New_York", Book: book},
		billing.Customer{Tenant: "initech", Department: "ops", Name: "Initech", Currency: "USD", TimeZone: "Europe/Berlin",
			TaxRate: decimal.NewFromInt(19), Book: book},
	)
	if err := customers.Validate(); err != nil {
		t.Fatal(err)
	}
	// Usage from before the earliest period start (Berlin) to after the
	// latest end (New York) of October and November.
	from := time.Date(2026, 9, 30, 20, 0, 0, 0, time.UTC)
	to := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	kwh := uint64(3_600_000_000) // 1 kWh in mJ
	migUS := uint64(3_600_000_000) * 3 / 7
	var samples []collectors.Sample
	samples = append(samples, usageHours(from, to, "acme", "research", "H100-SXM5-80GB", "H100-SXM5-80GB", "", 3,
		meter.Values{GPUMicroseconds: 3_600_000_000, EnergyMillijoules: kwh})...)
	samples = append(samples, usageHours(from, to, "globex", "research", "A100-SXM4-80GB", "A100-SXM4-80GB", "", 1,
		meter.Values{GPUMicroseconds: 3_600_000_000})...)
	samples = append(samples, usageHours(from, to, "initech", "ops", "A100-SXM4-80GB/3g.40gb", "A100-SXM4-80GB", "3g.40gb", 2,
		meter.Values{GPUMicroseconds: migUS})...)
	insertRolledUp(t, s, samples)
	runner := billing.NewRunner(s, customers, testLease, time.Now, logger)
	oct := finalizedRun(t, runner, "2026-10")

	// The expected amounts, from the inputs above.
	period := func(zone string) billing.Period {
		loc, _ := time.LoadLocation(zone)
		p, err := billing.MonthlyPeriod("2026-10", loc)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	round := func(d decimal.Decimal) int64 { return d.Round(2).Shift(2).IntPart() }
	acmeH := hoursIn(period("UTC")) // 744
	fee, burst, energy := cents("2.00")*2*acmeH, cents("4.50")*acmeH, cents("0.10")*3*acmeH
	acmeSub := fee + burst + energy
	acmeTax := round(decimal.New(acmeSub, -2).Mul(decimal.NewFromInt(10)).Div(decimal.NewFromInt(100)))
	checkLines(t, oct["acme"], map[string]int64{
		"reservation_fee H100-SXM5-80GB gpu_hours": fee,
		"burst H100-SXM5-80GB gpu_hours":           burst,
		"on_demand H100-SXM5-80GB energy_kwh":      energy,
		"tax  ":                                    acmeTax,
	}, acmeSub+acmeTax)

	globexH := hoursIn(period("America/New_York")) // 744 (EDT until 1 Nov)
	tiered := cents("2.00")*100 + cents("1.50")*(globexH-100)
	checkLines(t, oct["globex"], map[string]int64{"on_demand A100-SXM4-80GB gpu_hours": tiered}, tiered)

	initechH := hoursIn(period("Europe/Berlin")) // 745: 25 October has 25 hours
	if initechH != 745 {
		t.Fatalf("Berlin October has %d hours, want 745", initechH)
	}
	migHours := decimal.NewFromUint64(migUS * 2 * uint64(initechH)).Div(decimal.NewFromInt(3_600_000_000))
	mig := round(migHours.Mul(decimal.RequireFromString("1.75")))
	migTax := round(decimal.New(mig, -2).Mul(decimal.NewFromInt(19)).Div(decimal.NewFromInt(100)))
	checkLines(t, oct["initech"], map[string]int64{"on_demand A100-SXM4-80GB/3g.40gb gpu_hours": mig, "tax  ": migTax}, mig+migTax)

	// Gapless numbers in tenant order, recorded with the book and inputs.
	for i, tenant := range []string{"acme", "globex", "initech"} {
		inv := oct[tenant]
		if want := fmt.Sprintf("GC-%06d", i+1); inv.Number != want || inv.Seq != uint64(i+1) {
			t.Errorf("%s: number %s seq %d, want %s", tenant, inv.Number, inv.Seq, want)
		}
		if inv.BookVersion != "test-2026" || len(inv.BookDigest) != 64 || len(inv.InputsHash) != 64 || inv.RollupVersion == 0 {
			t.Errorf("%s: book %q digest %q inputs %q rollup %d", tenant, inv.BookVersion, inv.BookDigest, inv.InputsHash, inv.RollupVersion)
		}
	}
	if oct["acme"].ContractDigest == "" || oct["globex"].ContractDigest != "" {
		t.Errorf("contract digests: acme %q, globex %q", oct["acme"].ContractDigest, oct["globex"].ContractDigest)
	}
	docs := storedDocs(t, s)

	// A re-run: the same invoices, the same numbers, nothing written.
	rep, err := runner.Run(ctx, billing.RunRequest{Period: "2026-10"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rep.Outcomes {
		if o.Action != billing.ActionUnchanged || o.Invoice.Number != oct[o.Tenant].Number {
			t.Errorf("re-run %s: %s", o.Tenant, o)
		}
	}
	assertSameDocs(t, docs, storedDocs(t, s))

	// UTC September is closed: its one billed part, Berlin's October from
	// 30 September 22:00 UTC, is final, and the rest lies before each
	// customer's first invoice. UTC October is not: its last hour is
	// Berlin's November, not invoiced yet.
	sep := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
	assertClosed(t, s, sep)

	// Late samples for October: one more H100 hour for acme (burst), and a
	// corrected re-import that removes two of initech's MIG hours.
	late := usageHours(time.Date(2026, 10, 10, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 10, 1, 0, 0, 0, time.UTC),
		"acme", "research", "H100-SXM5-80GB", "H100-SXM5-80GB", "", 4, meter.Values{GPUMicroseconds: 3_600_000_000})
	if err := s.InsertSamples(ctx, late[3:]); err != nil {
		t.Fatal(err)
	}
	fixed := usageHours(time.Date(2026, 10, 12, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 12, 1, 0, 0, 0, time.UTC),
		"initech", "ops", "A100-SXM4-80GB/3g.40gb", "A100-SXM4-80GB", "3g.40gb", 2, meter.Values{GPUMicroseconds: migUS / 3})
	insertRolledUp(t, s, fixed)
	nov := finalizedRun(t, runner, "2026-11")
	adjust := func(inv *billing.Invoice) []billing.Line {
		var out []billing.Line
		for _, l := range inv.Lines {
			if l.Kind == billing.KindAdjustment || l.Kind == billing.KindCredit {
				out = append(out, l)
			}
		}
		return out
	}
	if a := adjust(nov["acme"]); len(a) != 1 || a[0].Kind != billing.KindAdjustment || a[0].AmountMinor != cents("4.50") ||
		a[0].AdjustsInvoice != oct["acme"].Number || a[0].AdjustsPeriod != "2026-10" || a[0].AdjustsKind != pricing.KindBurst {
		t.Errorf("acme November corrections %+v, want one burst adjustment of 4.50 for %s", a, oct["acme"].Number)
	}
	fixedHours := decimal.NewFromUint64(migUS*2*uint64(initechH-1) + 2*(migUS/3)).Div(decimal.NewFromInt(3_600_000_000))
	credit := round(fixedHours.Mul(decimal.RequireFromString("1.75"))) - mig
	if a := adjust(nov["initech"]); len(a) != 1 || a[0].Kind != billing.KindCredit || a[0].AmountMinor != credit ||
		credit >= 0 || a[0].AdjustsInvoice != oct["initech"].Number {
		t.Errorf("initech November corrections %+v, want one credit of %d cents for %s", a, credit, oct["initech"].Number)
	}
	if a := adjust(nov["globex"]); len(a) != 0 {
		t.Errorf("globex November corrections %+v, want none", a)
	}
	for i, tenant := range []string{"acme", "globex", "initech"} {
		if want := fmt.Sprintf("GC-%06d", i+4); nov[tenant].Number != want {
			t.Errorf("%s November: number %s, want %s", tenant, nov[tenant].Number, want)
		}
	}
	// The finalized October invoices are byte-for-byte what they were.
	after := storedDocs(t, s)
	for id, doc := range docs {
		if after[id] != doc {
			t.Errorf("invoice %s changed after finalizing:\n was %s\n now %s", id, doc, after[id])
		}
	}

	// UTC October is closed now (New York's September, before globex's
	// first invoice, does not count); UTC November waits for Berlin's
	// December.
	assertClosed(t, s, sep, time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC))

	// Once corrected, a later run of another month finds nothing new.
	rep, err = runner.Run(ctx, billing.RunRequest{Period: "2026-11", DryRun: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rep.Outcomes {
		if o.Action != billing.ActionUnchanged {
			t.Errorf("November again: %s", o)
		}
	}
}

func storedDocs(t *testing.T, s *store.Store) map[string]string {
	t.Helper()
	invs, err := s.Invoices(context.Background(), "gpucloud")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, si := range invs {
		out[si.Invoice.ID] = string(si.Document)
	}
	return out
}

func assertSameDocs(t *testing.T, a, b map[string]string) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%d invoices before, %d after", len(a), len(b))
	}
	for id, doc := range a {
		if b[id] != doc {
			t.Errorf("invoice %s changed:\n was %s\n now %s", id, doc, b[id])
		}
	}
}

func assertClosed(t *testing.T, s *store.Store, want ...time.Time) {
	t.Helper()
	closed, err := s.ClosedPeriods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(closed) != fmt.Sprint(want) {
		t.Errorf("closed periods %v, want %v", closed, want)
	}
}

// BenchmarkInvoiceRun1000Tenants invoices a month of hourly rollups for
// 1,000 customers (two SKUs each, half in Europe/Berlin, every tenth
// with a reservation contract): read, price, build, number and store
// every invoice under the lease. Each iteration bills for an issuer of
// its own, so every run does the whole work. Reports seconds per run.
func BenchmarkInvoiceRun1000Tenants(b *testing.B) {
	const tenants = 1000
	ctx := context.Background()
	s := storetest.New(b)
	logger := slog.New(slog.DiscardHandler)
	dir := b.TempDir()
	book := writeTestBook(b, dir)
	from := time.Date(2026, 9, 30, 22, 0, 0, 0, time.UTC)
	to := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	chunk := make([]collectors.Sample, 0, 100_000)
	for h := from; h.Before(to); h = h.Add(time.Hour) {
		for i := range tenants {
			tenant := fmt.Sprintf("tenant-%04d", i)
			for k, sku := range []string{"H100-SXM5-80GB", "A100-SXM4-80GB"} {
				x := collectors.Sample{Host: "h", GPUUUID: fmt.Sprintf("GPU-%04d-%d", i, k), GPUModel: sku, SKU: sku,
					Tenant: tenant, Department: fmt.Sprintf("dept-%d", i%7), Workload: "w", Start: h, End: h.Add(time.Hour),
					Values: meter.Values{GPUMicroseconds: uint64(1+i%3) * 1_200_000_000, EnergyMillijoules: 2_000_000_000}}
				x.ID = collectors.SampleID(x.Host, x.GPUUUID, x.Tenant, x.Workload, x.Start)
				chunk = append(chunk, x)
			}
		}
		if len(chunk) >= 98_000 {
			if err := s.InsertSamples(ctx, chunk); err != nil {
				b.Fatal(err)
			}
			chunk = chunk[:0]
		}
	}
	if err := s.InsertSamples(ctx, chunk); err != nil {
		b.Fatal(err)
	}
	if err := s.RollupRange(ctx, from, to, 1); err != nil {
		b.Fatal(err)
	}
	if _, err := rollup.New(s, rollup.DefaultConfig(), time.Now, logger).Run(ctx); err != nil {
		b.Fatal(err)
	}
	var customers []billing.Customer
	for i := range tenants {
		c := billing.Customer{Tenant: fmt.Sprintf("tenant-%04d", i), Department: fmt.Sprintf("dept-%d", i%7), Name: fmt.Sprintf("Tenant %d", i),
			Currency: "USD", TimeZone: "UTC", TaxRate: decimal.NewFromInt(int64(i % 20)), Book: book}
		if i%2 == 1 {
			c.TimeZone = "Europe/Berlin"
		}
		if i%10 == 0 {
			c.Contract = filepath.Join(dir, c.Tenant+".yaml")
			body := strings.Replace(invoiceTestContract, "tenant: acme", "tenant: "+c.Tenant, 1)
			if err := os.WriteFile(c.Contract, []byte(body), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		customers = append(customers, c)
	}
	lease := billing.LeaseConfig{TTL: time.Minute, Settle: 2 * time.Second, Retry: 200 * time.Millisecond}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		cs := billing.Customers{Issuer: billing.Issuer{ID: fmt.Sprintf("bench-%d", n), Name: "Bench"},
			Schedule: billing.DefaultInvoiceSchedule, Customers: customers}
		rep, err := billing.NewRunner(s, cs, lease, time.Now, logger).Run(ctx, billing.RunRequest{Period: "2026-10"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range rep.Outcomes {
			if o.Action != billing.ActionFinalized {
				b.Fatalf("%s", o)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
}
