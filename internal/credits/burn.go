package credits

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/pricing"
)

// Charge is priced usage of one hour: a quantity of a meter on a SKU and
// its exact amount in the customer's currency.
type Charge struct {
	At       time.Time       `json:"at"`
	SKU      string          `json:"sku"`
	Meter    pricing.Meter   `json:"meter"`
	Quantity decimal.Decimal `json:"quantity"`
	Amount   decimal.Decimal `json:"amount"`
	// TaxRate is the customer's tax percentage: prepaid credit pays the
	// charge with its tax, as a payment pays an invoice's total.
	TaxRate decimal.Decimal `json:"tax_rate,omitzero"`
}

// Draw is what one grant covered of one charge: a quantity of the
// charge's meter (included grants) and the money it stood for (for a
// prepaid grant, with the tax on it).
type Draw struct {
	GrantID  string          `json:"grant_id"`
	At       time.Time       `json:"at"`
	SKU      string          `json:"sku"`
	Meter    pricing.Meter   `json:"meter"`
	Quantity decimal.Decimal `json:"quantity,omitzero"`
	Amount   decimal.Decimal `json:"amount"`
	// Tax is the part of a prepaid draw's Amount that paid the charge's
	// tax: Amount - Tax of the charge's money is covered.
	Tax decimal.Decimal `json:"tax,omitzero"`
}

// Balance is a grant's account as of the burn-down's time, in the grant's
// unit (money, or the included meter's quantity): Granted (its amount and
// what rolled into it) = Used + Expired + Voided + RolledOver + Remaining.
type Balance struct {
	Grant      Grant           `json:"grant"`
	Granted    decimal.Decimal `json:"granted"`
	Used       decimal.Decimal `json:"used"`
	Expired    decimal.Decimal `json:"expired"`
	Voided     decimal.Decimal `json:"voided"`
	RolledOver decimal.Decimal `json:"rolled_over"`
	Remaining  decimal.Decimal `json:"remaining"`
	// Covered is the money of the charges the grant covered: its draws'
	// amounts summed (for included grants the share of the charges' money,
	// for prepaid with the tax it paid).
	Covered decimal.Decimal `json:"covered"`
}

// Result is a customer's burn-down: each grant's balance in the order the
// grants were given, every draw, and the money no grant covered, before
// tax (invoiced as usual, or refused under credit_only).
type Result struct {
	AsOf      time.Time       `json:"as_of"`
	Balances  []Balance       `json:"balances"`
	Draws     []Draw          `json:"draws"`
	Uncovered decimal.Decimal `json:"uncovered"`
}

// Burn derives the grants' balances at asOf from the charges up to it.
// Each charge is covered, in time order, by the included grants that count
// its SKU and meter first, then by money; within each, by priority, then
// earliest expiry, then the oldest grant (then the id). A grant covers the
// charges in [EffectiveAt, ExpiresAt) before its void; what is left when it
// expires expires (up to its rollover cap moving into the next grant of
// its series, which starts then), and what is left when it is voided is
// voided. Part of a charge an included grant covers stands for its share
// of the charge's money; the last part takes the rest, so the parts add
// up exactly. Burn is pure and deterministic: the same grants and charges
// give the same result.
func Burn(grants []Grant, charges []Charge, asOf time.Time) (Result, error) {
	return burn(grants, charges, asOf, true)
}

// Balances is Burn without the draws: each grant's account and the money
// no grant covered, for callers that need no more (a fleet's balances).
func Balances(grants []Grant, charges []Charge, asOf time.Time) (Result, error) {
	return burn(grants, charges, asOf, false)
}

