package chargeback

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
)

// Decimal places of the figures in a Report that are not money.
const (
	QuantityPlaces    = pricing.StoragePlaces // hours, GiB-hours, kWh, kgCO2e
	UtilizationPlaces = 4                     // a fraction: 0.8123 is 81.23 %
	SharePlaces       = 2                     // percent of the fleet cost
)

// Report is a period's chargeback. Amounts are whole minor units of
// Currency (see the package comment for how they are rounded).
type Report struct {
	Period      Period           `json:"period"`
	Currency    pricing.Currency `json:"currency"`
	Mode        IdleMode         `json:"idle_mode"`
	Meters      []pricing.Meter  `json:"meters"` // the meters priced in any row, in pricing.Meters order
	Departments []Department     `json:"departments"`
	// Idle is the idle capacity's own row, in IdleOwnRow only (and only when
	// there were idle rows).
	Idle  *Totals   `json:"idle,omitempty"`
	Fleet Totals    `json:"fleet"`
	Days  []DayCost `json:"days"`
	// Notes explain derived and missing figures: how energy was split,
	// unmeasured time, energy without a carbon intensity, shared idle cost.
	Notes []string `json:"notes,omitempty"`
	// Efficiency, when asked for, is each department followed by its
	// tenants: held-but-idle GPU time and utilization.
	Efficiency []EfficiencyRow `json:"efficiency,omitempty"`
	// UsageDays, when asked for with Efficiency, is the fleet's GPU time
	// held, SM-active and idle per day (DailyUsage): held vs used over time.
	UsageDays []DayUsage `json:"usage_days,omitempty"`
}

// Department is one department, its tenants sorted by name, and their sums.
type Department struct {
	Name    string   `json:"name"`
	Tenants []Tenant `json:"tenants"`
	Totals
}

// Tenant is one tenant (or project) of a department.
type Tenant struct {
	Name string `json:"name"`
	Totals
}

// Totals are the figures of one row of the report: a tenant, a department,
// the idle capacity or the fleet. Costs plus IdleCost add up to Cost.
//
// For the fleet, usage covers every row, idle capacity included (the fleet's
// capacity); Costs are the tenants' direct costs, IdleCost the cost of idle
// capacity however it was shared, and Cost the fleet cost.
type Totals struct {
	GPUMicroseconds uint64          `json:"gpu_microseconds"`
	GPUHours        decimal.Decimal `json:"gpu_hours"` // GPU-equivalent hours held
	SKUs            []SKUHours      `json:"skus"`
	SMActiveHours   decimal.Decimal `json:"sm_active_hours"`
	// SMUnmeasuredGPUHours is GPU time without an SM-activity measurement:
	// left out of Utilization, not counted as idle.
	SMUnmeasuredGPUHours decimal.Decimal `json:"sm_unmeasured_gpu_hours"`
	// Utilization is SM-active time over the GPU time held with SM activity
	// measured; null when none was measured.
	Utilization    decimal.NullDecimal `json:"utilization"`
	MemoryGiBHours decimal.Decimal     `json:"memory_gib_hours"`
	Energy         Energy              `json:"energy"`

	Costs    []MeterCost     `json:"costs"`     // direct cost per meter of Report.Meters
	IdleCost decimal.Decimal `json:"idle_cost"` // share of the idle cost received
	Cost     decimal.Decimal `json:"cost"`
	// SharePercent is the share of the fleet cost, in percent at
	// SharePlaces; tenants (and the idle row) add up to exactly 100 by
	// largest remainder, departments are their tenants' sums.
	SharePercent decimal.Decimal `json:"share_percent"`
}

// SKUHours are GPU-equivalent hours held on one SKU.
type SKUHours struct {
	SKU             string          `json:"sku"`
	GPUMicroseconds uint64          `json:"gpu_microseconds"`
	GPUHours        decimal.Decimal `json:"gpu_hours"`
}

// MeterCost is the cost of one meter.
type MeterCost struct {
	Meter pricing.Meter   `json:"meter"`
	Cost  decimal.Decimal `json:"cost"`
}

