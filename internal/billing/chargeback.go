package billing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/chargeback"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/pricing"
)

// ChargebackConfig is the chargeback section of the config: the internal
// rate card every department is charged by, the month's time zone, and
// what happens to idle capacity.
type ChargebackConfig struct {
	Book     string `yaml:"book"`      // price book (the internal rate card)
	TimeZone string `yaml:"time_zone"` // the organisation's months; UTC when empty
	// Idle is own_row, by_use, by_weight or evenly (chargeback.IdleMode).
	Idle    string                     `yaml:"idle"`
	Weights map[string]decimal.Decimal `yaml:"weights"` // department → share, for by_weight
	Carbon  CarbonConfig               `yaml:"carbon"`
}

// CarbonConfig gives the grid's carbon intensity: a fixed figure, or a CSV
// of hourly figures (hour,g_co2e_per_kwh); energy in an hour the CSV lacks
// is reported as having no intensity, never as zero carbon.
type CarbonConfig struct {
	GramsPerKWh *decimal.Decimal `yaml:"g_co2e_per_kwh"`
	HourlyCSV   string           `yaml:"hourly_csv"`
}

// DefaultChargebackConfig shows idle capacity as its own row.
func DefaultChargebackConfig() ChargebackConfig {
	return ChargebackConfig{Idle: string(chargeback.IdleOwnRow)}
}

// Validate names the field of every problem; an empty book means the
// section is unused.
func (c ChargebackConfig) Validate() error {
	var errs []error
	switch chargeback.IdleMode(c.Idle) {
	case chargeback.IdleOwnRow, chargeback.IdleByUse, chargeback.IdleByWeight, chargeback.IdleEvenly:
	default:
		errs = append(errs, fmt.Errorf("chargeback.idle %q: want own_row, by_use, by_weight or evenly", c.Idle))
	}
	if c.TimeZone != "" {
		loc, err := time.LoadLocation(c.TimeZone)
		if err != nil {
			errs = append(errs, fmt.Errorf("chargeback.time_zone %q: not an IANA time zone", c.TimeZone))
		} else if err := checkMonthBoundaries(loc); err != nil {
			errs = append(errs, fmt.Errorf("chargeback.time_zone: %w", err))
		}
	}
	for d, w := range c.Weights {
		if w.IsNegative() {
			errs = append(errs, fmt.Errorf("chargeback.weights.%s %s: must not be negative", d, w))
		}
	}
	if c.Carbon.GramsPerKWh != nil && c.Carbon.HourlyCSV != "" {
		errs = append(errs, errors.New("chargeback.carbon: give g_co2e_per_kwh or hourly_csv, not both"))
	}
	if g := c.Carbon.GramsPerKWh; g != nil && g.IsNegative() {
		errs = append(errs, fmt.Errorf("chargeback.carbon.g_co2e_per_kwh %s: must not be negative", g))
	}
	return errors.Join(errs...)
}

// RelativeTo resolves the book and carbon CSV against the config's dir.
func (c ChargebackConfig) RelativeTo(dir string) ChargebackConfig {
	for _, p := range []*string{&c.Book, &c.Carbon.HourlyCSV} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	return c
}

// UsageRow is one hour of one tenant's (or idle capacity's) use of one
// SKU: the chargeback row's integer meters, and the same usage in
// price-book units for pricing.
type UsageRow struct {
	Row   chargeback.Row
	Usage []pricing.Usage
}

// ChargebackStore is what a chargeback report reads.
type ChargebackStore interface {
	// ChargebackHours reads the hourly rollups of [from, to) per hour,
	// tenant, department and SKU, idle capacity included, with the
	// unmeasured GPU time.
	ChargebackHours(ctx context.Context, from, to time.Time) ([]HourlyMeters, error)
	LoadRollupState(ctx context.Context, job string) (rollup.State, bool, error)
}

// ChargebackRequest is one report.
type ChargebackRequest struct {
	Period string // YYYY-MM in the config's time zone
	Idle   string // overrides the config's mode when set
	// Departments regroups tenants: tenant → the department to charge,
	// over the one their samples carry (e.g. Slurm accounts under their
	// parent accounts, sacct.Accounts.Departments). Tenants not named
	// keep theirs; idle capacity has no tenant and is never regrouped.
	Departments map[string]string
	// DailyUsage adds the fleet's held, SM-active and idle GPU time per
	// day to the report (Report.UsageDays), for the held-vs-used chart.
	DailyUsage bool
}

