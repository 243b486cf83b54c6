package credits

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/pricing"
)

// Admission of credit_only customers (issue 34, item 4): new GPU work is
// admitted only while the customer's balance, less what admitted work
// already holds, covers the work's expected spend over the horizon. This
// file is the pure decision (Decide) and the per-tenant book of holds
// (Holds) that serializes "read the balance less the holds, decide, add a
// hold" per tenant within one process.

// Cover is what a credit_only customer's balance leaves for admission, read
// by the quota refresher from a burn-down (CoverOf).
type Cover struct {
	// AsOf is the hour the balance's usage runs to (Result.AsOf): holds
	// whose horizon ended by then are measured and dropped.
	AsOf time.Time
	// ReadAt is when the balance was read: admission treats an old cover
	// as stale.
	ReadAt   time.Time
	Currency string
	// Money is the money left on the active money grants, before tax:
	// promotional credit as it is, prepaid credit divided by 1 + the tax
	// rate, since prepaid pays a charge with its tax.
	Money decimal.Decimal
	// Hours are the included GPU-equivalent hours left, by SKU class (""
	// for grants of any SKU).
	Hours map[string]decimal.Decimal
	// Rates are the price of one more GPU-equivalent hour of each SKU at
	// the customer's book and the tier reached (the on-demand unit price
	// of a flat book); a SKU missing here cannot be admitted.
	Rates map[string]decimal.Decimal
}

// CoverOf is the cover a burn-down leaves at now: the remaining of the
// grants active at now (effective, not expired, not voided) only, so a
// grant not yet effective pays for nothing yet. Usage no grant covered
// (Result.Uncovered) is not deducted: a top-up opens admission again.
func CoverOf(c Customer, r Result, rates map[string]decimal.Decimal, now time.Time) Cover {
	out := Cover{AsOf: r.AsOf, ReadAt: now, Currency: c.Currency, Money: decimal.Zero, Hours: map[string]decimal.Decimal{}, Rates: rates}
	factor := decimal.NewFromInt(1).Add(c.TaxRate.Shift(-2))
	for _, b := range r.Balances {
		g := b.Grant
		if !g.activeAt(now) || b.Remaining.Sign() <= 0 {
			continue
		}
		switch g.Kind {
		case Promotional:
			out.Money = out.Money.Add(b.Remaining)
		case Prepaid:
			out.Money = out.Money.Add(b.Remaining.DivRound(factor, 2*pricing.StoragePlaces))
		case Included:
			if g.Meter == pricing.GPUHours {
				out.Hours[g.SKUClass] = out.Hours[g.SKUClass].Add(b.Remaining)
			}
		}
	}
	return out
}

// Need is one part of an admission: GPUs GPU-equivalents of SKU (a whole
// GPU, a MIG profile or a vGPU type, by the catalogue's weight).
type Need struct {
	SKU  string
	GPUs decimal.Decimal
}

// Held is what admitted work holds: money and included hours by SKU class.
type Held struct {
	Money decimal.Decimal
	Hours map[string]decimal.Decimal
	Count int // holds
}

// Hold is one admission's expected spend over the horizon, held until the
// balance's usage runs past Until (its admission plus the horizon).
type Hold struct {
	ID    string
	Money decimal.Decimal
	Hours map[string]decimal.Decimal
	Until time.Time
}

// Check is Decide's answer. Needed is the money the work needs over the
// horizon once included hours are used; Left is the money left after
// what is held (Balance - Held.Money).
type Check struct {
	Allowed bool
	Reason  string
	Stale   bool
	Balance decimal.Decimal
	Held    Held
	Needed  decimal.Decimal
	Left    decimal.Decimal
	// Take is what the work would hold if admitted; once Holds.Admit has
	// held it, with its admission's ID and Until.
	Take Hold
}