// Energy is the energy attributed and how it was derived.
type Energy struct {
	KWh      decimal.Decimal `json:"kwh"`
	BySource []SourceKWh     `json:"by_source"` // sources with energy, in a fixed order
	// UnmeasuredGPUHours is GPU time without an energy measurement: its
	// energy is missing from KWh, not zero.
	UnmeasuredGPUHours decimal.Decimal `json:"unmeasured_gpu_hours"`
	// KgCO2e is KWh less NoIntensityKWh times its intensities; null without
	// a carbon source. Shown at CarbonDisplayPlaces.
	KgCO2e         decimal.NullDecimal `json:"kg_co2e"`
	NoIntensityKWh decimal.Decimal     `json:"no_intensity_kwh"`
}

// SourceKWh is the energy derived one way.
type SourceKWh struct {
	Source EnergySource    `json:"source"`
	KWh    decimal.Decimal `json:"kwh"`
}

// DayCost is one department's cost on one UTC day, for a chart; the idle
// row in IdleOwnRow has an empty Department. A department's days add up to
// its Cost: its direct cost falls on the days of its rows, its share of the
// idle cost on the days the idle capacity cost something. Sorted by day,
// then department.
type DayCost struct {
	Day        time.Time       `json:"day"`
	Department string          `json:"department"`
	Cost       decimal.Decimal `json:"cost"`
}

// Allocate validates the input and computes the chargeback report.
func Allocate(in Input) (Report, error) {
	if err := in.Validate(); err != nil {
		return Report{}, err
	}
	f := aggregate(in)
	minor := in.Currency.MinorUnits

	// 1 and 2: the fleet cost, rounded once, split over (owner, meter).
	owners := f.tenants()
	if f.idle != nil {
		owners = append(owners, f.idle)
	}
	var weights []decimal.Decimal
	exact := decimal.Zero
	for _, o := range owners {
		for _, m := range f.meters {
			weights = append(weights, o.acc.cost[m])
			exact = exact.Add(o.acc.cost[m])
		}
	}
	total := in.Currency.Round(exact)
	parts, err := split(total, weights, minor)
	if err != nil {
		return Report{}, fmt.Errorf("chargeback: split the fleet cost: %w", err)
	}
	pool := decimal.New(0, -minor)
	for i, o := range owners {
		o.costs = parts[i*len(f.meters) : (i+1)*len(f.meters)]
		o.idleShare = decimal.New(0, -minor)
		if o == f.idle {
			pool = sum(o.costs)
		}
	}

	// 3: the idle cost, shared by the mode.
	if err := f.shareIdle(in, pool); err != nil {
		return Report{}, fmt.Errorf("chargeback: share the idle cost: %w", err)
	}

	rep := Report{Period: in.Period, Currency: in.Currency, Mode: in.Idle, Meters: f.meters}
	carbon := in.Carbon != nil
	shareOf := f.tenants()
	if in.Idle == IdleOwnRow && f.idle != nil {
		shareOf = append(shareOf, f.idle)
	}
	hundred, err := setShares(shareOf, total)
	if err != nil {
		return Report{}, fmt.Errorf("chargeback: shares of the fleet: %w", err)
	}

	// 4: departments are their tenants' sums.
	fleetDirect := zeros(len(f.meters), minor)
	for _, d := range f.depts {
		dacc := newAcc()
		dcosts := zeros(len(f.meters), minor)
		didle, dshare := decimal.New(0, -minor), decimal.New(0, -SharePlaces)
		dep := Department{Name: d.name}
		for _, t := range d.tenants {
			dacc.merge(t.acc)
			addTo(dcosts, t.costs)
			didle = didle.Add(t.idleShare)
			dshare = dshare.Add(t.share)
			dep.Tenants = append(dep.Tenants, Tenant{Name: t.name, Totals: t.totals(f.meters, carbon)})
		}
		addTo(fleetDirect, dcosts)
		dep.Totals = dacc.totals(carbon)
		dep.setCosts(f.meters, dcosts, didle, dshare)
		rep.Departments = append(rep.Departments, dep)
	}
	if in.Idle == IdleOwnRow && f.idle != nil {
		t := f.idle.totals(f.meters, carbon)
		rep.Idle = &t
	}
	rep.Fleet = f.all.totals(carbon)
	rep.Fleet.setCosts(f.meters, fleetDirect, pool, hundred)

	if rep.Days, err = f.days(in, minor); err != nil {
		return Report{}, fmt.Errorf("chargeback: cost per day: %w", err)
	}
	rep.Notes = notes(in, rep.Fleet, pool, carbon)
	return rep, nil
}

