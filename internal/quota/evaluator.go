package quota

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// TenantState is what the evaluator knows of one tenant at a refresh.
type TenantState struct {
	Tenant     string
	Department string
	// Concurrent is the GPU-equivalents held now, by GPU model.
	Concurrent map[string]decimal.Decimal
	// GPUHours are this month's GPU-equivalent hours, by GPU model.
	GPUHours map[string]decimal.Decimal
	// Spend is this month's cost so far at the tenant's price book.
	Spend    decimal.Decimal
	Currency string
	// SpendRate is the price of one more GPU-equivalent hour, by SKU, at
	// the tier the tenant has reached: what admitted work will cost.
	SpendRate map[string]decimal.Decimal
	// Month labels the month the figures are of (crossings reset with it).
	Month string
}

// Snapshot is the evaluator's state of every tenant, taken at At.
type Snapshot struct {
	At      time.Time
	Tenants map[string]TenantState
}

// Request asks whether work fits: Count devices of GPUModel, whole GPUs
// or MIG instances of Profile, for Duration. GPUModel may be written in
// any case or as NVIDIA names the device (gpucatalog.CanonicalModel); it
// must name a model the evaluator knows. A dry run is decided like any
// other request and holds nothing.
type Request struct {
	Tenant   string        `json:"tenant"`
	GPUModel string        `json:"gpu_model"`
	Profile  string        `json:"profile,omitempty"` // MIG profile, e.g. 3g.40gb; empty for whole GPUs
	Count    int           `json:"count"`
	Duration time.Duration `json:"-"`
	DryRun   bool          `json:"dry_run,omitempty"`
	// Share is the part of each device the work holds where devices are
	// shared by a granted quota of compute (HAMi's nvidia.com/gpucores):
	// 0.25 counts a quarter of each. Zero counts whole devices. Only the
	// Kubernetes webhook sets it; the HTTP API asks for whole devices.
	Share decimal.Decimal `json:"-"`
}

// Limits of one request.
const (
	// MaxCount is the most devices one admission may ask for, in one
	// request and in all the requests admitted together.
	MaxCount = 100_000
	// MaxParts bounds the requests admitted together (a Pod's GPU
	// resources).
	MaxParts    = 64
	maxDuration = 31 * 24 * time.Hour
)

// ErrInvalid marks a request that cannot be decided: the caller's fault,
// in the validation category.
var ErrInvalid = fault.Validation(errors.New("invalid admission request"))

// ErrUnknownTenant is a tenant neither metered nor under any quota, in
// the not-found category.
var ErrUnknownTenant = fault.NotFound(errors.New("unknown tenant"))

// SKU is the request's SKU (MODEL or MODEL/PROFILE), with the model as
// the catalogue spells it.
func (r Request) SKU() string {
	model, _ := gpucatalog.CanonicalModel(r.GPUModel)
	return gpucatalog.SKU(model, r.Profile)
}

