// Package chargeback splits a fleet's priced usage over one period into an
// organisation → department → tenant report: GPU-hours by SKU, utilization,
// memory, energy and carbon per tenant, cost per meter in whole minor units,
// and the fleet's idle capacity either as its own row or shared to tenants.
//
// It is pure: Allocate takes the usage rows with their exact costs (priced
// by the caller with the pricing package) and returns a Report. No clock, no
// store, no files; ParseCarbonCSV reads only the io.Reader it is handed.
//
// Rounding. Every amount in a Report is a whole number of the currency's
// minor units, and every level adds up exactly to the one above it:
//
//  1. The fleet cost is the sum over all rows and meters of the exact
//     costs, rounded once to the minor unit with the currency's rounding
//     mode.
//  2. That fleet cost is split by largest remainder (pricing.Allocate) into
//     one part per (tenant, meter) and (idle, meter), weighted by their exact
//     costs. A tenant's direct cost is the sum of its meter parts; the idle
//     cost is the sum of the idle meter parts.
//  3. The idle cost is then shared by the idle mode, again by largest
//     remainder: by GPU-microseconds held (IdleByUse), to departments by
//     weight or evenly and within each department by GPU-microseconds held
//     (IdleByWeight, IdleEvenly), or not at all (IdleOwnRow).
//  4. A department's total is the sum of its tenants'. Its per-day chart
//     splits its direct cost over days by its exact cost per day, and its
//     idle share over days by the fleet's exact idle cost per day, both by
//     largest remainder.
//
// So in every mode the tenant rows (and the idle row in IdleOwnRow) add up to
// the fleet cost, each tenant's meter costs plus idle share add up to its
// total, and each department's days add up to its total. Every part is less
// than one minor unit from its exact proportional share.
//
// Quantities (hours, GiB-hours, kWh, kgCO2e) are summed as integers and
// converted once, rounded to QuantityPlaces; they are for reading, and only
// money is guaranteed to add up.
package chargeback

import (
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
)