// fleet is the input summed per tenant, department and idle capacity.
type fleet struct {
	meters   []pricing.Meter
	depts    []*dept // by name
	idle     *owner  // nil without idle rows
	idleDays map[int64]decimal.Decimal
	all      *acc
}

type dept struct {
	name    string
	tenants []*owner                  // by name
	days    map[int64]decimal.Decimal // exact direct cost per UTC day (Unix seconds)
}

// owner is a tenant or the idle capacity, with its parts of the fleet cost.
type owner struct {
	name      string
	acc       *acc
	costs     []decimal.Decimal // per meter of fleet.meters, minor units
	idleShare decimal.Decimal
	share     decimal.Decimal
}

func (f *fleet) tenants() []*owner {
	var out []*owner
	for _, d := range f.depts {
		out = append(out, d.tenants...)
	}
	return out
}

func aggregate(in Input) *fleet {
	var intensity func(string, time.Time) (decimal.Decimal, bool)
	if in.Carbon != nil {
		intensity = in.Carbon.intensity()
	}
	f := &fleet{idleDays: map[int64]decimal.Decimal{}, all: newAcc()}
	byDept := map[string]*dept{}
	byTenant := map[[2]string]*owner{}
	used := map[pricing.Meter]bool{}
	for _, r := range in.Rows {
		day := dayOf(r.Hour)
		var o *owner
		if r.Tenant == "" {
			if f.idle == nil {
				f.idle = &owner{acc: newAcc()}
			}
			o = f.idle
			f.idleDays[day] = f.idleDays[day].Add(rowCost(r))
		} else {
			d := byDept[r.Department]
			if d == nil {
				d = &dept{name: r.Department, days: map[int64]decimal.Decimal{}}
				byDept[r.Department] = d
				f.depts = append(f.depts, d)
			}
			k := [2]string{r.Department, r.Tenant}
			if o = byTenant[k]; o == nil {
				o = &owner{name: r.Tenant, acc: newAcc()}
				byTenant[k] = o
				d.tenants = append(d.tenants, o)
			}
			d.days[day] = d.days[day].Add(rowCost(r))
		}
		o.acc.add(r, intensity)
		f.all.add(r, intensity)
		for m := range r.Cost {
			used[m] = true
		}
	}
	sort.Slice(f.depts, func(i, j int) bool { return f.depts[i].name < f.depts[j].name })
	for _, d := range f.depts {
		sort.Slice(d.tenants, func(i, j int) bool { return d.tenants[i].name < d.tenants[j].name })
	}
	for _, m := range pricing.Meters() {
		if used[m] {
			f.meters = append(f.meters, m)
		}
	}
	return f
}

// shareIdle sets each tenant's idleShare of pool by the mode.
func (f *fleet) shareIdle(in Input, pool decimal.Decimal) error {
	minor := in.Currency.MinorUnits
	switch in.Idle {
	case IdleByUse:
		return byUse(pool, f.tenants(), minor)
	case IdleByWeight, IdleEvenly:
		w := make([]decimal.Decimal, len(f.depts))
		for i, d := range f.depts {
			w[i] = decimal.NewFromInt(1)
			if in.Idle == IdleByWeight {
				w[i] = in.Weights[d.name] // absent: zero
			}
		}
		parts, err := split(pool, w, minor)
		if err != nil {
			return err
		}
		for i, d := range f.depts {
			if err := byUse(parts[i], d.tenants, minor); err != nil {
				return fmt.Errorf("department %q: %w", d.name, err)
			}
		}
	}
	return nil
}

