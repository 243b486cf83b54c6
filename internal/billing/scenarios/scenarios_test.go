package scenarios_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	usagedomain "github.com/gpumeter/gpumeter/internal/usage" // the local type usage is a scenario's timeline
	"github.com/gpumeter/gpumeter/pricing"
)

// scenario is one file of testdata: see testdata/README.md.
type scenario struct {
	Description string            `yaml:"description"`
	NumberReset string            `yaml:"number_reset"`
	Books       map[string]string `yaml:"books"`
	Contracts   map[string]string `yaml:"contracts"`
	Customers   []customer        `yaml:"customers"`
	Steps       []step            `yaml:"steps"`
}

type customer struct {
	Tenant     string `yaml:"tenant"`
	Department string `yaml:"department"`
	Currency   string `yaml:"currency"`
	TimeZone   string `yaml:"time_zone"`
	TaxRate    string `yaml:"tax_rate"`
	Book       string `yaml:"book"`
	Contract   string `yaml:"contract"`
	// Credits is the customer's credit plan (settlement, allowances).
	Credits credits.Plan `yaml:"credits"`
}

// grant is a grant given in a step, by a name the expectations use.
type grant struct {
	Name        string `yaml:"name"`
	Tenant      string `yaml:"tenant"`
	Kind        string `yaml:"kind"`
	Amount      string `yaml:"amount"`
	Currency    string `yaml:"currency"`
	Meter       string `yaml:"meter"`
	SKUClass    string `yaml:"sku_class"`
	Priority    int    `yaml:"priority"`
	EffectiveAt string `yaml:"effective_at"`
	ExpiresAt   string `yaml:"expires_at"`
	Source      string `yaml:"source"`
}

type step struct {
	Usage     []usage `yaml:"usage"`
	Run       string  `yaml:"run"`    // a period to invoice
	Tenant    string  `yaml:"tenant"` // only this customer
	Draft     bool    `yaml:"draft"`
	Finalize  string  `yaml:"finalize"` // every draft of this period
	Void      string  `yaml:"void"`     // an invoice number or id
	Reason    string  `yaml:"reason"`
	Grants    []grant `yaml:"grant"`      // grants given (through the credit service)
	VoidGrant string  `yaml:"void_grant"` // a grant's name, voided at the step's clock with reason
	// Admit are admission requests decided one after another at the step's
	// clock by the quota service with credit_only customers' credit gated
	// (credits.DefaultSettings: a 1 h horizon), after one refresh.
	Admit []admit `yaml:"admit"`
	At    string  `yaml:"at"` // the run's clock (RFC 3339); default now
	// SetTimeZone changes customers' time zones in the config from this
	// step on (tenant → zone).
	SetTimeZone map[string]string `yaml:"set_time_zone"`
	// Error, on a finalize or void step, is what the refusal must say;
	// Category, when given, the fault category it must be in
	// (validation, not_found, conflict or precondition).
	Error    string `yaml:"error"`
	Category string `yaml:"category"`
	// Expect is per tenant, for run and finalize steps.
	Expect map[string]expect `yaml:"expect"`
}

type usage struct {
	Tenant string `yaml:"tenant"`
	SKU    string `yaml:"sku"` // MODEL or MODEL/PROFILE
	From   string `yaml:"from"`
	To     string `yaml:"to"`
	Count  int    `yaml:"count"` // devices (GPUs or MIG instances) in use each hour
	// Share is the GPU-equivalents each device holds per hour ("1",
	// "3/7", "0.25"); GPU-microseconds are rounded down from it.
	Share    string `yaml:"share"`
	EnergyWh uint64 `yaml:"energy_wh"` // per device and hour
	Device   string `yaml:"device"`    // device id prefix; equal ids replace stored samples
}

type expect struct {
	Action     string  `yaml:"action"`
	Number     string  `yaml:"number"`
	Lines      []eline `yaml:"lines"`
	TaxCents   *int64  `yaml:"tax_cents"`
	TotalCents *int64  `yaml:"total_cents"`
	// PrepaidCents is what prepaid credit paid of the total after tax.
	PrepaidCents *int64 `yaml:"prepaid_cents"`
	// Credits are grants' accounts on the invoice, by grant name.
	Credits []ecredit `yaml:"credits"`
	Detail  string    `yaml:"detail"` // a substring of the outcome's detail
}

type eline struct {
	Kind        string `yaml:"kind"`
	SKU         string `yaml:"sku"`
	Meter       string `yaml:"meter"`
	AdjustsKind string `yaml:"adjusts_kind"`
	Adjusts     string `yaml:"adjusts"` // the corrected invoice's number
	Grant       string `yaml:"grant"`   // a credit line's grant, by name
	Cents       int64  `yaml:"cents"`
	Why         string `yaml:"why"`
}