func burn(grants []Grant, charges []Charge, asOf time.Time, keepDraws bool) (Result, error) {
	res := Result{AsOf: asOf, Uncovered: decimal.Zero}
	for i, g := range grants {
		if g.Amount.Sign() <= 0 {
			return Result{}, fmt.Errorf("grant %s: amount %s is not above zero", g.ID, g.Amount)
		}
		res.Balances = append(res.Balances, Balance{Grant: g, Granted: g.Amount, Used: decimal.Zero, Expired: decimal.Zero,
			Voided: decimal.Zero, RolledOver: decimal.Zero, Remaining: g.Amount, Covered: decimal.Zero})
		for _, h := range grants[:i] {
			if h.ID == g.ID {
				return Result{}, fmt.Errorf("grant %s: given twice", g.ID)
			}
		}
	}
	// The order grants are used in: included first, then money; then
	// priority, earliest expiry (never last), the oldest, the id.
	order := make([]int, len(grants))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return CompareUse(grants[a], grants[b]) })
	// Expiries and voids happen at their instant, before the charges of
	// that instant (a grant expiring at 00:00 does not cover 00:00-01:00).
	type ending struct {
		at    time.Time
		grant int
		void  bool
	}
	var endings []ending
	for i, g := range grants {
		if !g.ExpiresAt.IsZero() && !g.ExpiresAt.After(asOf) {
			endings = append(endings, ending{g.ExpiresAt, i, false})
		}
		if g.VoidedAt != nil && !g.VoidedAt.After(asOf) {
			endings = append(endings, ending{*g.VoidedAt, i, true})
		}
	}
	slices.SortStableFunc(endings, func(a, b ending) int { return a.at.Compare(b.at) })
	end := func(e ending) {
		b := &res.Balances[e.grant]
		left := b.Remaining
		if left.Sign() == 0 {
			return
		}
		b.Remaining = decimal.Zero
		if e.void {
			b.Voided = b.Voided.Add(left)
			return
		}
		g := b.Grant
		if g.RolloverCap != nil && g.Series != "" {
			for j, next := range grants {
				if next.Series == g.Series && next.EffectiveAt.Equal(g.ExpiresAt) && next.Tenant == g.Tenant {
					carry := decimal.Min(left, *g.RolloverCap)
					b.RolledOver = carry
					nb := &res.Balances[j]
					nb.Granted = nb.Granted.Add(carry)
					nb.Remaining = nb.Remaining.Add(carry)
					left = left.Sub(carry)
					break
				}
			}
		}
		b.Expired = b.Expired.Add(left)
	}

	byTime := func(a, b Charge) int { return a.At.Compare(b.At) }
	sorted := charges // the store reads them in hour order: sorted once only when not
	if !slices.IsSortedFunc(sorted, byTime) {
		sorted = slices.Clone(charges)
		slices.SortStableFunc(sorted, byTime)
	}
	// Used is derived once at the end from the account's identity, and a
	// money grant's Covered is its Used: the loop keeps only Remaining (and
	// an included grant's Covered), which saves most of the allocations.
	draw := func(b *Balance, d Draw) {
		if b.Grant.Kind == Included {
			b.Covered = b.Covered.Add(d.Amount)
		}
		if keepDraws {
			res.Draws = append(res.Draws, d)
		}
	}
	models := map[string]string{} // SKU → its GPU model, parsed once
	covers := func(g *Grant, c *Charge) bool {
		if g.Meter != c.Meter {
			return false
		}
		if g.SKUClass == "" {
			return true
		}
		model, ok := models[c.SKU]
		if !ok {
			model, _ = gpucatalog.ParseSKU(c.SKU)
			models[c.SKU] = model
		}
		return g.SKUClass == model
	}
	one := decimal.NewFromInt(1)
	var taxed grossCache
	// Without draws to record, money grants' remainders are kept in
	// fixed point while charges are covered whole (see fixedRemainders).
	var fixed fixedRemainders
	if !keepDraws {
		fixed = make(fixedRemainders, len(grants))
	}
	next := 0
	for _, c := range sorted {
		if !c.At.Before(asOf) {
			continue // usage from asOf on has not happened yet
		}
		for next < len(endings) && !endings[next].at.After(c.At) {
			fixed.settleAll(res.Balances)
			end(endings[next])
			next++
		}
		if c.Quantity.Sign() < 0 || c.Amount.Sign() < 0 {
			return Result{}, fmt.Errorf("charge %s %s %s at %s: negative", c.SKU, c.Meter, c.Quantity, c.At.Format(time.RFC3339))
		}
		qty, money := c.Quantity, c.Amount
		for _, i := range order {
			if money.Sign() == 0 && qty.Sign() == 0 {
				break
			}
			b := &res.Balances[i]
			g := &b.Grant
			if !g.activeAt(c.At) || fixed.zero(i, b) {
				continue
			}
			switch {
			case g.Kind == Included && qty.Sign() > 0 && covers(g, &c):
				if !b.Remaining.LessThan(qty) { // all of it
					b.Remaining = b.Remaining.Sub(qty)
					draw(b, Draw{GrantID: g.ID, At: c.At, SKU: c.SKU, Meter: c.Meter, Quantity: qty, Amount: money})
					qty, money = decimal.Zero, decimal.Zero
					continue
				}
				take := b.Remaining
				share := money.Mul(take).DivRound(qty, 2*pricing.StoragePlaces)
				b.Remaining = decimal.Zero
				qty, money = qty.Sub(take), money.Sub(share)
				draw(b, Draw{GrantID: g.ID, At: c.At, SKU: c.SKU, Meter: c.Meter, Quantity: take, Amount: share})
			case g.Kind == Promotional && money.Sign() > 0:
				if fixed.cover(i, b, money, one) {
					money = decimal.Zero // all of it (a zero's exponent goes nowhere)
					continue
				}
				take, left := money, decimal.Zero // all of it: nothing left (a zero's exponent goes nowhere)
				if b.Remaining.LessThan(money) {
					take = b.Remaining
					left = money.Sub(take)
				}
				b.Remaining = b.Remaining.Sub(take)
				money = left
				draw(b, Draw{GrantID: g.ID, At: c.At, SKU: c.SKU, Meter: c.Meter, Amount: take})
			case g.Kind == Prepaid && money.Sign() > 0:
				// Prepaid credit pays the charge with its tax: the gross is
				// exact (a product of decimals), the net part of a partial
				// payment is divided back at twice the stored places.
				factor := one
				if !c.TaxRate.IsZero() {
					factor = taxed.factor(c.TaxRate)
				}
				if fixed.cover(i, b, money, factor) {
					money = decimal.Zero // all of it, with its tax
					continue
				}
				gross := money
				if !c.TaxRate.IsZero() {
					factor, gross = taxed.gross(money, c.TaxRate)
				}
				take, net, left := gross, money, decimal.Zero
				if b.Remaining.LessThan(gross) {
					take = b.Remaining
					net = take.DivRound(factor, 2*pricing.StoragePlaces)
					left = money.Sub(net)
				}
				b.Remaining = b.Remaining.Sub(take)
				money = left
				d := Draw{GrantID: g.ID, At: c.At, SKU: c.SKU, Meter: c.Meter, Amount: take}
				if keepDraws {
					d.Tax = take.Sub(net)
				}
				draw(b, d)
			}
		}
		if money.Sign() != 0 {
			res.Uncovered = res.Uncovered.Add(money)
		}
	}
	fixed.settleAll(res.Balances)
	for ; next < len(endings); next++ {
		end(endings[next])
	}
	for i := range res.Balances {
		b := &res.Balances[i]
		b.Used = b.Granted.Sub(b.Expired).Sub(b.Voided).Sub(b.RolledOver).Sub(b.Remaining)
		if b.Grant.Money() {
			b.Covered = b.Used
		}
	}
	return res, nil
}

