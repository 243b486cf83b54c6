package insights

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"time"
)

// IdleParams decide when held GPU time is idle.
type IdleParams struct {
	// SMThreshold: an interval is idle when its SM activity is below this
	// fraction of the GPU time held (SMActiveMicros < SMThreshold ×
	// GPUMicros). Default 0.05.
	SMThreshold float64 `json:"sm_threshold"`
	// Window: a run of idle intervals counts as held-but-idle only when it
	// lasts at least this long, first start to last end. Default 30 min.
	Window time.Duration `json:"window"`
	// MaxGap: consecutive intervals further apart than this end a run (the
	// tenant let go of the device, or samples are missing). Gaps never count
	// as idle; they only join runs. Default 1 min (a few lost samples).
	MaxGap time.Duration `json:"max_gap"`
}

// DefaultIdleParams are the defaults documented on IdleParams.
func DefaultIdleParams() IdleParams {
	return IdleParams{SMThreshold: 0.05, Window: 30 * time.Minute, MaxGap: time.Minute}
}

// Validate reports every out-of-range parameter.
func (p IdleParams) Validate() error {
	var errs []error
	if math.IsNaN(p.SMThreshold) || p.SMThreshold <= 0 || p.SMThreshold > 1 {
		errs = append(errs, fmt.Errorf("sm threshold %v is not within (0, 1]", p.SMThreshold))
	}
	if p.Window <= 0 {
		errs = append(errs, fmt.Errorf("window %s is not positive", p.Window))
	}
	if p.MaxGap < 0 {
		errs = append(errs, fmt.Errorf("max gap %s is negative", p.MaxGap))
	}
	return errors.Join(errs...)
}

// EfficiencyInput is everything Efficiency needs.
type EfficiencyInput struct {
	// From and To bound the period [From, To), whole UTC hours; every
	// interval starts inside it.
	From, To time.Time
	Params   IdleParams
	Holdings []Holding
	// Pricing prices each tenant's idle GPU-hours; a tenant missing here
	// gets no idle cost (IdleCost nil).
	Pricing map[string]TenantPricing
}

// Validate reports every problem of the input.
func (in EfficiencyInput) Validate() error {
	errs := []error{validatePeriod(in.From, in.To)}
	if err := in.Params.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("params: %w", err))
	}
	errs = append(errs, validateHoldings("holdings", in.Holdings), validatePricing(in.Pricing))
	errs = append(errs, intervalsInside("holdings", in.Holdings, in.From, in.To))
	return errors.Join(errs...)
}

func intervalsInside(name string, hs []Holding, from, to time.Time) error {
	if from.IsZero() || to.IsZero() {
		return nil
	}
	var errs []error
	for i, h := range hs {
		for k, iv := range h.Intervals {
			if iv.Start.Before(from) || !iv.Start.Before(to) {
				errs = append(errs, fmt.Errorf("%s[%d] (%s): intervals[%d]: starts %s, outside the period", name, i, h.key(), k, iv.Start.UTC().Format(time.RFC3339Nano)))
				break // one per holding is enough
			}
		}
	}
	return errors.Join(errs...)
}

// Totals are integer GPU-microseconds that reconcile: Held = Measured +
// Unmeasured, SMActive ≤ Measured, Idle ≤ Measured.
type Totals struct {
	HeldGPUMicros       int64 `json:"held_gpu_microseconds"`
	MeasuredGPUMicros   int64 `json:"measured_gpu_microseconds"`
	UnmeasuredGPUMicros int64 `json:"unmeasured_gpu_microseconds"`
	SMActiveMicros      int64 `json:"sm_active_microseconds"`
	IdleGPUMicros       int64 `json:"idle_gpu_microseconds"`
}

func (t *Totals) add(o Totals) {
	t.HeldGPUMicros += o.HeldGPUMicros
	t.MeasuredGPUMicros += o.MeasuredGPUMicros
	t.UnmeasuredGPUMicros += o.UnmeasuredGPUMicros
	t.SMActiveMicros += o.SMActiveMicros
	t.IdleGPUMicros += o.IdleGPUMicros
}

// Utilization is SM-active time over measured time held; ok is false when
// nothing held was measured (unmeasured time is no evidence either way).
func (t Totals) Utilization() (u float64, ok bool) {
	if t.MeasuredGPUMicros == 0 {
		return 0, false
	}
	return float64(t.SMActiveMicros) / float64(t.MeasuredGPUMicros), true
}