// TestMain runs more scenarios at once than the default (one per CPU):
// each spends most of its time waiting for the billing lease to settle.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.parallel"); f != nil && f.Value.String() == fmt.Sprint(runtime.GOMAXPROCS(0)) {
		_ = flag.Set("test.parallel", "8")
	}
	os.Exit(m.Run())
}

// minScenarios is how many cases the folder must hold.
var minScenarios = 25

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < minScenarios {
		t.Fatalf("%d scenarios, want at least 25", len(files))
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var sc scenario
			dec := yaml.NewDecoder(bytes.NewReader(data))
			dec.KnownFields(true)
			if err := dec.Decode(&sc); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			runScenario(t, sc)
		})
	}
}

func runScenario(t *testing.T, sc scenario) {
	ctx := context.Background()
	s := storetest.New(t)
	logger := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	write := func(kind, name, body string) string {
		path := filepath.Join(dir, kind+"-"+name+".yaml")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cs := billing.Customers{Issuer: billing.Issuer{ID: "gc", Name: "GPU Cloud", NumberPrefix: "GC-", NumberReset: sc.NumberReset},
		Schedule: billing.DefaultInvoiceSchedule}
	for _, c := range sc.Customers {
		bc := billing.Customer{Tenant: c.Tenant, Department: c.Department, Name: c.Tenant, Currency: c.Currency,
			TimeZone: c.TimeZone, TaxRate: decimal.Zero, Credits: c.Credits}
		if bc.Currency == "" {
			bc.Currency = "USD"
		}
		if c.TaxRate != "" {
			bc.TaxRate = decimal.RequireFromString(c.TaxRate)
		}
		body, ok := sc.Books[c.Book]
		if !ok {
			t.Fatalf("customer %s: no book %q", c.Tenant, c.Book)
		}
		bc.Book = write("book", c.Book, body)
		if c.Contract != "" {
			body, ok := sc.Contracts[c.Contract]
			if !ok {
				t.Fatalf("customer %s: no contract %q", c.Tenant, c.Contract)
			}
			bc.Contract = write("contract", c.Contract, body)
		}
		cs.Customers = append(cs.Customers, bc)
	}
	if err := cs.Validate(); err != nil {
		t.Fatal(err)
	}
	lease := billing.LeaseConfig{TTL: 30 * time.Second, Settle: 2 * time.Second, Retry: 200 * time.Millisecond}
	rollup := rollup.New(s, rollup.DefaultConfig(), time.Now, logger)
	final := map[string]string{} // invoice id → document when first seen finalized
	names := map[string]string{} // grant id → its name in the scenario, and back
	creditCustomers, err := cs.CreditCustomers()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range creditCustomers {
		for _, r := range c.Plan.Recurring {
			gs, err := r.GrantsThrough(c.Tenant, c.Currency, c.Location, time.Date(2027, 12, 1, 0, 0, 0, 0, time.UTC))
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range gs { // "SERIES YYYY-MM"
				names[g.ID] = strings.TrimPrefix(g.Source, "recurring ")
			}
		}
	}

	for i, st := range sc.Steps {
		where := fmt.Sprintf("steps[%d]", i)
		clock := time.Now
		if st.At != "" {
			at, err := time.Parse(time.RFC3339, st.At)
			if err != nil {
				t.Fatalf("%s.at: %v", where, err)
			}
			clock = func() time.Time { return at }
		}
		for tenant, zone := range st.SetTimeZone {
			found := false
			for j := range cs.Customers {
				if cs.Customers[j].Tenant == tenant {
					cs.Customers[j].TimeZone, found = zone, true
				}
			}
			if !found {
				t.Fatalf("%s.set_time_zone: no customer %s", where, tenant)
			}
		}
		runner := billing.NewRunner(s, cs, lease, clock, logger)
		creditCustomers, err := cs.CreditCustomers() // a step may change a zone
		if err != nil {
			t.Fatal(err)
		}
		creditSvc := credits.NewService(s, usagedomain.New(s, cs, clock), creditCustomers, clock)
		runner.Credits = creditSvc
		refused := func(err error, what string) bool {
			if st.Error == "" {
				if err != nil {
					t.Fatalf("%s: %s: %v", where, what, err)
				}
				return false
			}
			if err == nil || !strings.Contains(err.Error(), st.Error) {
				t.Fatalf("%s: %s: %v, want a refusal saying %q", where, what, err, st.Error)
			}
			if st.Category != "" {
				is, ok := map[string]func(error) bool{"validation": fault.IsValidation, "not_found": fault.IsNotFound,
					"conflict": fault.IsConflict, "precondition": fault.IsPrecondition}[st.Category]
				if !ok || !is(err) {
					t.Fatalf("%s: %s: %v, want a refusal in category %q", where, what, err, st.Category)
				}
			}
			return true
		}
		var outs []billing.Outcome
		switch {
		case len(st.Usage) > 0:
			var samples []collectors.Sample
			for j, u := range st.Usage {
				samples = append(samples, u.samples(t, fmt.Sprintf("%s.usage[%d]", where, j))...)
			}
			if err := s.InsertSamples(ctx, samples); err != nil {
				t.Fatal(err)
			}
			if _, err := rollup.Run(ctx); err != nil {
				t.Fatal(err)
			}
		case st.Run != "":
			rep, err := runner.Run(ctx, billing.RunRequest{Period: st.Run, Tenant: st.Tenant, Draft: st.Draft}, nil)
			if err != nil {
				t.Fatalf("%s: run %s: %v", where, st.Run, err)
			}
			outs = rep.Outcomes
		case st.Finalize != "":
			var err error
			outs, err = runner.Finalize(ctx, nil, st.Finalize)
			refused(err, "finalize "+st.Finalize)
		case st.Void != "":
			_, err := runner.Void(ctx, st.Void, st.Reason)
			refused(err, "void "+st.Void)
		case len(st.Grants) > 0:
			for j, g := range st.Grants {
				req, err := g.request(fmt.Sprintf("%s.grant[%d]", where, j))
				if err != nil {
					t.Fatal(err)
				}
				got, err := creditSvc.Grant(ctx, req)
				if refused(err, "grant "+g.Name) {
					continue
				}
				names[got.ID], names[g.Name] = g.Name, got.ID
			}
		case len(st.Admit) > 0:
			quotas, err := quota.NewService(usagedomain.New(s, cs, clock), s, cs, quota.DefaultConfig(), clock, logger)
			if err != nil {
				t.Fatal(err)
			}
			if err := quotas.GateCredits(creditSvc, credits.DefaultSettings()); err != nil {
				t.Fatal(err)
			}
			if err := quotas.Refresh(ctx, nil); err != nil {
				t.Fatalf("%s: refresh: %v", where, err)
			}
			for j, a := range st.Admit {
				if a.Why == "" {
					t.Errorf("%s.admit[%d]: no derivation (why)", where, j)
				}
				d, err := quotas.Admit(ctx, auth.Scope{Kind: auth.KindAdmin}, quota.Request{Tenant: a.Tenant, GPUModel: a.GPUModel,
					Profile: a.Profile, Count: a.Count, Duration: time.Hour})
				if err != nil {
					t.Fatalf("%s.admit[%d]: %v", where, j, err)
				}
				if d.Allowed != a.Allowed || !strings.Contains(d.Reason, a.Reason) {
					t.Errorf("%s.admit[%d]: allowed %v (%s), want %v saying %q", where, j, d.Allowed, d.Reason, a.Allowed, a.Reason)
				}
			}
		case st.VoidGrant != "":
			_, err := creditSvc.Void(ctx, credits.VoidRequest{ID: names[st.VoidGrant], Reason: st.Reason})
			refused(err, "void grant "+st.VoidGrant)
		default:
			t.Fatalf("%s: want usage, run, finalize, void, grant, void_grant or admit", where)
		}
		got := map[string]billing.Outcome{}
		for _, o := range outs {
			got[o.Tenant] = o
		}
		for tenant, want := range st.Expect {
			o, ok := got[tenant]
			if !ok {
				t.Errorf("%s: no outcome for %s (got %v)", where, tenant, outs)
				continue
			}
			checkOutcome(t, fmt.Sprintf("%s %s", where, tenant), o, want, names)
			if o.Invoice != nil && o.Invoice.Status == billing.StatusFinalized {
				checkBilledUsage(t, ctx, s, where, o.Invoice)
			}
		}
		checkFinalizedUnchanged(t, ctx, s, where, final)
	}
}

// request is the grant as the credit service takes it.
func (g grant) request(where string) (credits.Grant, error) {
	amount, err := decimal.NewFromString(g.Amount)
	if err != nil {
		return credits.Grant{}, fmt.Errorf("%s.amount %q: %w", where, g.Amount, err)
	}
	req := credits.Grant{Tenant: g.Tenant, Kind: credits.Kind(g.Kind), Amount: amount, Currency: g.Currency,
		Meter: pricing.Meter(g.Meter), SKUClass: g.SKUClass, Priority: g.Priority, Source: g.Source}
	for _, f := range []struct {
		at  *time.Time
		val string
	}{{&req.EffectiveAt, g.EffectiveAt}, {&req.ExpiresAt, g.ExpiresAt}} {
		if f.val == "" {
			continue
		}
		if *f.at, err = time.Parse(time.RFC3339, f.val); err != nil {
			return credits.Grant{}, fmt.Errorf("%s: %w", where, err)
		}
	}
	return req, nil
}

// samples turns a usage entry into one sample per device and hour.
func (u usage) samples(t *testing.T, where string) []collectors.Sample {
	from, err1 := time.Parse(time.RFC3339, u.From)
	to, err2 := time.Parse(time.RFC3339, u.To)
	if err1 != nil || err2 != nil || !to.After(from) {
		t.Fatalf("%s: from/to: want RFC 3339, to after from (%v, %v)", where, err1, err2)
	}
	share := big.NewRat(1, 1)
	if u.Share != "" {
		if _, ok := share.SetString(u.Share); !ok {
			t.Fatalf("%s.share %q: want a fraction or decimal", where, u.Share)
		}
	}
	us := new(big.Int).Quo(new(big.Int).Mul(big.NewInt(3_600_000_000), share.Num()), share.Denom()).Uint64()
	count := max(u.Count, 1)
	model, profile, _ := strings.Cut(u.SKU, "/")
	device := u.Device
	if device == "" {
		device = "dev"
	}
	var out []collectors.Sample
	for h := from; h.Before(to); h = h.Add(time.Hour) {
		for d := range count {
			x := collectors.Sample{Host: "host-1", GPUUUID: fmt.Sprintf("GPU-%s-%s-%d", u.Tenant, device, d), GPUModel: model,
				MIGProfile: profile, SKU: u.SKU, Tenant: u.Tenant, Workload: "job", Start: h, End: h.Add(time.Hour),
				Values: meter.Values{GPUMicroseconds: us, EnergyMillijoules: u.EnergyWh * 3_600_000}}
			if profile != "" {
				x.MIGUUID = fmt.Sprintf("MIG-%s-%s-%d", u.Tenant, device, d)
			}
			x.ID = collectors.SampleID(x.Host, x.GPUUUID+x.MIGUUID, x.Tenant, x.Workload, x.Start)
			out = append(out, x)
		}
	}
	return out
}

// admit is one admission request and what its decision must be.
type admit struct {
	Tenant   string `yaml:"tenant"`
	GPUModel string `yaml:"gpu_model"`
	Profile  string `yaml:"profile"`
	Count    int    `yaml:"count"`
	Allowed  bool   `yaml:"allowed"`
	Reason   string `yaml:"reason"` // a substring of the decision's reason
	Why      string `yaml:"why"`
}

// ecredit is a grant's account an invoice must show.
type ecredit struct {
	Grant             string `yaml:"grant"`
	Before            string `yaml:"before"`
	Used              string `yaml:"used"`
	Ended             string `yaml:"ended"`
	After             string `yaml:"after"`
	ExpiresNextPeriod bool   `yaml:"expires_next_period"`
	Why               string `yaml:"why"`
}

func lineKey(kind, sku, meter, adjustsKind, adjusts, grant string) string {
	return strings.Join([]string{kind, sku, meter, adjustsKind, adjusts, grant}, "|")
}

func checkOutcome(t *testing.T, where string, o billing.Outcome, want expect, names map[string]string) {
	t.Helper()
	if want.Action != "" && o.Action != want.Action {
		t.Errorf("%s: action %s, want %s (%s)", where, o.Action, want.Action, o)
	}
	if want.Detail != "" && !strings.Contains(o.Detail, want.Detail) {
		t.Errorf("%s: detail %q, want it to say %q", where, o.Detail, want.Detail)
	}
	inv := o.Invoice
	if inv == nil {
		if want.Number != "" || len(want.Lines) > 0 || want.TotalCents != nil {
			t.Errorf("%s: no invoice (%s)", where, o)
		}
		return
	}
	if want.Number != "" && inv.Number != want.Number {
		t.Errorf("%s: number %s, want %s", where, inv.Number, want.Number)
	}
	if want.Lines != nil {
		got := map[string]int64{}
		for _, l := range inv.Lines {
			if l.Kind == billing.KindTax {
				continue
			}
			got[lineKey(string(l.Kind), l.SKU, string(l.Meter), string(l.AdjustsKind), l.AdjustsInvoice, names[l.GrantID])] += l.AmountMinor
		}
		exp := map[string]int64{}
		for _, l := range want.Lines {
			if l.Why == "" {
				t.Errorf("%s: expected line %s %s has no derivation (why)", where, l.Kind, l.SKU)
			}
			exp[lineKey(l.Kind, l.SKU, l.Meter, l.AdjustsKind, l.Adjusts, l.Grant)] += l.Cents
		}
		keys := map[string]bool{}
		for k := range got {
			keys[k] = true
		}
		for k := range exp {
			keys[k] = true
		}
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			if got[k] != exp[k] {
				t.Errorf("%s: line %s = %d cents, want %d", where, k, got[k], exp[k])
			}
		}
	}
	if want.TaxCents != nil && inv.TaxMinor != *want.TaxCents {
		t.Errorf("%s: tax %d, want %d", where, inv.TaxMinor, *want.TaxCents)
	}
	if want.TotalCents != nil && inv.TotalMinor != *want.TotalCents {
		t.Errorf("%s: total %d, want %d", where, inv.TotalMinor, *want.TotalCents)
	}
	if want.PrepaidCents != nil && inv.PrepaidMinor != *want.PrepaidCents {
		t.Errorf("%s: prepaid credit %d, want %d", where, inv.PrepaidMinor, *want.PrepaidCents)
	}
	for _, w := range want.Credits {
		if w.Why == "" {
			t.Errorf("%s: expected account of grant %s has no derivation (why)", where, w.Grant)
		}
		i := slices.IndexFunc(inv.Credits, func(c billing.CreditStatement) bool { return names[c.GrantID] == w.Grant })
		if i < 0 {
			t.Errorf("%s: no account of grant %s on the invoice (%d accounts)", where, w.Grant, len(inv.Credits))
			continue
		}
		c := inv.Credits[i]
		for _, f := range []struct {
			name string
			got  decimal.Decimal
			want string
		}{{"before", c.Before, w.Before}, {"used", c.Used, w.Used}, {"ended", c.Ended, w.Ended}, {"after", c.After, w.After}} {
			if f.want != "" && !f.got.Equal(decimal.RequireFromString(f.want)) {
				t.Errorf("%s: grant %s %s %s, want %s", where, w.Grant, f.name, f.got, f.want)
			}
		}
		if c.ExpiresNextPeriod != w.ExpiresNextPeriod {
			t.Errorf("%s: grant %s expires next period %v, want %v", where, w.Grant, c.ExpiresNextPeriod, w.ExpiresNextPeriod)
		}
	}
}