// setShares sets the owners' percent of the fleet cost total, which their
// costs add up to, by largest remainder: exactly 100 in all, or 0 when total
// is zero. It returns that 100 (or 0).
func setShares(owners []*owner, total decimal.Decimal) (decimal.Decimal, error) {
	hundred := decimal.New(0, -SharePlaces)
	if !total.IsZero() {
		hundred = decimal.New(100_00, -SharePlaces)
	}
	w := make([]decimal.Decimal, len(owners))
	for i, o := range owners {
		w[i] = sum(o.costs).Add(o.idleShare)
	}
	shares, err := split(hundred, w, SharePlaces)
	if err != nil {
		return decimal.Decimal{}, err
	}
	for i, o := range owners {
		o.share = shares[i]
	}
	return hundred, nil
}

// byUse sets the tenants' idleShare of total in proportion to the
// GPU-microseconds they held (as GPU-seconds: a shift, exact, that keeps
// the weights within pricing.Allocate's 15 integer digits); evenly when
// none held any GPU time.
func byUse(total decimal.Decimal, ts []*owner, minor int32) error {
	w := make([]decimal.Decimal, len(ts))
	held := false
	for i, t := range ts {
		w[i] = decimal.NewFromUint64(t.acc.gpu).Shift(-6)
		held = held || t.acc.gpu > 0
	}
	if !held {
		for i := range w {
			w[i] = decimal.NewFromInt(1)
		}
	}
	parts, err := split(total, w, minor)
	if err != nil {
		return err
	}
	for i, t := range ts {
		t.idleShare = parts[i]
	}
	return nil
}

// days splits each department's direct cost over its days by its exact
// cost per day, and its idle share over the days by the fleet's exact idle
// cost per day.
func (f *fleet) days(in Input, minor int32) ([]DayCost, error) {
	type key struct {
		day  int64
		dept string
	}
	chart := map[key]decimal.Decimal{}
	spread := func(dept string, total decimal.Decimal, byDay map[int64]decimal.Decimal) error {
		days := slices.Sorted(maps.Keys(byDay))
		w := make([]decimal.Decimal, len(days))
		for i, d := range days {
			w[i] = byDay[d]
		}
		parts, err := split(total, w, minor)
		if err != nil {
			return fmt.Errorf("department %q: %w", dept, err)
		}
		for i, d := range days {
			k := key{d, dept}
			if c, ok := chart[k]; ok {
				chart[k] = c.Add(parts[i])
			} else {
				chart[k] = parts[i]
			}
		}
		return nil
	}
	for _, d := range f.depts {
		direct, idle := decimal.New(0, -minor), decimal.New(0, -minor)
		for _, t := range d.tenants {
			direct = direct.Add(sum(t.costs))
			idle = idle.Add(t.idleShare)
		}
		if err := spread(d.name, direct, d.days); err != nil {
			return nil, err
		}
		if !idle.IsZero() {
			if err := spread(d.name, idle, f.idleDays); err != nil {
				return nil, err
			}
		}
	}
	if in.Idle == IdleOwnRow && f.idle != nil {
		if err := spread("", sum(f.idle.costs), f.idleDays); err != nil {
			return nil, err
		}
	}
	out := make([]DayCost, 0, len(chart))
	for k, c := range chart {
		out = append(out, DayCost{Day: time.Unix(k.day, 0).UTC(), Department: k.dept, Cost: c})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Day.Equal(out[j].Day) {
			return out[i].Day.Before(out[j].Day)
		}
		return out[i].Department < out[j].Department
	})
	return out, nil
}

// acc sums rows as integers; quantities convert to decimals once, in totals.
type acc struct {
	gpu, sm, smUnmeasured, mem uint64
	energy, energyUnmeasured   uint64
	noIntensity                uint64          // mJ without a carbon intensity
	gramMillijoules            decimal.Decimal // Σ mJ × gCO2e/kWh where known
	skus                       map[string]uint64
	bySource                   map[EnergySource]uint64
	cost                       map[pricing.Meter]decimal.Decimal // exact
}

func newAcc() *acc {
	return &acc{skus: map[string]uint64{}, bySource: map[EnergySource]uint64{}, cost: map[pricing.Meter]decimal.Decimal{}}
}