// IdleShare is idle time over measured time held.
func (t Totals) IdleShare() (s float64, ok bool) {
	if t.MeasuredGPUMicros == 0 {
		return 0, false
	}
	return float64(t.IdleGPUMicros) / float64(t.MeasuredGPUMicros), true
}

// IdleSpan is one held-but-idle run on one device: [From, To), the
// GPU-microseconds it held and the SM activity it showed meanwhile.
type IdleSpan struct {
	Tenant         string    `json:"tenant"`
	GPUUUID        string    `json:"gpu_uuid"`
	InstanceUUID   string    `json:"instance_uuid,omitempty"`
	SKU            string    `json:"sku"`
	From           time.Time `json:"from"`
	To             time.Time `json:"to"`
	GPUMicros      int64     `json:"gpu_microseconds"`
	SMActiveMicros int64     `json:"sm_active_microseconds"`
}

// TenantEfficiency is one tenant's row.
type TenantEfficiency struct {
	Tenant     string `json:"tenant"`
	Department string `json:"department"`
	Totals
	// IdleSpans are the runs behind IdleGPUMicros, by start.
	IdleSpans []IdleSpan `json:"idle_spans,omitempty"`
	// IdleCost is what the idle GPU-hours cost under the tenant's pricing:
	// the priced period minus the same period without them. Nil when the
	// tenant has no pricing.
	IdleCost *Money `json:"idle_cost,omitempty"`
	// Unpriced lists idle SKUs the tenant's book does not price.
	Unpriced []string `json:"unpriced,omitempty"`
}

// DepartmentEfficiency sums its tenants; costs are summed per currency.
type DepartmentEfficiency struct {
	Department string `json:"department"`
	Totals
	Tenants  []string `json:"tenants"`
	IdleCost []Money  `json:"idle_cost,omitempty"`
}

// EfficiencyReport is the efficiency of every tenant and department over
// a period.
type EfficiencyReport struct {
	From        time.Time              `json:"from"`
	To          time.Time              `json:"to"`
	Params      IdleParams             `json:"params"`
	Tenants     []TenantEfficiency     `json:"tenants"`
	Departments []DepartmentEfficiency `json:"departments"`
	Fleet       Totals                 `json:"fleet"`
}

// Efficiency reports per tenant and department the GPU time held, SM-active
// time, unmeasured time and held-but-idle time with its cost. An interval
// is idle when measured and its SM activity is under Params.SMThreshold of
// the time held; idle intervals joined by gaps of at most Params.MaxGap
// form a run, and a run lasting at least Params.Window is held-but-idle in
// full. An unmeasured interval, an active one or a longer gap ends a run;
// unmeasured time is reported apart and never counts as idle.
//
// A tenant's department is that of its first holding (by input order).
func Efficiency(in EfficiencyInput) (EfficiencyReport, error) {
	if err := in.Validate(); err != nil {
		return EfficiencyReport{}, fmt.Errorf("efficiency: %w", err)
	}
	type acc struct {
		row          TenantEfficiency
		held, idle   gpuHours
		firstHolding int
	}
	tenants := map[string]*acc{}
	for hi, h := range in.Holdings {
		a := tenants[h.Tenant]
		if a == nil {
			a = &acc{row: TenantEfficiency{Tenant: h.Tenant, Department: h.Department}, held: gpuHours{}, idle: gpuHours{}, firstHolding: hi}
			tenants[h.Tenant] = a
		}
		t, spans := idleRuns(h, in.Params, func(iv Interval) { a.idle.add(iv.Start, h.SKU, iv.GPUMicros) })
		a.row.Totals.add(t)
		a.row.IdleSpans = append(a.row.IdleSpans, spans...)
		for _, iv := range h.Intervals {
			a.held.add(iv.Start, h.SKU, iv.GPUMicros)
		}
	}
	names := slices.Sorted(maps.Keys(tenants))
	rep := EfficiencyReport{From: in.From, To: in.To, Params: in.Params}
	for _, n := range names {
		a := tenants[n]
		row := a.row
		sort.Slice(row.IdleSpans, func(i, j int) bool {
			x, y := row.IdleSpans[i], row.IdleSpans[j]
			if !x.From.Equal(y.From) {
				return x.From.Before(y.From)
			}
			if x.GPUUUID != y.GPUUUID {
				return x.GPUUUID < y.GPUUUID
			}
			return x.InstanceUUID < y.InstanceUUID
		})
		if tp, ok := in.Pricing[n]; ok {
			without := gpuHours{}
			for k, v := range a.held {
				without[k] = v - a.idle[k]
			}
			m, unpriced, err := saving(n, tp, in.From, in.To, a.held, without)
			if err != nil {
				return EfficiencyReport{}, fmt.Errorf("efficiency: idle cost: %w", err)
			}
			row.IdleCost, row.Unpriced = &m, idleUnpriced(unpriced, a.idle)
		}
		rep.Tenants = append(rep.Tenants, row)
		rep.Fleet.add(row.Totals)
	}
	rep.Departments = departmentsOf(rep.Tenants)
	return rep, nil
}

