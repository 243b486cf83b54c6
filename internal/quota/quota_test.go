package quota

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
)

var d = decimal.RequireFromString

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func limit(l, soft, hard string) *Limit {
	return &Limit{Limit: d(l), Soft: Threshold(soft), Hard: Threshold(hard)}
}

func testConfig(rules ...Rule) Config {
	c := DefaultConfig()
	c.Rules = rules
	return c
}

func snapshot(at time.Time, ts ...TenantState) Snapshot {
	s := Snapshot{At: at, Tenants: map[string]TenantState{}}
	for _, t := range ts {
		s.Tenants[t.Tenant] = t
	}
	return s
}

const h100 = "H100-SXM5-80GB"

func newEval(t *testing.T, cfg Config, c *clock) *Evaluator {
	t.Helper()
	e, err := NewEvaluator(cfg, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestAdmitAtTheLimitAndWithMIGWeights(t *testing.T) {
	c := &clock{time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	e := newEval(t, testConfig(Rule{Tenant: "acme", ConcurrentGPUs: limit("8", "75%", "")}), c)
	e.Update(snapshot(c.t, TenantState{Tenant: "acme", Concurrent: map[string]decimal.Decimal{h100: d("5")}}))
	req := Request{Tenant: "acme", GPUModel: h100, Count: 3, Duration: time.Hour}
	dec, err := e.Admit(req)
	if err != nil || !dec.Allowed || !dec.Headroom[ConcurrentGPUs].IsZero() || len(dec.Warnings) != 1 {
		t.Fatalf("exactly at the limit: %+v, %v", dec, err)
	}
	// 5 in use + 3 admitted = 8: one more 1g.10gb (1/7) does not fit.
	dec, _ = e.Admit(Request{Tenant: "acme", GPUModel: h100, Profile: "1g.10gb", Count: 1, Duration: time.Hour})
	if dec.Allowed || !strings.Contains(dec.Reason, "over the hard limit 8") || dec.ID != "" {
		t.Fatalf("over the limit: %+v", dec)
	}
	// Seven 3g.40gb instances are 3 GPU-equivalents: with a bigger limit
	// they fit exactly.
	e2 := newEval(t, testConfig(Rule{Tenant: "acme", ConcurrentGPUs: limit("3", "", "")}), c)
	e2.Update(snapshot(c.t, TenantState{Tenant: "acme"}))
	dec, _ = e2.Admit(Request{Tenant: "acme", GPUModel: h100, Profile: "3g.40gb", Count: 7, Duration: time.Hour})
	if !dec.Allowed || !dec.Demand.GPUs.Equal(d("3")) {
		t.Fatalf("7 x 3g.40gb: %+v", dec)
	}
}

// A share of a device (HAMi's nvidia.com/gpucores) counts that part of
// it: four 25 % shares are exactly one GPU, and a fifth does not fit.
func TestAdmitShares(t *testing.T) {
	c := &clock{time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	e := newEval(t, testConfig(Rule{Tenant: "acme", ConcurrentGPUs: limit("1", "", ""), GPUHours: limit("10", "", "")}), c)
	e.Update(snapshot(c.t, TenantState{Tenant: "acme"}))
	quarter := Request{Tenant: "acme", GPUModel: h100, Count: 1, Duration: 2 * time.Hour, Share: d("0.25")}
	for i := range 4 {
		dec, err := e.Admit(quarter)
		if err != nil || !dec.Allowed || !dec.Demand.GPUs.Equal(d("0.25")) || !dec.Demand.GPUHours.Equal(d("0.5")) {
			t.Fatalf("share %d: %+v, %v", i, dec, err)
		}
	}
	dec, err := e.Admit(quarter)
	if err != nil || dec.Allowed || !strings.Contains(dec.Reason, "concurrent_gpus would be 1.25, over the hard limit 1") {
		t.Fatalf("fifth share: %+v, %v", dec, err)
	}
	// A share of a MIG instance is that share of its weight: half a
	// 3g.40gb is 3/14 of a GPU.
	if g, err := (Request{GPUModel: h100, Profile: "3g.40gb", Count: 7, Share: d("0.5")}).GPUEquivalents(); err != nil || !g.Equal(d("1.5")) {
		t.Fatalf("7 x half a 3g.40gb = %s, %v; want 1.5", g, err)
	}
}

// Requests that together would exceed the quota, at once: exactly as many
// are admitted as fit, never one more.
func TestConcurrentAdmissionsNeverOverAdmit(t *testing.T) {
	c := &clock{time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	e := newEval(t, testConfig(Rule{Tenant: "acme", ConcurrentGPUs: limit("10", "", ""), GPUHours: limit("25", "", "")}), c)
	e.Update(snapshot(c.t, TenantState{Tenant: "acme", Concurrent: map[string]decimal.Decimal{h100: d("2")},
		GPUHours: map[string]decimal.Decimal{h100: d("13")}}))
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dec, err := e.Admit(Request{Tenant: "acme", GPUModel: h100, Count: 1, Duration: 90 * time.Minute})
			if err == nil && dec.Allowed {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	// GPU-hours bind first: 13 used, 25 allowed, 1.5 each: 8 fit (12).
	if allowed.Load() != 8 {
		t.Fatalf("%d admitted, want 8", allowed.Load())
	}
}

func TestStaleData(t *testing.T) {
	c := &clock{time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	req := Request{Tenant: "acme", GPUModel: h100, Count: 1, Duration: time.Hour}
	for _, mode := range []OnStale{FailOpen, FailClosed} {
		cfg := testConfig(Rule{Tenant: "acme", ConcurrentGPUs: limit("1", "", "")})
		cfg.OnStale = mode
		e := newEval(t, cfg, c)
		dec, err := e.Admit(req)
		if err != nil || dec.Allowed != (mode == FailOpen) || !dec.Stale || !strings.Contains(dec.Reason, "no quota data yet") {
			t.Errorf("%s without data: %+v %v", mode, dec, err)
		}
		e.Update(snapshot(c.t.Add(-6*time.Minute), TenantState{Tenant: "acme"}))
		dec, _ = e.Admit(req)
		if dec.Allowed != (mode == FailOpen) || !strings.Contains(dec.Reason, "6m0s old") {
			t.Errorf("%s with 6 min old data: %+v", mode, dec)
		}
		e.Update(snapshot(c.t.Add(-time.Minute), TenantState{Tenant: "acme"}))
		if dec, _ := e.Admit(req); dec.Stale {
			t.Errorf("%s with fresh data: %+v", mode, dec)
		}
	}
}

func TestAdmissionsExpireOrAreReleasedWhenTheWorkStarts(t *testing.T) {
	c := &clock{time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	e := newEval(t, testConfig(Rule{Tenant: "acme", ConcurrentGPUs: limit("4", "", "")}), c)
	e.Update(snapshot(c.t, TenantState{Tenant: "acme"}))
	req := Request{Tenant: "acme", GPUModel: h100, Count: 4, Duration: time.Hour}
	if dec, _ := e.Admit(req); !dec.Allowed {
		t.Fatal("first admission denied")
	}
	if dec, _ := e.Admit(req); dec.Allowed {
		t.Fatal("the admitted work must count while it has not started")
	}
	// The work starts: 4 GPUs now in use release the admission, and the
	// measured use still holds the quota.
	e.Update(snapshot(c.t, TenantState{Tenant: "acme", Concurrent: map[string]decimal.Decimal{h100: d("4")}}))
	st, _ := e.State()
	if !st[0].Used.Equal(d("4")) || !st[0].Admitted.IsZero() {
		t.Fatalf("after the work started: %+v", st)
	}
	// Work that never starts stops counting after the TTL.
	e.Update(snapshot(c.t, TenantState{Tenant: "acme"}))
	if dec, _ := e.Admit(req); !dec.Allowed {
		t.Fatal("admission after the work ended")
	}
	c.t = c.t.Add(DefaultConfig().ReservationTTL + time.Second)
	e.Update(snapshot(c.t, TenantState{Tenant: "acme"}))
	if dec, _ := e.Admit(req); !dec.Allowed {
		t.Fatal("an expired admission still counted")
	}
}

func TestCrossingsFireOnceEach(t *testing.T) {
	c := &clock{time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)}
	e := newEval(t, testConfig(
		Rule{Tenant: "acme", GPUHours: limit("100", "80%", "")},
		Rule{Department: "research", Spend: limit("1000", "500", "900")},
	), c)
	state := func(month, hours, spend string) Snapshot {
		return snapshot(c.t, TenantState{Tenant: "acme", Department: "research", Month: month,
			GPUHours: map[string]decimal.Decimal{h100: d(hours)}, Spend: d(spend)},
			TenantState{Tenant: "globex", Department: "research", Month: month, Spend: d(spend)})
	}
	names := func(cs []Crossing) string {
		var s []string
		for _, c := range cs {
			s = append(s, c.Subject+" "+string(c.Metric)+" "+c.Level)
		}
		return strings.Join(s, ", ")
	}
	steps := []struct {
		month, hours, spend string
		want                string
	}{
		{"2026-11", "50", "100", ""},
		{"2026-11", "85", "260", "tenant acme gpu_hours soft, department research spend soft"},
		{"2026-11", "90", "300", ""},
		{"2026-11", "101", "460", "tenant acme gpu_hours hard, department research spend hard"},
		{"2026-11", "120", "500", ""},
		{"2026-12", "1", "0", ""},
		{"2026-12", "95", "10", "tenant acme gpu_hours soft"},
	}
	for i, s := range steps {
		if got := names(e.Update(state(s.month, s.hours, s.spend))); got != s.want {
			t.Errorf("step %d: crossings %q, want %q", i, got, s.want)
		}
	}
}

func TestBadRequests(t *testing.T) {
	c := &clock{time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	e := newEval(t, testConfig(Rule{Tenant: "acme", ConcurrentGPUs: limit("4", "", "")}), c)
	e.Update(snapshot(c.t, TenantState{Tenant: "acme"}))
	for name, r := range map[string]Request{
		"no tenant":       {GPUModel: h100, Count: 1, Duration: time.Hour},
		"no model":        {Tenant: "acme", Count: 1, Duration: time.Hour},
		"negative count":  {Tenant: "acme", GPUModel: h100, Count: -1, Duration: time.Hour},
		"zero count":      {Tenant: "acme", GPUModel: h100, Duration: time.Hour},
		"huge count":      {Tenant: "acme", GPUModel: h100, Count: 1 << 30, Duration: time.Hour},
		"unknown profile": {Tenant: "acme", GPUModel: h100, Profile: "9g.99gb", Count: 1, Duration: time.Hour},
		"no duration":     {Tenant: "acme", GPUModel: h100, Count: 1},
		"a year":          {Tenant: "acme", GPUModel: h100, Count: 1, Duration: 365 * 24 * time.Hour},
		"negative share":  {Tenant: "acme", GPUModel: h100, Count: 1, Duration: time.Hour, Share: d("-0.25")},
		"share over one":  {Tenant: "acme", GPUModel: h100, Count: 1, Duration: time.Hour, Share: d("1.01")},
	} {
		if _, err := e.Admit(r); !errors.Is(err, ErrInvalid) || !fault.IsValidation(err) {
			t.Errorf("%s: %v, want ErrInvalid, a validation error", name, err)
		}
	}
	if _, err := e.Admit(Request{Tenant: "nobody", GPUModel: h100, Count: 1, Duration: time.Hour}); !errors.Is(err, ErrUnknownTenant) || !fault.IsNotFound(err) {
		t.Errorf("unknown tenant: %v, want ErrUnknownTenant, a not-found error", err)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := map[string]struct {
		r    Rule
		want string
	}{
		"both":           {Rule{Tenant: "a", Department: "b", GPUHours: limit("1", "", "")}, "exactly one of tenant and department"},
		"neither":        {Rule{GPUHours: limit("1", "", "")}, "exactly one"},
		"no limit":       {Rule{Tenant: "a"}, "no limit"},
		"negative":       {Rule{Tenant: "a", GPUHours: limit("-1", "", "")}, "must not be negative"},
		"bad threshold":  {Rule{Tenant: "a", GPUHours: limit("10", "eighty", "")}, "want an amount"},
		"soft above":     {Rule{Tenant: "a", GPUHours: limit("10", "12", "100%")}, "soft 12 is above hard 10"},
		"spend by model": {Rule{Tenant: "a", GPUModel: h100, Spend: limit("10", "", "")}, "not per GPU model"},
	}
	for name, c := range cases {
		if err := testConfig(c.r).Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	dup := testConfig(Rule{Tenant: "a", GPUHours: limit("1", "", "")}, Rule{Tenant: "a", Spend: limit("1", "", "")})
	if err := dup.Validate(); err == nil || !strings.Contains(err.Error(), "also has rules[0]") {
		t.Errorf("duplicate subject: %v", err)
	}
	bad := DefaultConfig()
	bad.OnStale = "maybe"
	bad.StaleAfter = time.Second
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "on_stale") || !strings.Contains(err.Error(), "stale_after") {
		t.Errorf("settings: %v", err)
	}
}

// A department rule on one model sums that model's use over the
// department's tenants, from the snapshot installed last.
func TestDepartmentRuleSumsItsTenantsPerModel(t *testing.T) {
	c := &clock{time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	const a100 = "A100-SXM4-80GB"
	e := newEval(t, testConfig(Rule{Department: "research", GPUModel: h100, ConcurrentGPUs: limit("10", "", "")}), c)
	state := func(acme, globex string) Snapshot {
		return snapshot(c.t,
			TenantState{Tenant: "acme", Department: "research", Concurrent: map[string]decimal.Decimal{h100: d(acme), a100: d("50")}},
			TenantState{Tenant: "globex", Department: "research", Concurrent: map[string]decimal.Decimal{h100: d(globex)}},
			TenantState{Tenant: "initech", Department: "ops", Concurrent: map[string]decimal.Decimal{h100: d("99")}})
	}
	e.Update(state("4", "3"))
	cases := []struct {
		tenant, model string
		count         int
		allowed       bool
		headroom      string
	}{
		{"globex", h100, 4, false, "3"}, // 4 + 3 in use, 4 more is 11
		{"globex", h100, 3, true, "0"},  // exactly 10
		{"acme", a100, 5, true, ""},     // the rule is for H100 only
		{"acme", h100, 1, false, "0"},   // the 3 admitted above count
	}
	for _, tc := range cases {
		dec, err := e.Admit(Request{Tenant: tc.tenant, GPUModel: tc.model, Count: tc.count, Duration: time.Hour})
		if err != nil || dec.Allowed != tc.allowed {
			t.Fatalf("%s %d×%s: %+v, %v; want allowed=%v", tc.tenant, tc.count, tc.model, dec, err, tc.allowed)
		}
		if h, ok := dec.Headroom[ConcurrentGPUs]; tc.headroom != "" && (!ok || !h.Equal(d(tc.headroom))) {
			t.Fatalf("%s %d×%s: headroom %v, want %s", tc.tenant, tc.count, tc.model, dec.Headroom, tc.headroom)
		}
	}
	// A new snapshot replaces the sums: use fell to 1 + 0, and the 3
	// pending H100s are still held, so 6 more fit and 7 do not.
	e.Update(state("1", "0"))
	if dec, _ := e.Admit(Request{Tenant: "acme", GPUModel: h100, Count: 7, Duration: time.Hour}); dec.Allowed {
		t.Fatalf("7 after the new snapshot: %+v", dec)
	}
	if dec, _ := e.Admit(Request{Tenant: "acme", GPUModel: h100, Count: 6, Duration: time.Hour}); !dec.Allowed {
		t.Fatalf("6 after the new snapshot: %+v", dec)
	}
	states, _ := e.State()
	if len(states) != 1 || !states[0].Used.Equal(d("1")) || !states[0].Admitted.Equal(d("9")) {
		t.Fatalf("state: %+v", states)
	}
}

// A dry run (a server-side dry run of the API server, or a check only)
// is decided like any request and holds nothing: a dry run followed by
// the real request leaves exactly the real one held.
func TestDryRunHoldsNothing(t *testing.T) {
	c := &clock{time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	e := newEval(t, testConfig(Rule{Tenant: "acme", ConcurrentGPUs: limit("4", "", "")}), c)
	e.Update(snapshot(c.t, TenantState{Tenant: "acme"}))
	admitted := func() decimal.Decimal {
		st, _ := e.State()
		return st[0].Admitted
	}
	dry := Request{Tenant: "acme", GPUModel: h100, Count: 3, Duration: time.Hour, DryRun: true}
	dec, err := e.Admit(dry)
	if err != nil || !dec.Allowed || !dec.DryRun || dec.ID != "" || !dec.Headroom[ConcurrentGPUs].Equal(d("1")) {
		t.Fatalf("dry run: %+v, %v", dec, err)
	}
	if !admitted().IsZero() {
		t.Fatalf("a dry run holds %s", admitted())
	}
	real := dry
	real.DryRun = false
	if dec, err := e.Admit(real); err != nil || !dec.Allowed || dec.ID == "" {
		t.Fatalf("the real request after the dry run: %+v, %v", dec, err)
	}
	if !admitted().Equal(d("3")) {
		t.Fatalf("admitted %s after a dry run and the real request, want 3", admitted())
	}
	// A dry run sees what is held, and a denied one holds nothing either.
	if dec, _ := e.Admit(dry); dec.Allowed || !admitted().Equal(d("3")) {
		t.Fatalf("second dry run: %+v, admitted %s", dec, admitted())
	}
}

// Requests admitted together (a Pod's GPUs and MIG instances) are decided
// on their sum, and a denial holds none of them.
func TestAdmitAllHoldsAllOrNothing(t *testing.T) {
	c := &clock{time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	e := newEval(t, testConfig(Rule{Tenant: "acme", ConcurrentGPUs: limit("3.5", "", "")}), c)
	e.Update(snapshot(c.t, TenantState{Tenant: "acme"}))
	gpus := Request{Tenant: "acme", GPUModel: h100, Count: 3, Duration: time.Hour}
	mig := Request{Tenant: "acme", GPUModel: h100, Profile: "3g.40gb", Count: 2, Duration: time.Hour}
	// 3 GPUs fit alone, with 2 x 3g.40gb (6/7) they do not.
	dec, err := e.AdmitAll([]Request{gpus, mig})
	if err != nil || dec.Allowed || dec.ID != "" || !strings.Contains(dec.Reason, "would be 3.857") {
		t.Fatalf("3 GPUs + 2 x 3g.40gb: %+v, %v", dec, err)
	}
	if st, _ := e.State(); !st[0].Admitted.IsZero() {
		t.Fatalf("a denied admission holds %s", st[0].Admitted)
	}
	// One 3g.40gb fits with the 3 GPUs (3.429): both held under one ID.
	mig.Count = 1
	dec, err = e.AdmitAll([]Request{gpus, mig})
	if err != nil || !dec.Allowed || dec.ID == "" || !dec.Demand.GPUs.Round(3).Equal(d("3.429")) {
		t.Fatalf("3 GPUs + 1 x 3g.40gb: %+v, %v", dec, err)
	}
	if st, _ := e.State(); !st[0].Admitted.Round(3).Equal(d("3.429")) {
		t.Fatalf("admitted %s, want 3.429", st[0].Admitted)
	}
	for name, reqs := range map[string][]Request{
		"none":          nil,
		"two tenants":   {gpus, {Tenant: "globex", GPUModel: h100, Count: 1, Duration: time.Hour}},
		"mixed dry run": {gpus, {Tenant: "acme", GPUModel: h100, Count: 1, Duration: time.Hour, DryRun: true}},
		"over MaxCount in all": {{Tenant: "acme", GPUModel: h100, Count: MaxCount, Duration: time.Hour},
			{Tenant: "acme", GPUModel: h100, Profile: "1g.10gb", Count: 1, Duration: time.Hour}},
	} {
		if _, err := e.AdmitAll(reqs); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