// add sums a validated row. Sums cannot overflow: Validate checked that the
// fleet's do not.
func (a *acc) add(r Row, intensity func(string, time.Time) (decimal.Decimal, bool)) {
	a.gpu += r.GPUMicroseconds
	a.sm += r.SMActiveMicroseconds
	a.smUnmeasured += r.Unmeasured[meter.GroupSMActive]
	a.mem += r.MemMiBSeconds
	a.energy += r.EnergyMillijoules
	a.energyUnmeasured += r.Unmeasured[meter.GroupEnergy]
	a.skus[r.SKU] += r.GPUMicroseconds
	if r.EnergyMillijoules > 0 {
		a.bySource[r.EnergySource] += r.EnergyMillijoules
	}
	if intensity != nil && r.EnergyMillijoules > 0 {
		if g, ok := intensity(r.Site, r.Hour); ok {
			a.gramMillijoules = a.gramMillijoules.Add(decimal.NewFromUint64(r.EnergyMillijoules).Mul(g))
		} else {
			a.noIntensity += r.EnergyMillijoules
		}
	}
	for m, c := range r.Cost {
		a.cost[m] = a.cost[m].Add(c)
	}
}

func (a *acc) merge(b *acc) {
	a.gpu += b.gpu
	a.sm += b.sm
	a.smUnmeasured += b.smUnmeasured
	a.mem += b.mem
	a.energy += b.energy
	a.energyUnmeasured += b.energyUnmeasured
	a.noIntensity += b.noIntensity
	a.gramMillijoules = a.gramMillijoules.Add(b.gramMillijoules)
	for k, v := range b.skus {
		a.skus[k] += v
	}
	for k, v := range b.bySource {
		a.bySource[k] += v
	}
	for k, v := range b.cost {
		a.cost[k] = a.cost[k].Add(v)
	}
}

// Units of the stored integers.
var (
	microsecondsPerHour  = decimal.NewFromInt(3_600_000_000)
	mibSecondsPerGiBHour = decimal.NewFromInt(1024 * 3600)
	millijoulesPerKWh    = decimal.NewFromInt(3_600_000_000)
)

func ratio(n uint64, d decimal.Decimal) decimal.Decimal {
	return decimal.NewFromUint64(n).DivRound(d, QuantityPlaces)
}

// totals converts the sums; costs are set by the caller.
func (a *acc) totals(carbon bool) Totals {
	t := Totals{
		GPUMicroseconds:      a.gpu,
		GPUHours:             ratio(a.gpu, microsecondsPerHour),
		SMActiveHours:        ratio(a.sm, microsecondsPerHour),
		SMUnmeasuredGPUHours: ratio(a.smUnmeasured, microsecondsPerHour),
		MemoryGiBHours:       ratio(a.mem, mibSecondsPerGiBHour),
		Energy: Energy{
			KWh:                ratio(a.energy, millijoulesPerKWh),
			UnmeasuredGPUHours: ratio(a.energyUnmeasured, microsecondsPerHour),
			NoIntensityKWh:     ratio(a.noIntensity, millijoulesPerKWh),
		},
	}
	if measured := a.gpu - a.smUnmeasured; measured > 0 {
		t.Utilization = decimal.NullDecimal{
			Decimal: decimal.NewFromUint64(a.sm).DivRound(decimal.NewFromUint64(measured), UtilizationPlaces),
			Valid:   true,
		}
	}
	if carbon {
		t.Energy.KgCO2e = decimal.NullDecimal{Decimal: kgCO2e(a.gramMillijoules), Valid: true}
	}
	skus := slices.Sorted(maps.Keys(a.skus))
	for _, s := range skus {
		t.SKUs = append(t.SKUs, SKUHours{SKU: s, GPUMicroseconds: a.skus[s], GPUHours: ratio(a.skus[s], microsecondsPerHour)})
	}
	for _, src := range energySources {
		if mj := a.bySource[src]; mj > 0 {
			t.Energy.BySource = append(t.Energy.BySource, SourceKWh{Source: src, KWh: ratio(mj, millijoulesPerKWh)})
		}
	}
	return t
}

// totals of an owner, with its costs.
func (o *owner) totals(meters []pricing.Meter, carbon bool) Totals {
	t := o.acc.totals(carbon)
	t.setCosts(meters, o.costs, o.idleShare, o.share)
	return t
}