// CompareUse orders grants as the burn-down uses them: included first,
// then money; then by priority, earliest expiry (never last), the oldest
// grant, the id. Invoices apply their lines in the same order.
func CompareUse(a, b Grant) int {
	return cmp.Or(
		cmp.Compare(kindRank(a.Kind), kindRank(b.Kind)),
		cmp.Compare(a.Priority, b.Priority),
		compareExpiry(a.ExpiresAt, b.ExpiresAt),
		a.CreatedAt.Compare(b.CreatedAt),
		cmp.Compare(a.ID, b.ID))
}

func kindRank(k Kind) int {
	if k == Included {
		return 0
	}
	return 1
}

// compareExpiry orders expiry times, never (zero) last.
func compareExpiry(a, b time.Time) int {
	switch {
	case a.IsZero() && b.IsZero():
		return 0
	case a.IsZero():
		return 1
	case b.IsZero():
		return -1
	}
	return a.Compare(b)
}

// grossCache remembers the last few (money, tax rate) → (1 + rate/100,
// money × that) of a burn-down: hour after hour its charges repeat the
// same few amounts and its one rate. Keys match digits and exponent, so
// a hit is the very decimal the product would give.
type grossCache struct {
	keys    [4][2]decimal.Decimal
	factors [4]decimal.Decimal
	grosses [4]decimal.Decimal
	n, next int
	// The factor of the last rate factor was asked for.
	lastRate, lastFactor decimal.Decimal
	hasLast              bool
}