// departmentsOf sums tenants (sorted by name) into their departments, by
// department name.
func departmentsOf(tenants []TenantEfficiency) []DepartmentEfficiency {
	depts := map[string]*DepartmentEfficiency{}
	for _, row := range tenants {
		d := depts[row.Department]
		if d == nil {
			d = &DepartmentEfficiency{Department: row.Department}
			depts[row.Department] = d
		}
		d.Totals.add(row.Totals)
		d.Tenants = append(d.Tenants, row.Tenant)
		if row.IdleCost != nil {
			d.IdleCost = addMoney(d.IdleCost, *row.IdleCost)
		}
	}
	dnames := slices.Sorted(maps.Keys(depts))
	out := make([]DepartmentEfficiency, 0, len(dnames))
	for _, n := range dnames {
		out = append(out, *depts[n])
	}
	return out
}

// Regroup moves tenants to other departments (tenant → department, e.g.
// Slurm accounts under their parent accounts, as the chargeback regroups
// them) and sums the departments again; tenants not named keep theirs.
// The tenants' own figures and the fleet's do not change.
func Regroup(rep EfficiencyReport, departments map[string]string) EfficiencyReport {
	if len(departments) == 0 {
		return rep
	}
	tenants := make([]TenantEfficiency, len(rep.Tenants))
	copy(tenants, rep.Tenants)
	for i, t := range tenants {
		if d, ok := departments[t.Tenant]; ok && d != "" {
			tenants[i].Department = d
		}
	}
	rep.Tenants = tenants
	rep.Departments = departmentsOf(tenants)
	return rep
}

// idleUnpriced keeps the unpriced SKUs that held idle time.
func idleUnpriced(unpriced []string, idle gpuHours) []string {
	has := map[string]bool{}
	for k, v := range idle {
		if v > 0 {
			has[k.sku] = true
		}
	}
	var out []string
	for _, s := range unpriced {
		if has[s] {
			out = append(out, s)
		}
	}
	return out
}

// idleRuns sums one holding and finds its held-but-idle runs, calling
// onIdle (when not nil) for every interval of a run that qualifies.
func idleRuns(h Holding, p IdleParams, onIdle func(Interval)) (Totals, []IdleSpan) {
	var (
		t     Totals
		spans []IdleSpan
		run   IdleSpan
		open  bool
		first int // index of the run's first interval
		last  time.Time
	)
	closeRun := func(end int) {
		if open && run.To.Sub(run.From) >= p.Window {
			spans = append(spans, run)
			t.IdleGPUMicros += run.GPUMicros
			if onIdle != nil {
				for _, iv := range h.Intervals[first:end] {
					onIdle(iv)
				}
			}
		}
		open = false
	}
	gapMicros := p.MaxGap.Microseconds()
	for i, iv := range h.Intervals {
		t.HeldGPUMicros += iv.GPUMicros
		if iv.SMUnmeasured {
			t.UnmeasuredGPUMicros += iv.GPUMicros
			closeRun(i)
			continue
		}
		t.MeasuredGPUMicros += iv.GPUMicros
		t.SMActiveMicros += iv.SMActiveMicros
		idle := iv.GPUMicros > 0 && float64(iv.SMActiveMicros) < p.SMThreshold*float64(iv.GPUMicros)
		if !idle {
			closeRun(i)
			continue
		}
		if open && iv.Start.Sub(last).Microseconds() > gapMicros {
			closeRun(i)
		}
		if !open {
			run = IdleSpan{Tenant: h.Tenant, GPUUUID: h.GPUUUID, InstanceUUID: h.InstanceUUID, SKU: h.SKU, From: iv.Start}
			open, first = true, i
		}
		run.To = iv.End()
		run.GPUMicros += iv.GPUMicros
		run.SMActiveMicros += iv.SMActiveMicros
		last = run.To
	}
	closeRun(len(h.Intervals))
	return t, spans
}