func (t *Totals) setCosts(meters []pricing.Meter, costs []decimal.Decimal, idle, share decimal.Decimal) {
	t.Costs = make([]MeterCost, len(meters))
	for i, m := range meters {
		t.Costs[i] = MeterCost{Meter: m, Cost: costs[i]}
	}
	t.IdleCost = idle
	t.Cost = sum(costs).Add(idle)
	t.SharePercent = share
}

// notes explains the fleet's derived and missing figures, in a fixed order.
func notes(in Input, fleet Totals, pool decimal.Decimal, carbon bool) []string {
	var out []string
	for _, s := range fleet.Energy.BySource {
		switch s.Source {
		case EnergySplitBySlices:
			out = append(out, fmt.Sprintf("%s kWh of energy was split across MIG instances by compute-slice share: NVML reports energy per GPU only", s.KWh.StringFixed(kWhPlaces)))
		case EnergySplitByGPM:
			out = append(out, fmt.Sprintf("%s kWh of energy was split across MIG instances by their GPM SM activity", s.KWh.StringFixed(kWhPlaces)))
		}
	}
	if !fleet.Energy.UnmeasuredGPUHours.IsZero() {
		out = append(out, fmt.Sprintf("%s GPU-hours had no energy measurement: their energy is missing from the kWh figures, not counted as zero", fleet.Energy.UnmeasuredGPUHours.StringFixed(gpuHourPlaces)))
	}
	if !fleet.SMUnmeasuredGPUHours.IsZero() {
		out = append(out, fmt.Sprintf("%s GPU-hours had no SM-activity measurement and are left out of utilization", fleet.SMUnmeasuredGPUHours.StringFixed(gpuHourPlaces)))
	}
	if carbon && !fleet.Energy.NoIntensityKWh.IsZero() {
		out = append(out, fmt.Sprintf("%s kWh had no carbon intensity for its site or hour and is left out of kgCO2e", fleet.Energy.NoIntensityKWh.StringFixed(kWhPlaces)))
	}
	if in.Idle != IdleOwnRow && !pool.IsZero() {
		how := map[IdleMode]string{
			IdleByUse:    "to tenants by GPU time held",
			IdleByWeight: "to departments by weight, then to tenants by GPU time held",
			IdleEvenly:   "evenly to departments, then to tenants by GPU time held",
		}[in.Idle]
		out = append(out, fmt.Sprintf("idle capacity cost %s %s, shared %s", pool.StringFixed(in.Currency.MinorUnits), in.Currency.Code, how))
	}
	return out
}

// split is pricing.Allocate, which also takes a zero total: every part is
// zero, whatever the weights.
func split(total decimal.Decimal, weights []decimal.Decimal, places int32) ([]decimal.Decimal, error) {
	if total.IsZero() {
		return zeros(len(weights), places), nil
	}
	return pricing.Allocate(total, weights, places)
}

func zeros(n int, places int32) []decimal.Decimal {
	out := make([]decimal.Decimal, n)
	for i := range out {
		out[i] = decimal.New(0, -places)
	}
	return out
}

func sum(ds []decimal.Decimal) decimal.Decimal {
	s := decimal.Zero
	for _, d := range ds {
		s = s.Add(d)
	}
	return s
}

func addTo(dst, src []decimal.Decimal) {
	for i := range dst {
		dst[i] = dst[i].Add(src[i])
	}
}

func rowCost(r Row) decimal.Decimal {
	c := decimal.Zero
	for _, v := range r.Cost {
		c = c.Add(v)
	}
	return c
}

// dayOf is the UTC day of t, as Unix seconds of its midnight.
func dayOf(t time.Time) int64 {
	u := t.UTC()
	return time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC).Unix()
}

// Notes print quantities to the places the meter table gives their units
// everywhere else (docs/meters.md).
var (
	kWhPlaces     = placesOf("energy_kwh")
	gpuHourPlaces = placesOf("gpu_hours")
)

func placesOf(name string) int32 {
	p, _ := meter.LookupPriced(name)
	return p.Places
}