// factor is 1 + rate/100, the same decimal gross uses.
func (c *grossCache) factor(rate decimal.Decimal) decimal.Decimal {
	for i := range c.n {
		if sameDecimal(c.keys[i][1], rate) {
			return c.factors[i]
		}
	}
	if sameDecimal(c.lastRate, rate) && c.hasLast {
		return c.lastFactor
	}
	c.lastRate, c.lastFactor, c.hasLast = rate, decimal.NewFromInt(1).Add(rate.Shift(-2)), true
	return c.lastFactor
}

func (c *grossCache) gross(money, rate decimal.Decimal) (factor, gross decimal.Decimal) {
	for i := range c.n {
		if k := c.keys[i]; sameDecimal(k[0], money) && sameDecimal(k[1], rate) {
			return c.factors[i], c.grosses[i]
		}
	}
	known := false
	for i := range c.n { // the factor of this rate, if known
		if sameDecimal(c.keys[i][1], rate) {
			factor, known = c.factors[i], true
			break
		}
	}
	if !known {
		factor = decimal.NewFromInt(1).Add(rate.Shift(-2))
	}
	gross = money.Mul(factor)
	i := c.next
	c.keys[i], c.factors[i], c.grosses[i] = [2]decimal.Decimal{money, rate}, factor, gross
	c.next = (i + 1) % len(c.keys)
	c.n = max(c.n, i+1)
	return factor, gross
}

// fixedRemainders keeps money grants' remainders as exact fixed-point
// integers (an unsigned 128-bit coefficient and the exponent the decimal
// would have) while the charges they cover are covered whole: a
// subtraction of decimals allocates, this does not. The decimal
// operations it stands for are exact (differences, and products of
// coefficients), so the result is the same decimal, digits and exponent:
// a difference's exponent is the smaller of the two. Whatever it cannot
// hold (a partial cover, a coefficient too wide) goes back to the
// decimal path, with Remaining set from it first; settleAll sets every
// Remaining before expiries, voids and the end. nil keeps none.
type fixedRemainders []fixedRemainder

type fixedRemainder struct {
	on, never bool
	v         u128
	exp       int32
}

// zero is whether grant i has nothing left.
func (f fixedRemainders) zero(i int, b *Balance) bool {
	if f != nil && f[i].on {
		return f[i].v == (u128{})
	}
	return b.Remaining.Sign() == 0
}