// Validate checks the request's own fields.
func (r Request) Validate() error {
	var errs []error
	if r.Tenant == "" {
		errs = append(errs, errors.New("tenant: required"))
	}
	if strings.TrimSpace(r.GPUModel) == "" {
		errs = append(errs, errors.New("gpu_model: required, e.g. H100-SXM5-80GB"))
	}
	if r.Count < 1 || r.Count > MaxCount {
		errs = append(errs, fmt.Errorf("count %d: want 1 to %d", r.Count, MaxCount))
	}
	if r.Duration <= 0 || r.Duration > maxDuration {
		errs = append(errs, fmt.Errorf("expected_duration %s: want more than 0 and at most %s", r.Duration, maxDuration))
	}
	if r.Share.IsNegative() || r.Share.GreaterThan(decimal.NewFromInt(1)) {
		errs = append(errs, fmt.Errorf("share %s: want more than 0 and at most 1 (0 for whole devices)", r.Share))
	}
	if strings.TrimSpace(r.GPUModel) != "" {
		if _, _, err := Weight(r.SKU()); err != nil {
			errs = append(errs, fmt.Errorf("gpu_model/profile: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Demand is what admitted work adds.
type Demand struct {
	GPUs     decimal.Decimal // GPU-equivalents at once
	GPUHours decimal.Decimal
	Spend    decimal.Decimal
}

func (d Demand) of(m Metric) decimal.Decimal {
	switch m {
	case ConcurrentGPUs:
		return d.GPUs
	case GPUHours:
		return d.GPUHours
	}
	return d.Spend
}

// Decision is the answer to a Request.
type Decision struct {
	ID      string `json:"admission_id,omitempty"`
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason"`
	// Headroom is, per metric with a hard limit, what is left after this
	// work (before it, when denied).
	Headroom map[Metric]decimal.Decimal `json:"headroom"`
	// Warnings name soft thresholds the work crosses or has crossed.
	Warnings []string `json:"warnings,omitempty"`
	Demand   Demand   `json:"-"`
	Stale    bool     `json:"stale,omitempty"`
	// DryRun: decided, nothing held, no ID.
	DryRun bool `json:"dry_run,omitempty"`
	// CreditRefused: a credit_only customer's balance cannot cover the
	// work over the credit horizon (Reason says by how much); no quota
	// was consulted.
	CreditRefused bool `json:"-"`
}

type reservation struct {
	id         string
	part       int // index within its admission
	tenant     string
	department string
	model      string
	demand     Demand
	expires    time.Time
	done       bool     // released or expired
	sumKeys    []string // the sums it counts in, from keys()
}

// keys are the sums a reservation counts in: its tenant's and its
// department's, for its model and for every model.
func (r *reservation) keys() []string {
	if r.sumKeys == nil {
		r.sumKeys = []string{"t|" + r.tenant + "|" + r.model, "t|" + r.tenant + "|"}
		if r.department != "" {
			r.sumKeys = append(r.sumKeys, "d|"+r.department+"|"+r.model, "d|"+r.department+"|")
		}
	}
	return r.sumKeys
}

// ruleKey is the sum of reservations a rule covers.
func ruleKey(r Rule) string {
	if r.Tenant != "" {
		return "t|" + r.Tenant + "|" + r.GPUModel
	}
	return "d|" + r.Department + "|" + r.GPUModel
}

// Evaluator holds the latest snapshot and the admissions not yet running,
// and decides requests from them alone, one at a time, so requests that
// together would exceed a quota cannot all be admitted.
type Evaluator struct {
	cfg    Config
	levels []map[Metric]Levels // per rule
	now    func() time.Time

	mu   sync.Mutex
	snap Snapshot
	// used[i][m] is rule i's measured value of m in snap, summed once per
	// snapshot so a decision does not walk every tenant.
	used []map[Metric]decimal.Decimal
	// months[i] is rule i's month label in snap.
	months []string
	// Admissions not yet running: in expiry order (one TTL for all, so
	// that is admission order), per tenant in the same order, and summed
	// per tenant and department, so a decision reads sums, not lists.
	queue    []*reservation
	byTenant map[string][]*reservation
	sums     map[string]Demand
	rules    map[string][]int // "t|tenant" or "d|department" → rule indexes
	seq      uint64
	crossed  map[string]bool // subject|metric|level|month
	// logging: admissions and releases are queued in unwritten for the
	// AdmissionLog (Service.LogAdmissions).
	logging   bool
	unwritten logQueue[Admitted]
	// GPU models outside the catalogue that requests may name, by their
	// upper-case form: those of quota rules (fixed) and those the fleet
	// reported in the latest snapshot.
	ruleModels, fleetModels map[string]string
}

// NewEvaluator checks the config and starts with no data (stale).
func NewEvaluator(cfg Config, now func() time.Time) (*Evaluator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Evaluator{cfg: cfg, now: now, crossed: map[string]bool{}, byTenant: map[string][]*reservation{},
		sums: map[string]Demand{}, rules: map[string][]int{}, ruleModels: map[string]string{}, fleetModels: map[string]string{}}
	// Rules count their model as the catalogue spells it, so that usage,
	// requests and rules meet under one name however each writes it.
	e.cfg.Rules = append([]Rule(nil), cfg.Rules...)
	for i, r := range e.cfg.Rules {
		if r.GPUModel != "" {
			e.cfg.Rules[i].GPUModel, _ = e.model(r.GPUModel)
			if _, known := gpucatalog.LookupModel(e.cfg.Rules[i].GPUModel); !known {
				e.ruleModels[strings.ToUpper(e.cfg.Rules[i].GPUModel)] = e.cfg.Rules[i].GPUModel
			}
		}
	}
	for i, r := range e.cfg.Rules {
		if r.Tenant != "" {
			e.rules["t|"+r.Tenant] = append(e.rules["t|"+r.Tenant], i)
		} else {
			e.rules["d|"+r.Department] = append(e.rules["d|"+r.Department], i)
		}
		lv := map[Metric]Levels{}
		for _, m := range Metrics() {
			if l := r.Limit(m); l != nil {
				lv[m], _ = l.Levels() // validated above
			}
		}
		e.levels = append(e.levels, lv)
	}
	return e, nil
}

// Crossing is a threshold a rule's measured value went over since the
// previous snapshot: once per crossing, again only after the month resets.
type Crossing struct {
	Subject string
	Metric  Metric
	Level   string // soft or hard
	Value   decimal.Decimal
	Limit   decimal.Decimal // the threshold crossed
	Month   string
}

// Update installs a new snapshot. Admissions whose work now shows in the
// tenant's live concurrency are released, oldest first, and expired ones
// dropped. It returns the thresholds newly crossed by measured values.
func (e *Evaluator) Update(s Snapshot) []Crossing {
	e.mu.Lock()
	defer e.mu.Unlock()
	prev := e.snap
	s = e.canonical(s)
	e.install(s)
	e.releaseStarted(prev, s)
	e.expire(e.now())
	var out []Crossing
	for i, r := range e.cfg.Rules {
		month := e.months[i]
		for _, m := range Metrics() {
			lv, ok := e.levels[i][m]
			if !ok {
				continue
			}
			v := e.used[i][m]
			for _, level := range []struct {
				name string
				at   decimal.Decimal
				has  bool
			}{{"soft", lv.Soft, lv.HasSoft}, {"hard", lv.Hard, true}} {
				if !level.has {
					continue
				}
				key := strings.Join([]string{r.Subject(), string(m), level.name, month}, "|")
				over := v.GreaterThanOrEqual(level.at) && (level.at.IsPositive() || v.IsPositive())
				if over && !e.crossed[key] {
					e.crossed[key] = true
					out = append(out, Crossing{Subject: r.Subject(), Metric: m, Level: level.name, Value: v, Limit: level.at, Month: month})
				} else if !over && m == ConcurrentGPUs {
					delete(e.crossed, key) // concurrency falls back: a new crossing fires again
				}
			}
		}
	}
	return out
}

// install makes s the snapshot and sums every rule's measured values and
// month label from it in one pass over the tenants.
func (e *Evaluator) install(s Snapshot) {
	e.snap = s
	e.used = make([]map[Metric]decimal.Decimal, len(e.cfg.Rules))
	e.months = make([]string, len(e.cfg.Rules))
	for i := range e.cfg.Rules {
		e.used[i] = map[Metric]decimal.Decimal{ConcurrentGPUs: decimal.Zero, GPUHours: decimal.Zero, Spend: decimal.Zero}
	}
	for _, t := range s.Tenants {
		for _, i := range append(append([]int(nil), e.rules["t|"+t.Tenant]...), e.departmentRules(t.Department)...) {
			r := e.cfg.Rules[i]
			u := e.used[i]
			u[ConcurrentGPUs] = u[ConcurrentGPUs].Add(byModel(t.Concurrent, r.GPUModel))
			u[GPUHours] = u[GPUHours].Add(byModel(t.GPUHours, r.GPUModel))
			u[Spend] = u[Spend].Add(t.Spend)
			if e.months[i] == "" {
				e.months[i] = t.Month
			}
		}
	}
}

func (e *Evaluator) departmentRules(dept string) []int {
	if dept == "" {
		return nil
	}
	return e.rules["d|"+dept]
}

// releaseStarted releases admissions whose work appeared: per tenant and
// model, the growth of live concurrency since the last snapshot releases
// pending admissions, oldest first.
func (e *Evaluator) releaseStarted(prev, cur Snapshot) {
	for tenant, t := range cur.Tenants {
		for model, v := range t.Concurrent {
			growth := v.Sub(prev.Tenants[tenant].Concurrent[model])
			if !growth.IsPositive() {
				continue
			}
			for _, r := range e.byTenant[tenant] {
				if r.done || r.model != model || !r.demand.GPUs.IsPositive() || growth.LessThan(r.demand.GPUs) {
					continue
				}
				growth = growth.Sub(r.demand.GPUs)
				e.remove(r)
				e.logged(r.admitted(true))
			}
		}
	}
}

func (e *Evaluator) add(r *reservation) {
	e.queue = append(e.queue, r)
	e.byTenant[r.tenant] = append(e.byTenant[r.tenant], r)
	for _, k := range r.keys() {
		e.sums[k] = e.sums[k].plus(r.demand)
	}
}

func (e *Evaluator) remove(r *reservation) {
	if r.done {
		return
	}
	r.done = true
	for _, k := range r.keys() {
		s := e.sums[k]
		e.sums[k] = Demand{GPUs: s.GPUs.Sub(r.demand.GPUs), GPUHours: s.GPUHours.Sub(r.demand.GPUHours), Spend: s.Spend.Sub(r.demand.Spend)}
	}
}

// expire drops admissions past their TTL: the oldest are at the front.
func (e *Evaluator) expire(now time.Time) {
	for len(e.queue) > 0 && !now.Before(e.queue[0].expires) {
		r := e.queue[0]
		e.queue[0] = nil
		e.queue = e.queue[1:]
		e.remove(r)
		list := e.byTenant[r.tenant]
		for len(list) > 0 && list[0].done {
			list = list[1:]
		}
		if len(list) == 0 {
			delete(e.byTenant, r.tenant)
		} else {
			e.byTenant[r.tenant] = list
		}
	}
}

func applies(r Rule, tenant, department string) bool {
	if r.Tenant != "" {
		return r.Tenant == tenant
	}
	return department != "" && r.Department == department
}

// measured is rule i's metric summed over the tenants it covers.
func (e *Evaluator) measured(i int, m Metric) decimal.Decimal {
	if i >= len(e.used) { // no snapshot yet
		return decimal.Zero
	}
	return e.used[i][m]
}

func byModel(v map[string]decimal.Decimal, model string) decimal.Decimal {
	if model != "" {
		return v[model]
	}
	sum := decimal.Zero
	for _, x := range v {
		sum = sum.Add(x)
	}
	return sum
}

// reserved is what pending admissions hold against a rule.
func (e *Evaluator) reserved(r Rule, m Metric) decimal.Decimal {
	return e.sums[ruleKey(r)].of(m)
}

// department is the tenant's department from the snapshot; a tenant not
// metered yet is known when a tenant rule names it.
func (e *Evaluator) department(tenant string) (string, bool) {
	if t, ok := e.snap.Tenants[tenant]; ok {
		return t.Department, true
	}
	_, ruled := e.rules["t|"+tenant]
	return "", ruled
}

// Admit decides a request and, when it is allowed and not a dry run,
// holds its demand as an admission until its work shows up or
// ReservationTTL passes.
func (e *Evaluator) Admit(req Request) (Decision, error) {
	return e.AdmitAll([]Request{req})
}

// part is one request of an admission, its model as the evaluator
// counts it.
type part struct {
	model  string
	demand Demand
}

// validateAll checks requests admitted together: each on its own, one
// tenant, all dry runs or none, and at most MaxCount devices in all.
func validateAll(reqs []Request) error {
	if len(reqs) == 0 || len(reqs) > MaxParts {
		return fmt.Errorf("%w: %d requests at once, want 1 to %d", ErrInvalid, len(reqs), MaxParts)
	}
	total := 0
	for _, r := range reqs {
		if err := r.Validate(); err != nil {
			return err
		}
		if r.Tenant != reqs[0].Tenant || r.DryRun != reqs[0].DryRun {
			return fmt.Errorf("%w: requests admitted together need one tenant and one dry_run", ErrInvalid)
		}
		total += r.Count // each at most MaxCount, so no overflow
		if total > MaxCount {
			return fmt.Errorf("%w: count: more than %d devices in all", ErrInvalid, MaxCount)
		}
	}
	return nil
}

// AdmitAll decides requests of one tenant as one admission, as a Pod's
// whole GPUs and MIG instances must be: every rule sees their demand
// together, and either all are held or none is. A denial holds nothing,
// and so does a dry run (every request's DryRun), allowed or not.
func (e *Evaluator) AdmitAll(reqs []Request) (Decision, error) {
	if err := validateAll(reqs); err != nil {
		return Decision{}, err
	}
	tenant, dry := reqs[0].Tenant, reqs[0].DryRun
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	dept, known := e.department(tenant)
	if !known {
		return Decision{}, fmt.Errorf("tenant %q: %w (not metered and under no quota)", tenant, ErrUnknownTenant)
	}
	e.expire(now)
	d := Decision{Headroom: map[Metric]decimal.Decimal{}, DryRun: dry}
	parts := make([]part, 0, len(reqs))
	for _, req := range reqs {
		model, ok := e.model(req.GPUModel)
		if !ok {
			return Decision{}, e.unknownModel(req.GPUModel)
		}
		sku := gpucatalog.SKU(model, req.Profile)
		gpus, err := devices(sku, req.Count)
		if err != nil { // validated above
			return Decision{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		gpus = req.shared(gpus)
		p := part{model: model, demand: Demand{GPUs: gpus}}
		hours := decimal.NewFromInt(int64(req.Duration)).DivRound(decimal.NewFromInt(int64(time.Hour)), 18)
		p.demand.GPUHours = gpus.Mul(hours)
		if t, ok := e.snap.Tenants[tenant]; ok {
			if rate, ok := t.SpendRate[sku]; ok {
				p.demand.Spend = p.demand.GPUHours.Mul(rate)
			}
		}
		d.Demand = d.Demand.plus(p.demand)
		parts = append(parts, p)
	}
	if age := now.Sub(e.snap.At); e.snap.At.IsZero() || age > e.cfg.StaleAfter {
		d.Stale = true
		what := "no quota data yet"
		if !e.snap.At.IsZero() {
			what = fmt.Sprintf("quota data is %s old (stale after %s)", age.Round(time.Second), e.cfg.StaleAfter)
		}
		if e.cfg.OnStale == FailClosed {
			d.Reason = what + "; failing closed"
			return d, nil
		}
		d.Allowed, d.Reason = true, what+"; failing open"
		e.hold(&d, tenant, dept, parts, now)
		return d, nil
	}
	var denials []string
	for _, i := range append(append([]int(nil), e.rules["t|"+tenant]...), e.departmentRules(dept)...) {
		r := e.cfg.Rules[i]
		if !applies(r, tenant, dept) {
			continue
		}
		// The demand of the parts this rule covers: a model rule sees
		// only its model's.
		var demand Demand
		covers := false
		for _, p := range parts {
			if r.GPUModel == "" || r.GPUModel == p.model {
				demand, covers = demand.plus(p.demand), true
			}
		}
		if !covers {
			continue
		}
		for _, m := range Metrics() {
			lv, ok := e.levels[i][m]
			if !ok {
				continue
			}
			current := e.measured(i, m).Add(e.reserved(r, m))
			after := current.Add(demand.of(m))
			left := lv.Hard.Sub(after)
			if after.GreaterThan(lv.Hard) {
				left = lv.Hard.Sub(current)
				denials = append(denials, fmt.Sprintf("%s: %s would be %s, over the hard limit %s (%s in use or admitted)",
					r.Subject(), m, after.Round(3), lv.Hard.Round(3), current.Round(3)))
			} else if lv.HasSoft && after.GreaterThan(lv.Soft) {
				d.Warnings = append(d.Warnings, fmt.Sprintf("%s: %s would be %s, over the soft limit %s", r.Subject(), m, after.Round(3), lv.Soft.Round(3)))
			}
			if h, seen := d.Headroom[m]; !seen || left.LessThan(h) {
				d.Headroom[m] = left
			}
		}
	}
	if len(denials) > 0 {
		d.Reason = strings.Join(denials, "; ")
		return d, nil
	}
	d.Allowed = true
	d.Reason = "within every quota"
	if len(d.Headroom) == 0 {
		d.Reason = "no quota applies"
	}
	e.hold(&d, tenant, dept, parts, now)
	return d, nil
}

func (d Demand) plus(o Demand) Demand {
	return Demand{GPUs: d.GPUs.Add(o.GPUs), GPUHours: d.GPUHours.Add(o.GPUHours), Spend: d.Spend.Add(o.Spend)}
}

// hold keeps an allowed admission's parts under one ID, unless it is a
// dry run: a dry run holds nothing and has no ID.
func (e *Evaluator) hold(d *Decision, tenant, dept string, parts []part, now time.Time) {
	if d.DryRun {
		return
	}
	e.seq++
	d.ID = "adm-" + strconv.FormatInt(now.UnixMilli(), 10) + "-" + strconv.FormatUint(e.seq, 10)
	for i, p := range parts {
		r := &reservation{id: d.ID, part: i, tenant: tenant, department: dept, model: p.model,
			demand: p.demand, expires: now.Add(e.cfg.ReservationTTL)}
		e.add(r)
		e.logged(r.admitted(false))
	}
}

// RuleState is one rule's metric as /v1/quotas and /metrics show it.
type RuleState struct {
	Subject  string           `json:"subject"`
	Tenant   string           `json:"tenant,omitempty"`
	Dept     string           `json:"department,omitempty"`
	GPUModel string           `json:"gpu_model,omitempty"`
	Metric   Metric           `json:"metric"`
	Limit    decimal.Decimal  `json:"limit"`
	Soft     *decimal.Decimal `json:"soft,omitempty"`
	Hard     decimal.Decimal  `json:"hard"`
	Used     decimal.Decimal  `json:"used"`
	Admitted decimal.Decimal  `json:"admitted"` // pending admissions
}

// State lists every rule's metrics, with the snapshot's time.
func (e *Evaluator) State() ([]RuleState, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.expire(e.now())
	var out []RuleState
	for i, r := range e.cfg.Rules {
		for _, m := range Metrics() {
			lv, ok := e.levels[i][m]
			if !ok {
				continue
			}
			s := RuleState{Subject: r.Subject(), Tenant: r.Tenant, Dept: r.Department, GPUModel: r.GPUModel, Metric: m,
				Limit: r.Limit(m).Limit, Hard: lv.Hard, Used: e.measured(i, m), Admitted: e.reserved(r, m)}
			if lv.HasSoft {
				soft := lv.Soft
				s.Soft = &soft
			}
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Subject < out[j].Subject })
	return out, e.snap.At
}
