package credits

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/shopspring/decimal"
)

// NoticeKind is what a credit notice tells.
type NoticeKind string

const (
	// NoticeThreshold: a grant's remaining fell to or below a configured
	// percentage of what it granted.
	NoticeThreshold NoticeKind = "threshold"
	// NoticeDepleted: a pool of the customer's credit (its money, or the
	// included quantity of one meter and SKU class) has nothing left.
	NoticeDepleted NoticeKind = "depleted"
	// NoticeExpiring: a grant with something left expires within the
	// configured days.
	NoticeExpiring NoticeKind = "expiring"
)

// Action is what a depletion asks of the operator's receiver.
type Action string

const (
	// ActionNotify: tell someone; running work runs on.
	ActionNotify Action = "notify"
	// ActionStop: a credit_only customer has no money left and at_zero is
	// webhook: the receiver drains the tenant's running work.
	ActionStop Action = "stop"
)

// PoolMoney is the pool of a customer's prepaid and promotional grants.
const PoolMoney = "money"

// Notice is one credit event that is due. Key says what it is once for:
// the same notice found by a later run, or by another replica, has the
// same key, so whoever publishes it can drop the repeat.
type Notice struct {
	Kind   NoticeKind
	Key    string
	Tenant string
	// Grant is the grant the notice is about; for a depletion, the pool's
	// grant that came into play last (a new grant refilling the pool makes
	// the next depletion another notice).
	Grant Grant
	// Threshold is the percentage left (NoticeThreshold).
	Threshold int
	// Granted and Remaining are the grant's (threshold, expiring) in its
	// unit; Expiring is what of Remaining would be lost at expiry (what the
	// rollover cap does not carry on).
	Granted, Remaining, Expiring decimal.Decimal
	// Pool is "money", or "included:METER" or "included:METER:SKU_CLASS"
	// (NoticeDepleted).
	Pool       string
	Settlement Settlement
	Action     Action
	// AsOf is the hour the usage behind the balances runs to.
	AsOf time.Time
}

// Due are the credit notices a customer's burn-down calls for at now,
// without regard to which were sent before (their keys tell): a threshold
// notice for each percentage of settings.Thresholds an active grant's
// remaining is at or below, once per grant (a recurring allowance's grant
// is its month); a depletion for each pool of credit that had a grant
// start and has nothing left in any active grant; an expiry notice for an
// active grant with something to lose that expires within
// settings.ExpiringDays. Grants that ended (expired, voided) say nothing:
// what they held at the end is expiry's or the void's, not usage's. Due is
// pure.
func Due(c Customer, r Result, settings Settings, now time.Time) []Notice {
	var out []Notice
	thresholds := slices.Compact(slices.Sorted(slices.Values(settings.Thresholds)))
	slices.Reverse(thresholds) // highest first: the order they are crossed in
	for _, b := range r.Balances {
		g := b.Grant
		if !g.activeAt(now) || b.Granted.Sign() <= 0 {
			continue
		}
		for _, p := range thresholds {
			// remaining/granted <= p/100, kept exact by multiplying out.
			if b.Remaining.Mul(decimal.NewFromInt(100)).GreaterThan(b.Granted.Mul(decimal.NewFromInt(int64(p)))) {
				continue
			}
			out = append(out, Notice{Kind: NoticeThreshold, Key: noticeKey(NoticeThreshold, c.Tenant, g.ID, strconv.Itoa(p)), Tenant: c.Tenant,
				Grant: g, Threshold: p, Granted: b.Granted, Remaining: b.Remaining, Settlement: c.settlement(), AsOf: r.AsOf})
		}
		if settings.ExpiringDays > 0 && !g.ExpiresAt.IsZero() && b.Remaining.Sign() > 0 &&
			!g.ExpiresAt.After(now.Add(time.Duration(settings.ExpiringDays)*24*time.Hour)) {
			lost := b.Remaining
			if g.Series != "" && g.RolloverCap != nil {
				lost = lost.Sub(decimal.Min(lost, *g.RolloverCap))
			}
			if lost.Sign() > 0 {
				out = append(out, Notice{Kind: NoticeExpiring, Key: noticeKey(NoticeExpiring, c.Tenant, g.ID), Tenant: c.Tenant, Grant: g,
					Granted: b.Granted, Remaining: b.Remaining, Expiring: lost, Settlement: c.settlement(), AsOf: r.AsOf})
			}
		}
	}
	out = append(out, depletions(c, r, settings, now)...)
	return out
}

// depletions are the pools of credit with nothing left at now.
func depletions(c Customer, r Result, settings Settings, now time.Time) []Notice {
	type pool struct {
		last  *Grant // the grant that came into play last
		left  bool   // an active grant has something left
		order int
	}
	pools := map[string]*pool{}
	for _, b := range r.Balances {
		g := b.Grant
		if g.EffectiveAt.After(now) {
			continue // not started: it refills the pool when it does
		}
		name := poolOf(g)
		p := pools[name]
		if p == nil {
			p = &pool{order: len(pools)}
			pools[name] = p
		}
		if g.activeAt(now) && b.Remaining.Sign() > 0 {
			p.left = true
		}
		if p.last == nil || cameLater(g, *p.last) {
			p.last = &b.Grant
		}
	}
	moneyLeft := pools[PoolMoney] != nil && pools[PoolMoney].left
	var names []string
	for name, p := range pools {
		if !p.left {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(pools[a].order, pools[b].order) })
	var out []Notice
	for _, name := range names {
		g := *pools[name].last
		action := ActionNotify
		// Usage the empty pool covered now falls to money; with none left
		// it is uncovered, which a credit_only customer does not buy.
		if c.settlement() == CreditOnly && settings.AtZero == StopWebhook && !moneyLeft {
			action = ActionStop
		}
		out = append(out, Notice{Kind: NoticeDepleted, Key: noticeKey(NoticeDepleted, c.Tenant, name, g.ID), Tenant: c.Tenant, Grant: g,
			Pool: name, Settlement: c.settlement(), Action: action, AsOf: r.AsOf, Granted: decimal.Zero, Remaining: decimal.Zero})
	}
	return out
}

// poolOf is the pool of credit a grant belongs to.
func poolOf(g Grant) string {
	if g.Money() {
		return PoolMoney
	}
	if g.SKUClass == "" {
		return "included:" + string(g.Meter)
	}
	return "included:" + string(g.Meter) + ":" + g.SKUClass
}

// cameLater reports whether a came into play after b: a grant counts from
// when it was both given and effective, so a grant given today but
// effective last month refills the pool today.
func cameLater(a, b Grant) bool {
	ta, tb := latest(a.CreatedAt, a.EffectiveAt), latest(b.CreatedAt, b.EffectiveAt)
	return cmp.Or(ta.Compare(tb), cmp.Compare(a.ID, b.ID)) > 0
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (c Customer) settlement() Settlement { return cmp.Or(c.Plan.Settlement, CreditThenInvoice) }

// noticeKey joins what makes a notice once.
func noticeKey(kind NoticeKind, parts ...string) string {
	key := string(kind)
	for _, p := range parts {
		key += "\x00" + p
	}
	return key
}