// Chargeback prices the period's hourly usage with the rate card, per
// tenant (idle capacity as a tenant of its own, at the same prices), puts
// each priced line's exact amount on the rows it came from in proportion
// to their quantities, and allocates the result (chargeback.Allocate).
func Chargeback(ctx context.Context, st ChargebackStore, cfg ChargebackConfig, req ChargebackRequest) (chargeback.Report, error) {
	if req.Idle != "" {
		cfg.Idle = req.Idle
	}
	if err := cfg.Validate(); err != nil {
		return chargeback.Report{}, err
	}
	if cfg.Book == "" {
		return chargeback.Report{}, errors.New("chargeback.book: required (the rate card departments are charged by)")
	}
	loc := time.UTC
	if cfg.TimeZone != "" {
		loc, _ = time.LoadLocation(cfg.TimeZone)
	}
	p, err := MonthlyPeriod(req.Period, loc)
	if err != nil {
		return chargeback.Report{}, err
	}
	files := &runFiles{readFile: os.ReadFile, books: map[string]loadedBook{}, contracts: map[string]loadedContract{}}
	book, err := files.book(cfg.Book)
	if err != nil {
		return chargeback.Report{}, err
	}
	in := chargeback.Input{Period: chargeback.Period{Label: p.Label, Start: p.Start, End: p.End},
		Currency: book.book.Currency(), Idle: chargeback.IdleMode(cfg.Idle), Weights: cfg.Weights}
	if in.Carbon, err = carbonSource(cfg.Carbon); err != nil {
		return chargeback.Report{}, err
	}
	hours, err := st.ChargebackHours(ctx, p.Start, p.End)
	if err != nil {
		return chargeback.Report{}, err
	}
	rows := chargebackRows(hours)
	if err := priceRows(rows, p, loc, book.book); err != nil {
		return chargeback.Report{}, err
	}
	for _, r := range rows {
		if d, ok := req.Departments[r.Row.Tenant]; ok && r.Row.Tenant != "" && d != "" {
			r.Row.Department = d
		}
		if r.Row.EnergyMillijoules > 0 {
			r.Row.EnergySource = EnergySource(r.Row.SKU)
		}
		in.Rows = append(in.Rows, r.Row)
	}
	rep, err := chargeback.Allocate(in)
	if err != nil {
		return chargeback.Report{}, err
	}
	if req.DailyUsage {
		rep.UsageDays = chargeback.DailyUsage(in.Rows)
	}
	state, _, err := st.LoadRollupState(ctx, rollup.StateKey)
	if err != nil {
		return chargeback.Report{}, err
	}
	if !p.Closable(state.ClosedThrough) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("Preliminary: hourly rollups are closed through %s, before the period ends (%s).",
			state.ClosedThrough.Format(time.RFC3339), p.End.UTC().Format(time.RFC3339)))
	}
	return rep, nil
}

// EnergySource says how the collector derived a SKU's energy. NVML reads
// energy per GPU; the collector splits a GPU's energy over the rows that
// held it by GPU time plus SM-active time. A MIG instance's SM activity
// comes from GPM on Hopper GPUs (H100, H200), so its share follows its
// measured activity; on earlier GPUs a MIG instance has no activity of its
// own and its share is that of its compute slices. A whole GPU's energy
// is its measured counter (split only between time-sliced holders).
func EnergySource(sku string) chargeback.EnergySource {
	model, _ := gpucatalog.ParseSKU(sku)
	switch {
	case gpucatalog.SKUKind(sku) == gpucatalog.KindGPU:
		return chargeback.EnergyMeasured
	case gpucatalog.MIGActivityMeasured(model):
		return chargeback.EnergySplitByGPM
	default:
		return chargeback.EnergySplitBySlices
	}
}

// priceRows sets each row's Cost: every tenant's period priced at once
// (tiers count the tenant's whole month), each line's exact amount spread
// over the tenant's rows of its SKU by their share of the line's meter.
// A line without a SKU (a commitment true-up) is spread by GPU time.
func priceRows(rows []UsageRow, p Period, loc *time.Location, book *pricing.Book) error {
	byTenant := map[string][]int{}
	var order []string
	for i, r := range rows {
		t := r.Row.Tenant
		if _, ok := byTenant[t]; !ok {
			order = append(order, t)
		}
		byTenant[t] = append(byTenant[t], i)
	}
	for _, tenant := range order {
		idx := byTenant[tenant]
		var usage []pricing.Usage
		for _, i := range idx {
			usage = append(usage, rows[i].Usage...)
		}
		res, err := pricing.Price(pricing.Input{Tenant: tenant, Start: p.Start.In(loc), End: p.End.In(loc), Usage: usage, Book: book})
		if err != nil {
			name := tenant
			if name == "" {
				name = "idle capacity"
			}
			return fmt.Errorf("price %s for chargeback: %w", name, err)
		}
		for _, l := range res.Lines {
			if l.Amount.IsZero() {
				continue
			}
			weight := func(r UsageRow) decimal.Decimal {
				if l.SKU == "" {
					return decimal.NewFromUint64(r.Row.GPUMicroseconds)
				}
				if r.Row.SKU != l.SKU {
					return decimal.Zero
				}
				q := decimal.Zero
				for _, u := range r.Usage {
					if u.Meter == l.Meter && !u.Hour.Before(l.From) && u.Hour.Before(l.To) {
						q = q.Add(u.Quantity)
					}
				}
				return q
			}
			total := decimal.Zero
			for _, i := range idx {
				total = total.Add(weight(rows[i]))
			}
			if total.IsZero() {
				continue
			}
			meter := l.Meter
			if meter == "" {
				meter = pricing.GPUHours
			}
			for _, i := range idx {
				w := weight(rows[i])
				if w.IsZero() {
					continue
				}
				if rows[i].Row.Cost == nil {
					rows[i].Row.Cost = map[pricing.Meter]decimal.Decimal{}
				}
				share := l.Amount.Mul(w).DivRound(total, 18)
				rows[i].Row.Cost[meter] = rows[i].Row.Cost[meter].Add(share)
			}
		}
	}
	return nil
}

