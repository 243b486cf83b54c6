package pricing

import (
	"github.com/shopspring/decimal"
)

// Mode says how tiers apply to a quantity.
type Mode string

const (
	// Graduated: each tier prices the units that fall inside it.
	Graduated Mode = "graduated"
	// Volume: every unit is priced at the tier the total quantity reaches.
	Volume Mode = "volume"
)

// tier is one row of a rate card. upTo is inclusive; the last tier is open.
type tier struct {
	upTo      decimal.Decimal
	open      bool
	unitPrice decimal.Decimal
	flatFee   decimal.Decimal
}

// schedule is the on-demand price of one meter: a plain unit price is a
// single open tier without a flat fee.
type schedule struct {
	mode  Mode
	tiers []tier
}

func (s *schedule) simple() bool {
	return len(s.tiers) == 1 && s.tiers[0].flatFee.IsZero()
}

// TierCharge is one tier's part of a line.
type TierCharge struct {
	TierIndex int             `json:"tier_index"` // index into the book's tiers list, from 0
	Quantity  decimal.Decimal `json:"quantity"`
	UnitPrice decimal.Decimal `json:"unit_price"`
	FlatFee   decimal.Decimal `json:"flat_fee"` // charged (or, for volume across a price change, its share)
	Amount    decimal.Decimal `json:"amount"`   // Quantity × UnitPrice + FlatFee, unrounded
}

// charge is the unrounded price of some units.
type charge struct {
	amount decimal.Decimal
	tiers  []TierCharge // nil for a plain unit price
}

// graduated prices the units in (from, to] of a period's cumulative
// quantity. A tier's flat fee is charged by the segment in which the
// quantity first enters the tier, so zero usage pays no flat fee and
// pricing [0,a] then (a,b] costs the same as pricing [0,b].
func (s *schedule) graduated(from, to decimal.Decimal) charge {
	if to.Cmp(from) <= 0 {
		return charge{amount: decimal.Zero}
	}
	if s.simple() {
		return charge{amount: to.Sub(from).Mul(s.tiers[0].unitPrice)}
	}
	var c charge
	c.amount = decimal.Zero
	lower := decimal.Zero
	for i, t := range s.tiers {
		if to.Cmp(lower) <= 0 {
			break
		}
		hi := to
		if !t.open && t.upTo.Cmp(to) < 0 {
			hi = t.upTo
		}
		lo := decimal.Max(from, lower)
		if hi.Cmp(lo) > 0 {
			units := hi.Sub(lo)
			tc := TierCharge{TierIndex: i, Quantity: units, UnitPrice: t.unitPrice, FlatFee: decimal.Zero}
			if from.Cmp(lower) <= 0 {
				tc.FlatFee = t.flatFee
			}
			tc.Amount = units.Mul(t.unitPrice).Add(tc.FlatFee)
			c.amount = c.amount.Add(tc.Amount)
			c.tiers = append(c.tiers, tc)
		}
		if t.open {
			break
		}
		lower = t.upTo
	}
	return c
}

// volumeTier returns the tier a period total reaches.
func (s *schedule) volumeTier(total decimal.Decimal) int {
	for i, t := range s.tiers {
		if t.open || total.Cmp(t.upTo) <= 0 {
			return i
		}
	}
	return len(s.tiers) - 1 // unreachable: validation makes the last tier open
}

// volume prices share units out of a period total: all at the unit price of
// the tier the total reaches, with share/total of that tier's flat fee (the
// whole fee when one price covers the period).
func (s *schedule) volume(share, total decimal.Decimal) charge {
	if share.Sign() <= 0 || total.Sign() <= 0 {
		return charge{amount: decimal.Zero}
	}
	if s.simple() {
		return charge{amount: share.Mul(s.tiers[0].unitPrice)}
	}
	i := s.volumeTier(total)
	t := s.tiers[i]
	flat := t.flatFee
	if !flat.IsZero() && !share.Equal(total) {
		flat = flat.Mul(share).DivRound(total, maxPlaces)
	}
	amount := share.Mul(t.unitPrice).Add(flat)
	return charge{
		amount: amount,
		tiers:  []TierCharge{{TierIndex: i, Quantity: share, UnitPrice: t.unitPrice, FlatFee: flat, Amount: amount}},
	}
}

// scale multiplies a charge (a burst multiplier on the on-demand price).
func (c charge) scale(m decimal.Decimal) charge {
	out := charge{amount: c.amount.Mul(m)}
	for _, t := range c.tiers {
		out.tiers = append(out.tiers, TierCharge{
			TierIndex: t.TierIndex,
			Quantity:  t.Quantity,
			UnitPrice: t.UnitPrice.Mul(m),
			FlatFee:   t.FlatFee.Mul(m),
			Amount:    t.Amount.Mul(m),
		})
	}
	return out
}