// Decide says whether a cover, less what is held, pays for needs over
// horizon: included hours of each SKU's class (then of any SKU) first,
// then money at the SKU's rate. Exactly enough is enough. Pure.
func Decide(cover Cover, held Held, needs []Need, horizon time.Duration) Check {
	hours := decimal.NewFromInt(int64(horizon)).DivRound(decimal.NewFromInt(int64(time.Hour)), 18)
	left := make(map[string]decimal.Decimal, len(cover.Hours))
	for class, h := range cover.Hours {
		left[class] = h.Sub(held.Hours[class])
	}
	chk := Check{Balance: cover.Money, Held: held, Needed: decimal.Zero, Left: cover.Money.Sub(held.Money),
		Take: Hold{Money: decimal.Zero}}
	var unpriced []string
	var parts []string
	for _, n := range needs {
		want := n.GPUs.Mul(hours)
		model, _ := gpucatalog.ParseSKU(n.SKU)
		var fromHours decimal.Decimal
		for _, class := range []string{model, ""} {
			avail := left[class]
			if want.Sign() <= 0 || avail.Sign() <= 0 {
				continue
			}
			take := decimal.Min(want, avail)
			left[class] = avail.Sub(take)
			if chk.Take.Hours == nil { // most holds take no included hours: no map
				chk.Take.Hours = map[string]decimal.Decimal{}
			}
			chk.Take.Hours[class] = chk.Take.Hours[class].Add(take)
			want = want.Sub(take)
			fromHours = fromHours.Add(take)
		}
		part := fmt.Sprintf("%s GPU-equivalents of %s", n.GPUs.Round(3), n.SKU)
		if fromHours.Sign() > 0 {
			part += fmt.Sprintf(" (%s included GPU-hours)", fromHours.Round(3))
		}
		parts = append(parts, part)
		if want.Sign() <= 0 {
			continue
		}
		rate, ok := cover.Rates[n.SKU]
		if !ok {
			unpriced = append(unpriced, n.SKU)
			continue
		}
		// Weights are fractions (3/7) carried to 18 places: the money is
		// rounded to the stored places, so seven 3/7 slices cost 3 GPUs.
		chk.Needed = chk.Needed.Add(want.Mul(rate).Round(pricing.StoragePlaces))
	}
	chk.Take.Money = chk.Needed
	h := horizonText(horizon)
	if len(unpriced) > 0 {
		chk.Reason = fmt.Sprintf("credit_only: the price book prices no gpu_hours of %s, so the balance cannot be checked to cover it over the %s horizon",
			strings.Join(unpriced, ", "), h)
		return chk
	}
	cur := cover.Currency
	chk.Allowed = chk.Needed.LessThanOrEqual(chk.Left)
	verdict := "covers"
	if !chk.Allowed {
		verdict = "cannot cover"
	}
	chk.Reason = fmt.Sprintf("credit_only: balance %s %s, held %s %s by %d admitted, needed %s %s for %s over the %s horizon: the balance %s it",
		chk.Balance.RoundFloor(2).StringFixed(2), cur, held.Money.RoundCeil(2).StringFixed(2), cur, held.Count,
		chk.Needed.RoundCeil(2).StringFixed(2), cur, strings.Join(parts, " and "), h, verdict)
	if classes := hoursText(cover.Hours, held.Hours); classes != "" {
		chk.Reason += "; included GPU-hours left before the holds: " + classes
	}
	return chk
}