// checkBilledUsage: the GPU-hours an invoice bills (on demand, covered
// and burst) are the GPU-hours the usage report gives for its period.
func checkBilledUsage(t *testing.T, ctx context.Context, s *store.Store, where string, inv *billing.Invoice) {
	t.Helper()
	billed := decimal.Zero
	for _, l := range inv.Lines {
		switch l.Kind {
		case pricing.KindOnDemand, pricing.KindReserved, pricing.KindBurst:
			if l.Meter == pricing.GPUHours {
				billed = billed.Add(l.Quantity)
			}
		}
	}
	rows, err := s.Usage(ctx, usagedomain.Query{From: inv.PeriodStart, To: inv.PeriodEnd, Tenant: inv.Tenant, Source: usagedomain.SourceHourly})
	if err != nil {
		t.Fatal(err)
	}
	used := decimal.Zero
	for _, r := range rows {
		used = used.Add(r.GPUHours())
	}
	// The invoice converts each hour's microseconds to GPU-hours at 18
	// places and sums them; the report converts the period's total once.
	// Where an hour's figure has no finite decimal (a 3g MIG instance) the
	// two differ far below the 9 places amounts are stored at.
	if !billed.Round(pricing.StoragePlaces).Equal(used.Round(pricing.StoragePlaces)) {
		t.Errorf("%s %s: invoice %s bills %s GPU-hours, the usage report has %s", where, inv.Tenant, inv.Number, billed, used)
	}
}

// checkFinalizedUnchanged: a finalized invoice's stored document never
// changes, except to become void.
func checkFinalizedUnchanged(t *testing.T, ctx context.Context, s *store.Store, where string, final map[string]string) {
	t.Helper()
	invs, err := s.Invoices(ctx, "gc")
	if err != nil {
		t.Fatal(err)
	}
	for _, si := range invs {
		id := si.Invoice.ID
		switch si.Invoice.Status {
		case billing.StatusFinalized:
			if was, seen := final[id]; !seen {
				final[id] = string(si.Document)
			} else if was != string(si.Document) {
				t.Errorf("%s: finalized invoice %s changed:\n was %s\n now %s", where, si.Invoice.Number, was, si.Document)
			}
		case billing.StatusVoid:
			delete(final, id)
		}
	}
}