// cover takes money × factor from grant i's remainder when it covers all
// of it and reports whether it did; otherwise b.Remaining is its
// remainder, for the decimal path.
func (f fixedRemainders) cover(i int, b *Balance, money, factor decimal.Decimal) bool {
	if f == nil || f[i].never {
		return false
	}
	r := &f[i]
	if !r.on {
		c := b.Remaining.Coefficient()
		if c.Sign() < 0 || c.BitLen() > 126 {
			r.never = true
			return false
		}
		lo := c.Uint64()
		r.v, r.exp, r.on = u128{hi: c.Rsh(c, 64).Uint64(), lo: lo}, b.Remaining.Exponent(), true
	}
	cm, em, ok1 := smallCoefficient(money)
	cf, ef, ok2 := smallCoefficient(factor)
	if !ok1 || !ok2 {
		f.settle(i, b)
		return false
	}
	hi, lo := bits.Mul64(cm, cf)
	left, gross, exp, ok := align(r.v, r.exp, u128{hi, lo}, em+ef)
	if !ok || left.less(gross) {
		f.settle(i, b)
		return false
	}
	r.v, r.exp = left.sub(gross), exp
	return true
}

// settle sets b.Remaining from grant i's fixed remainder and leaves the
// decimal path to it from then on (until it is picked up again).
func (f fixedRemainders) settle(i int, b *Balance) {
	if r := &f[i]; r.on {
		b.Remaining = decimal.NewFromBigInt(r.v.big(), r.exp)
		r.on = false
	}
}

func (f fixedRemainders) settleAll(balances []Balance) {
	for i := range f {
		f.settle(i, &balances[i])
	}
}

// smallCoefficient is d's coefficient and exponent when d is not negative
// and its coefficient fits an int64: up to 18 digits, or 19 up to
// math.MaxInt64 (1.25 at 18 places is 19 digits).
func smallCoefficient(d decimal.Decimal) (uint64, int32, bool) {
	if d.Sign() < 0 {
		return 0, 0, false
	}
	switch n := d.NumDigits(); {
	case n <= 18:
	case n == 19 && d.Exponent() <= 0 && d.Exponent() > -int32(len(maxInt64At)):
		if d.Cmp(maxInt64At[-d.Exponent()]) > 0 { // at d's exponent: no allocation
			return 0, 0, false
		}
	default:
		return 0, 0, false
	}
	return uint64(d.CoefficientInt64()), d.Exponent(), true
}

// maxInt64At[p] is math.MaxInt64 × 10^-p.
var maxInt64At = func() (out [19]decimal.Decimal) {
	for p := range out {
		out[p] = decimal.New(math.MaxInt64, int32(-p))
	}
	return out
}()

// u128 is an unsigned 128-bit integer.
type u128 struct{ hi, lo uint64 }

var pow10u64 = func() (out [20]uint64) {
	out[0] = 1
	for i := 1; i < len(out); i++ {
		out[i] = out[i-1] * 10
	}
	return out
}()

// mul10 is a × 10^k, or false when it does not fit.
func (a u128) mul10(k int32) (u128, bool) {
	for k > 0 {
		step := min(k, 19)
		m := pow10u64[step]
		hi1, lo := bits.Mul64(a.lo, m)
		hi2, hi3 := bits.Mul64(a.hi, m)
		hi, carry := bits.Add64(hi1, hi3, 0)
		if hi2 != 0 || carry != 0 || hi>>62 != 0 {
			return u128{}, false
		}
		a, k = u128{hi, lo}, k-step
	}
	return a, true
}

// align is a × 10^ea and b × 10^eb as coefficients at the smaller
// exponent (a decimal sum's), or false when one does not fit.
func align(a u128, ea int32, b u128, eb int32) (u128, u128, int32, bool) {
	var ok bool
	switch {
	case ea > eb:
		a, ok = a.mul10(ea - eb)
		return a, b, eb, ok
	case eb > ea:
		b, ok = b.mul10(eb - ea)
		return a, b, ea, ok
	}
	return a, b, ea, true
}

func (a u128) less(b u128) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }

// sub is a - b, for b not above a.
func (a u128) sub(b u128) u128 {
	lo, borrow := bits.Sub64(a.lo, b.lo, 0)
	hi, _ := bits.Sub64(a.hi, b.hi, borrow)
	return u128{hi, lo}
}

func (a u128) big() *big.Int {
	v := new(big.Int).SetUint64(a.hi)
	v.Lsh(v, 64)
	return v.Or(v, new(big.Int).SetUint64(a.lo))
}