func horizonText(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

func hoursText(hours, held map[string]decimal.Decimal) string {
	classes := make([]string, 0, len(hours))
	for c := range hours {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	var out []string
	for _, c := range classes {
		name := c
		if name == "" {
			name = "any SKU"
		}
		out = append(out, fmt.Sprintf("%s %s (held %s)", name, hours[c].Round(3), held[c].Round(3)))
	}
	return strings.Join(out, ", ")
}

// Policy is how Holds decides: the horizon, and what to do without a
// fresh cover (the quota's on_stale).
type Policy struct {
	Horizon    time.Duration
	StaleAfter time.Duration
	FailOpen   bool
}

// Holds keeps, per credit_only tenant, the latest cover and the holds of
// admitted work. Each tenant has its own lock, held from reading the
// cover less the holds to adding the new hold, so concurrent admissions of
// one tenant cannot together spend more than its balance; other tenants
// are not held up. A hold lasts until a cover whose usage runs past its
// Until is installed (its work's usage over the horizon is then measured):
// until then the work's own measured usage and its hold both count, which
// errs on the side of refusing.
type Holds struct {
	mu       sync.Mutex
	accounts map[string]*account
}

type account struct {
	mu    sync.Mutex
	cover *Cover
	holds []Hold
	held  Held
}

// NewHolds is an empty book.
func NewHolds() *Holds { return &Holds{accounts: map[string]*account{}} }

func (h *Holds) account(tenant string) *account {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.accounts[tenant]
	if !ok {
		a = &account{held: Held{Money: decimal.Zero, Hours: map[string]decimal.Decimal{}}}
		h.accounts[tenant] = a
	}
	return a
}

// SetCover installs a tenant's new cover and drops the holds its usage
// has measured (Until at or before c.AsOf).
func (h *Holds) SetCover(tenant string, c Cover) {
	a := h.account(tenant)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cover = &c
	kept := a.holds[:0]
	for _, x := range a.holds {
		if x.Until.After(c.AsOf) {
			kept = append(kept, x)
			continue
		}
		a.held.Money = a.held.Money.Sub(x.Money)
		for class, v := range x.Hours {
			a.held.Hours[class] = a.held.Hours[class].Sub(v)
		}
		a.held.Count--
	}
	clear(a.holds[len(kept):])
	a.holds = kept
}

// Held is what a tenant's admitted work holds now, and its cover (false
// when none has been read).
func (h *Holds) Held(tenant string) (Held, Cover, bool) {
	a := h.account(tenant)
	a.mu.Lock()
	defer a.mu.Unlock()
	held := Held{Money: a.held.Money, Count: a.held.Count, Hours: map[string]decimal.Decimal{}}
	for k, v := range a.held.Hours {
		held.Hours[k] = v
	}
	if a.cover == nil {
		return held, Cover{}, false
	}
	return held, *a.cover, true
}

// Admit decides needs for tenant under its lock. When the credit allows
// them it calls admit (the quota evaluator, which decides the quotas and
// returns the admission's id, "" when it refused or for a dry run) and,
// with an id, holds the work's expected spend under it until the cover's
// usage runs past now + the horizon. A refusal by either holds nothing.
func (h *Holds) Admit(tenant string, needs []Need, p Policy, now time.Time, admit func() (id string, err error)) (Check, error) {
	a := h.account(tenant)
	a.mu.Lock()
	defer a.mu.Unlock()
	var chk Check
	switch {
	case a.cover == nil:
		chk = a.stale(needs, p, "no credit balance read yet")
	case now.Sub(a.cover.ReadAt) > p.StaleAfter:
		chk = a.stale(needs, p, fmt.Sprintf("the credit balance is %s old (stale after %s)", now.Sub(a.cover.ReadAt).Round(time.Second), p.StaleAfter))
	default:
		chk = Decide(*a.cover, a.held, needs, p.Horizon)
	}
	if !chk.Allowed {
		return chk, nil
	}
	id, err := admit()
	if err != nil || id == "" {
		return chk, err
	}
	chk.Take.ID, chk.Take.Until = id, now.Add(p.Horizon)
	a.add(chk.Take)
	return chk, nil
}

// add holds x; the caller holds a.mu.
func (a *account) add(x Hold) {
	a.holds = append(a.holds, x)
	a.held.Money = a.held.Money.Add(x.Money)
	for class, v := range x.Hours {
		a.held.Hours[class] = a.held.Hours[class].Add(v)
	}
	a.held.Count++
}

// Restore replaces every tenant's holds with byTenant's (a new leader's
// rebuild from the admission log, docs/ha.md); the covers stay, and the
// holds a tenant's cover has measured already are dropped. A tenant
// missing from byTenant holds nothing afterwards.
func (h *Holds) Restore(byTenant map[string][]Hold) {
	h.mu.Lock()
	tenants := make(map[string]bool, len(h.accounts)+len(byTenant))
	for t := range h.accounts {
		tenants[t] = true
	}
	h.mu.Unlock()
	for t := range byTenant {
		tenants[t] = true
	}
	for t := range tenants {
		a := h.account(t)
		a.mu.Lock()
		clear(a.holds)
		a.holds = a.holds[:0]
		a.held = Held{Money: decimal.Zero, Hours: map[string]decimal.Decimal{}}
		for _, x := range byTenant[t] {
			if a.cover == nil || x.Until.After(a.cover.AsOf) {
				a.add(x)
			}
		}
		a.mu.Unlock()
	}
}

// stale decides without a fresh cover by the policy: failing open, the
// work is admitted and holds what the last cover prices it at (nothing
// when no balance was ever read: there are no rates).
func (a *account) stale(needs []Need, p Policy, what string) Check {
	cover := Cover{Money: decimal.Zero}
	if a.cover != nil {
		cover = *a.cover
	}
	chk := Decide(cover, a.held, needs, p.Horizon)
	chk.Stale = true
	if p.FailOpen {
		chk.Allowed, chk.Reason = true, "credit_only: "+what+"; failing open"
		return chk
	}
	chk.Allowed, chk.Reason = false, "credit_only: "+what+"; failing closed"
	return chk
}