func carbonSource(c CarbonConfig) (*chargeback.CarbonSource, error) {
	if c.GramsPerKWh == nil && c.HourlyCSV == "" {
		return nil, nil
	}
	src := &chargeback.CarbonSource{Default: c.GramsPerKWh}
	if c.HourlyCSV != "" {
		f, err := os.Open(c.HourlyCSV)
		if err != nil {
			return nil, fmt.Errorf("chargeback.carbon.hourly_csv: %w", err)
		}
		defer f.Close()
		hours, err := chargeback.ParseCarbonCSV(io.Reader(f))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.HourlyCSV, err)
		}
		src.Hours = hours
	}
	return src, nil
}

// ScopedChargebackRequest is a month's chargeback report as an API key
// asks for it (/v1/chargeback).
type ScopedChargebackRequest struct {
	Scope auth.Scope
	Month string // YYYY-MM in the config's time zone
	Idle  string // overrides the config's mode when set
}

// Validate reports every problem.
func (r ScopedChargebackRequest) Validate() error {
	var errs []error
	if _, err := MonthlyPeriod(r.Month, time.UTC); err != nil {
		errs = append(errs, fmt.Errorf("month: %w", err))
	}
	switch chargeback.IdleMode(r.Idle) {
	case "", chargeback.IdleOwnRow, chargeback.IdleByUse, chargeback.IdleByWeight, chargeback.IdleEvenly:
	default:
		errs = append(errs, fmt.Errorf("idle %q: want own_row, by_use, by_weight or evenly", clip(r.Idle, 32)))
	}
	return fault.Validation(errors.Join(errs...))
}

// clip cuts s to n bytes, for echoing input in a message.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// ChargebackService answers chargeback reports in a caller's scope.
type ChargebackService struct {
	store ChargebackStore
	cfg   ChargebackConfig
}

// NewChargebackService reports by cfg (the config's chargeback section).
func NewChargebackService(st ChargebackStore, cfg ChargebackConfig) *ChargebackService {
	return &ChargebackService{store: st, cfg: cfg}
}

// Chargeback is the month's report. Idle capacity is shared across the
// whole fleet, so the report is made for the fleet; a department key then
// gets its own department only (and the fleet's totals, which name no
// other department or tenant).
func (s *ChargebackService) Chargeback(ctx context.Context, r ScopedChargebackRequest) (chargeback.Report, error) {
	if err := r.Validate(); err != nil {
		return chargeback.Report{}, err
	}
	if s.cfg.Book == "" {
		return chargeback.Report{}, fault.NotFoundf("chargeback: no rate card configured (chargeback.book): not found")
	}
	rep, err := Chargeback(ctx, s.store, s.cfg, ChargebackRequest{Period: r.Month, Idle: r.Idle})
	if fault.IsValidation(err) && r.Scope.Kind != auth.KindAdmin {
		// Its problems (the rate card's, the carbon file's, the fleet's
		// allocation) may name other departments: an admin sees them.
		return chargeback.Report{}, fault.Validationf("chargeback of %s cannot be allocated as configured (ask an admin)", r.Month)
	}
	if err != nil {
		return chargeback.Report{}, err
	}
	if d := r.Scope.Department(); d != "" {
		var deps []chargeback.Department
		for _, dep := range rep.Departments {
			if dep.Name == d {
				deps = append(deps, dep)
			}
		}
		var days []chargeback.DayCost
		for _, day := range rep.Days {
			if day.Department == d {
				days = append(days, day)
			}
		}
		rep.Departments, rep.Days = deps, days
	}
	return rep, nil
}