// Period is the chargeback period [Start, End), named by Label ("2026-11").
// It has billing.Period's fields, so one converts to the other.
type Period struct {
	Label string    `json:"label"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// IdleMode says what happens to the cost of idle capacity (rows with an
// empty tenant): as OpenCost's shareIdle, but exact for MIG, time-sliced and
// MPS shares, since usage arrives as GPU-equivalent microseconds.
type IdleMode string

const (
	// IdleOwnRow reports idle capacity as its own row, shared to nobody.
	IdleOwnRow IdleMode = "own_row"
	// IdleByUse shares the idle cost to tenants in proportion to the
	// GPU-microseconds they held.
	IdleByUse IdleMode = "by_use"
	// IdleByWeight shares the idle cost to departments by Input.Weights,
	// then within a department by GPU-microseconds held.
	IdleByWeight IdleMode = "by_weight"
	// IdleEvenly shares the idle cost evenly across departments, then within
	// a department by GPU-microseconds held.
	IdleEvenly IdleMode = "evenly"
)

// EnergySource says how the collector derived a row's energy. It is taken
// as given and reported per tenant.
type EnergySource string

const (
	// EnergyMeasured: the GPU's energy counter, for a consumer holding the
	// whole GPU (or the split of time-sliced and MPS holders).
	EnergyMeasured EnergySource = "measured"
	// EnergySplitBySlices: a MIG instance's share of its GPU's energy by
	// compute slices; NVML reports energy per GPU only.
	EnergySplitBySlices EnergySource = "split_by_slices"
	// EnergySplitByGPM: a MIG instance's share by its GPM SM activity.
	EnergySplitByGPM EnergySource = "split_by_gpm"
)

// energySources lists the sources in the order reports print them.
var energySources = []EnergySource{EnergyMeasured, EnergySplitBySlices, EnergySplitByGPM}

// Row is the usage of one tenant (or of idle capacity) on one SKU in one
// hour, with its priced cost.
//
// Hour is the start of the UTC hour the row covers, inside the period; the
// chart's day is Hour's UTC day. Rows may be coarser than an hour (a day
// starting at Hour) unless Input.Carbon has hourly intensities, which are
// looked up by Hour.
type Row struct {
	Department string    `json:"department"` // required for a tenant row; empty for idle capacity
	Tenant     string    `json:"tenant"`     // empty: idle capacity (what no tenant held)
	SKU        string    `json:"sku"`        // GPU model, or model/profile for MIG
	Site       string    `json:"site"`       // where the GPU is, for per-site carbon intensity; may be empty
	Hour       time.Time `json:"hour"`

	// GPUMicroseconds are GPU-equivalent microseconds held: a 3g.40gb MIG
	// instance for an hour is 3/7 of 3.6e9, a time-sliced share its share.
	GPUMicroseconds      uint64 `json:"gpu_microseconds"`
	SMActiveMicroseconds uint64 `json:"sm_active_microseconds"`
	MemMiBSeconds        uint64 `json:"mem_mib_seconds"`
	EnergyMillijoules    uint64 `json:"energy_millijoules"`
	// Unmeasured is, per meter group, the GPU-microseconds of the row
	// whose samples had no measurement of it: the meter's figure covers
	// the rest only. Unmeasured time is neither zero nor idle; it is
	// reported as unmeasured.
	Unmeasured meter.UnmeasuredTime `json:"unmeasured"`
	// EnergySource is required when EnergyMillijoules is not zero.
	EnergySource EnergySource `json:"energy_source"`

	// Cost is the row's exact cost per meter, priced by the caller. For an
	// idle row it is what the idle capacity would have cost. At most 18
	// decimal places, non-negative.
	Cost map[pricing.Meter]decimal.Decimal `json:"cost"`
}

// Input is everything Allocate reads.
type Input struct {
	Period   Period
	Currency pricing.Currency
	Rows     []Row
	Idle     IdleMode
	// Weights are the departments' shares of the idle cost in IdleByWeight
	// (other modes ignore them): non-negative, naming departments that have
	// tenant rows, not all zero. A department left out gets no idle cost.
	Weights map[string]decimal.Decimal
	// Carbon, when set, gives the intensities for kgCO2e; nil reports no
	// carbon figures.
	Carbon *CarbonSource
}

// Limits of what Allocate takes: pricing.Allocate's bounds (amounts below
// 10^15 with at most 18 decimal places).
const (
	maxIntDigits = 15
	maxPlaces    = 18
	maxProblems  = 50
)

// Validate reports every problem with the input as a *pricing.ValidationError
// whose problems name the field, e.g. `rows[3].department: required for a
// tenant row`. Allocate returns the same error; input that passes is always
// allocated.
func (in Input) Validate() error {
	var ps problems
	in.validatePeriod(&ps)
	validateCurrency(&ps, in.Currency)
	switch in.Idle {
	case IdleOwnRow, IdleByUse, IdleByWeight, IdleEvenly:
	default:
		ps.add("idle", "unknown idle mode %q (want %s, %s, %s or %s)", in.Idle, IdleOwnRow, IdleByUse, IdleByWeight, IdleEvenly)
	}

	departments := map[string]bool{}
	var gpu, mem, energy uint64
	var overflow [3]bool
	fleetCost := decimal.Zero
	costOK, tenants, idleCost := true, 0, false
	for i, r := range in.Rows {
		at := "rows[" + strconv.Itoa(i) + "]"
		if ok := in.validateRow(&ps, at, r); !ok {
			costOK = false
		}
		if r.Tenant != "" {
			tenants++
			if r.Department != "" {
				departments[r.Department] = true
			}
		}
		var c uint64
		gpu, c = bits.Add64(gpu, r.GPUMicroseconds, 0)
		overflow[0] = overflow[0] || c != 0
		mem, c = bits.Add64(mem, r.MemMiBSeconds, 0)
		overflow[1] = overflow[1] || c != 0
		energy, c = bits.Add64(energy, r.EnergyMillijoules, 0)
		overflow[2] = overflow[2] || c != 0
		if costOK {
			for _, v := range r.Cost {
				fleetCost = fleetCost.Add(v)
				if r.Tenant == "" && v.Sign() > 0 {
					idleCost = true
				}
			}
		}
	}
	for k, name := range []string{"gpu_microseconds", "mem_mib_seconds", "energy_millijoules"} {
		if overflow[k] {
			ps.add("rows", "the fleet's %s add up past 2^64-1", name)
		}
	}
	if costOK && checkDecimal(in.Currency.Round(fleetCost)) != "" {
		ps.add("rows", "the fleet's cost adds up to 10^%d or more", maxIntDigits)
	}
	if in.Idle != IdleOwnRow && tenants == 0 && idleCost {
		ps.add("idle", "mode %s shares the idle cost to tenants, but no row has a tenant (use %s)", in.Idle, IdleOwnRow)
	}
	if in.Idle == IdleByWeight {
		validateWeights(&ps, in.Weights, departments)
	}
	if in.Carbon != nil {
		in.Carbon.validate(&ps, "carbon")
	}
	return ps.err("chargeback input")
}

func (in Input) validatePeriod(ps *problems) {
	p := in.Period
	if p.Label == "" {
		ps.add("period.label", "required (e.g. 2026-11)")
	}
	switch {
	case p.Start.IsZero() || p.End.IsZero():
		ps.add("period", "start and end are both required")
	case !p.End.After(p.Start):
		ps.add("period.end", "%s is not after start %s", p.End.UTC().Format(time.RFC3339), p.Start.UTC().Format(time.RFC3339))
	}
}

func validateCurrency(ps *problems, c pricing.Currency) {
	if !pricing.IsCurrencyCode(c.Code) {
		ps.add("currency.code", "want an ISO 4217 code such as USD, got %q", c.Code)
	}
	if c.MinorUnits < 0 || c.MinorUnits > pricing.StoragePlaces {
		ps.add("currency.minor_units", "must be between 0 and %d, got %d", pricing.StoragePlaces, c.MinorUnits)
	}
	switch c.Rounding {
	case pricing.HalfAwayFromZero, pricing.HalfEven:
	default:
		ps.add("currency.rounding", "unknown rounding mode %q (want %s or %s)", c.Rounding, pricing.HalfAwayFromZero, pricing.HalfEven)
	}
}

// validateRow adds the row's problems; false when its costs cannot be summed.
func (in Input) validateRow(ps *problems, at string, r Row) bool {
	if r.Tenant != "" && r.Department == "" {
		ps.add(at+".department", "required for a tenant row")
	}
	if r.Tenant == "" && r.Department != "" {
		ps.add(at+".department", "must be empty on an idle row (tenant empty): idle capacity belongs to the fleet, got %q", r.Department)
	}
	if r.SKU == "" {
		ps.add(at+".sku", "required")
	}
	p := in.Period
	switch h := r.Hour; {
	case h.IsZero():
		ps.add(at+".hour", "required (the start of the UTC hour the row covers)")
	case !h.Equal(h.Truncate(time.Hour)):
		ps.add(at+".hour", "%s is not the start of an hour", h.UTC().Format(time.RFC3339Nano))
	case !p.Start.IsZero() && !p.End.IsZero() && (h.Before(p.Start) || !h.Before(p.End)):
		ps.add(at+".hour", "%s is outside the period [%s, %s)", h.UTC().Format(time.RFC3339),
			p.Start.UTC().Format(time.RFC3339), p.End.UTC().Format(time.RFC3339))
	}
	if r.Unmeasured[meter.GroupSMActive] > r.GPUMicroseconds {
		ps.add(at+".unmeasured.sm_active", "%d exceeds the row's gpu_microseconds %d", r.Unmeasured[meter.GroupSMActive], r.GPUMicroseconds)
	} else if r.SMActiveMicroseconds > r.GPUMicroseconds-r.Unmeasured[meter.GroupSMActive] {
		ps.add(at+".sm_active_microseconds", "%d exceeds the measured GPU time %d (gpu_microseconds less unmeasured.sm_active)",
			r.SMActiveMicroseconds, r.GPUMicroseconds-r.Unmeasured[meter.GroupSMActive])
	}
	if r.Unmeasured[meter.GroupEnergy] > r.GPUMicroseconds {
		ps.add(at+".unmeasured.energy", "%d exceeds the row's gpu_microseconds %d", r.Unmeasured[meter.GroupEnergy], r.GPUMicroseconds)
	}
	switch r.EnergySource {
	case EnergyMeasured, EnergySplitBySlices, EnergySplitByGPM:
	case "":
		if r.EnergyMillijoules != 0 {
			ps.add(at+".energy_source", "required when energy_millijoules is not zero (want %s, %s or %s)",
				EnergyMeasured, EnergySplitBySlices, EnergySplitByGPM)
		}
	default:
		ps.add(at+".energy_source", "unknown %q (want %s, %s or %s)", r.EnergySource, EnergyMeasured, EnergySplitBySlices, EnergySplitByGPM)
	}
	ok := true
	for _, m := range slices.Sorted(maps.Keys(r.Cost)) {
		if _, err := pricing.ParseMeter(string(m)); err != nil {
			ps.add(at+".cost["+strconv.Quote(string(m))+"]", "%v", err)
			ok = false
			continue
		}
		if msg := checkDecimal(r.Cost[m]); msg != "" {
			ps.add(at+".cost."+string(m), "%s", msg)
			ok = false
		}
	}
	return ok
}

func validateWeights(ps *problems, weights map[string]decimal.Decimal, departments map[string]bool) {
	if len(weights) == 0 {
		ps.add("weights", "required for idle mode %s: a weight per department", IdleByWeight)
		return
	}
	names := slices.Sorted(maps.Keys(weights))
	positive := false
	for _, name := range names {
		at := "weights[" + strconv.Quote(name) + "]"
		w := weights[name]
		if !departments[name] {
			ps.add(at, "no tenant row has department %q", name)
		}
		if msg := checkDecimal(w); msg != "" {
			ps.add(at, "%s", msg)
		} else if w.Sign() > 0 {
			positive = true
		}
	}
	if !positive {
		ps.add("weights", "all zero: at least one department needs a positive weight")
	}
}

// checkDecimal says what is wrong with d as a cost, weight or intensity, or
// "" when it is non-negative, below 10^15 and has at most 18 decimal places.
// It checks the exponent before any arithmetic, so 1e-2000000000 is refused
// without computing 10^2000000000, and prints d only once it is small.
func checkDecimal(d decimal.Decimal) string {
	if d.IsZero() {
		return ""
	}
	exp, digits := int64(d.Exponent()), int64(d.NumDigits())
	if exp+digits > maxIntDigits {
		return fmt.Sprintf("must be below 10^%d", maxIntDigits)
	}
	// Stripping trailing zeros can shorten the places by at most digits-1.
	if -exp-maxPlaces >= digits || !d.Truncate(maxPlaces).Equal(d) {
		return fmt.Sprintf("more than %d decimal places", maxPlaces)
	}
	if d.Sign() < 0 {
		return "must not be negative, got " + d.String()
	}
	return ""
}

// problems collects validation problems, the first maxProblems of them.
type problems struct {
	list    []pricing.Problem
	dropped int
}

func (ps *problems) add(path, format string, args ...any) { ps.addLine(0, path, format, args...) }

func (ps *problems) addLine(line int, path, format string, args ...any) {
	if len(ps.list) >= maxProblems {
		ps.dropped++
		return
	}
	ps.list = append(ps.list, pricing.Problem{Path: path, Line: line, Message: fmt.Sprintf(format, args...)})
}

func (ps *problems) err(what string) error {
	if len(ps.list) == 0 {
		return nil
	}
	return pricing.NewValidationError(what, ps.list, ps.dropped)
}
