package pricing

import (
	"fmt"
	"io"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// Contract is what one tenant agreed beyond the book: reserved capacity,
// burst thresholds and a minimum commitment. Without a contract (a nil
// one in Input) the tenant pays the book's on-demand prices.
type Contract struct {
	Tenant   string
	Currency string // optional; must equal the book's when given

	// Start and End bound the contract term [Start, End); zero means open.
	// Outside the term, the tenant pays on demand.
	Start, End time.Time

	Reservations []Reservation

	// MinimumMonthly overrides the book's minimum commitment per calendar
	// month; nil keeps the book's.
	MinimumMonthly *decimal.Decimal

	Burst []BurstThreshold

	lines lineIndex
}

// Reservation is take-or-pay capacity of one SKU: charged whether used or
// not, prorated by the second, covering gpu_hours hour by hour.
type Reservation struct {
	SKU string
	// GPUs is the reserved capacity in GPU-equivalents; Instances counts
	// instances of the SKU instead, converted with the SKU's weight. Give
	// exactly one.
	GPUs      decimal.Decimal
	Instances int64
	// Rate is the price per reserved GPU-equivalent hour; MonthlyFee is the
	// price of the whole reservation per calendar month. Give exactly one.
	Rate       *decimal.Decimal
	MonthlyFee *decimal.Decimal
	// Start and End bound the reservation; zero takes the contract term's.
	Start, End time.Time
}

// BurstThreshold sets, for one SKU, the GPU-equivalents in use per hour
// above which gpu_hours are burst (a quota's soft limit). Without one, the
// threshold is the reservation active in that hour.
type BurstThreshold struct {
	SKU            string
	AboveGPUs      *decimal.Decimal
	AboveInstances *int64
}

// LoadContract reads and validates a YAML contract.
func LoadContract(r io.Reader) (*Contract, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read contract: %w", err)
	}
	return ParseContract(data)
}

// ParseContract parses and validates a YAML contract (format in
// docs/pricing.md). It is checked against a book when priced.
func ParseContract(data []byte) (*Contract, error) {
	var doc contractDoc
	lines, err := decodeYAML(data, &doc)
	if err != nil {
		return nil, fault.Validationf("contract: %w", err)
	}
	c := doc.contract()
	c.lines = lines
	var ps problems
	if doc.MinimumCommitment != nil && !doc.MinimumCommitment.MonthlyAmount.set {
		ps.add(path("minimum_commitment").key("monthly_amount"), "required")
	}
	c.validate(&ps)
	if err := ps.err("contract", lines); err != nil {
		return nil, err
	}
	return c, nil
}

type contractDoc struct {
	Tenant            string           `yaml:"tenant"`
	Currency          string           `yaml:"currency"`
	Start             stamp            `yaml:"start"`
	End               stamp            `yaml:"end"`
	MinimumCommitment *commitmentDoc   `yaml:"minimum_commitment"`
	Reservations      []reservationDoc `yaml:"reservations"`
	Burst             []burstThreshDoc `yaml:"burst"`
}

type reservationDoc struct {
	SKU        string `yaml:"sku"`
	GPUs       dec    `yaml:"gpus"`
	Instances  int64  `yaml:"instances"`
	Rate       dec    `yaml:"rate"`
	MonthlyFee dec    `yaml:"monthly_fee"`
	Start      stamp  `yaml:"start"`
	End        stamp  `yaml:"end"`
}

type burstThreshDoc struct {
	SKU            string `yaml:"sku"`
	AboveGPUs      dec    `yaml:"above_gpus"`
	AboveInstances *int64 `yaml:"above_instances"`
}

func (d *contractDoc) contract() *Contract {
	c := &Contract{Tenant: d.Tenant, Currency: d.Currency, Start: d.Start.t, End: d.End.t}
	if d.MinimumCommitment != nil && d.MinimumCommitment.MonthlyAmount.set {
		m := d.MinimumCommitment.MonthlyAmount.v
		c.MinimumMonthly = &m
	}
	for _, r := range d.Reservations {
		res := Reservation{SKU: r.SKU, GPUs: r.GPUs.v, Instances: r.Instances, Start: r.Start.t, End: r.End.t}
		if r.Rate.set {
			v := r.Rate.v
			res.Rate = &v
		}
		if r.MonthlyFee.set {
			v := r.MonthlyFee.v
			res.MonthlyFee = &v
		}
		c.Reservations = append(c.Reservations, res)
	}
	for _, b := range d.Burst {
		bt := BurstThreshold{SKU: b.SKU, AboveInstances: b.AboveInstances}
		if b.AboveGPUs.set {
			v := b.AboveGPUs.v
			bt.AboveGPUs = &v
		}
		c.Burst = append(c.Burst, bt)
	}
	return c
}

// Validate checks the contract on its own (dates in order, one of each
// pair given, no negative amounts); the SKUs are checked against a book
// when the contract is priced.
func (c *Contract) Validate() error {
	var ps problems
	c.validate(&ps)
	return ps.err("contract", c.lines)
}

func (c *Contract) validate(ps *problems) {
	if c.Tenant == "" {
		ps.add("tenant", "required")
	}
	if c.Currency != "" && !IsCurrencyCode(c.Currency) {
		ps.add("currency", "want a three-letter ISO 4217 code such as USD, got %q", c.Currency)
	}
	if !c.Start.IsZero() && !c.End.IsZero() && !c.Start.Before(c.End) {
		ps.add("end", "%s is not after start %s", fmtTime(c.End), fmtTime(c.Start))
	}
	// Contracts built in code skip the parser's bounds; check them here so
	// no value can blow up the arithmetic.
	bounded := func(p path, d *decimal.Decimal) bool {
		if d == nil {
			return true
		}
		if _, err := checkBounds(*d); err != nil {
			ps.add(p, "%v", err)
			return false
		}
		return true
	}
	for i := range c.Reservations {
		r := &c.Reservations[i]
		p := path("reservations").index(i)
		bounded(p.key("gpus"), &r.GPUs)
		bounded(p.key("rate"), r.Rate)
		bounded(p.key("monthly_fee"), r.MonthlyFee)
	}
	for i := range c.Burst {
		bounded(path("burst").index(i).key("above_gpus"), c.Burst[i].AboveGPUs)
	}
	if !bounded(path("minimum_commitment").key("monthly_amount"), c.MinimumMonthly) {
		return
	}
	if c.MinimumMonthly != nil && c.MinimumMonthly.Sign() < 0 {
		ps.add(path("minimum_commitment").key("monthly_amount"), "must not be negative, got %s", c.MinimumMonthly.String())
	}
	for i, r := range c.Reservations {
		p := path("reservations").index(i)
		if r.SKU == "" {
			ps.add(p.key("sku"), "required")
		}
		switch {
		case r.GPUs.Sign() < 0:
			ps.add(p.key("gpus"), "must be positive, got %s", r.GPUs.String())
		case r.Instances < 0:
			ps.add(p.key("instances"), "must be positive, got %d", r.Instances)
		case r.GPUs.Sign() > 0 && r.Instances > 0:
			ps.add(p, "give gpus or instances, not both")
		case r.GPUs.IsZero() && r.Instances == 0:
			ps.add(p, "needs gpus (GPU-equivalents) or instances, and more than zero")
		}
		switch {
		case r.Rate != nil && r.MonthlyFee != nil:
			ps.add(p, "give rate or monthly_fee, not both")
		case r.Rate != nil && r.Rate.Sign() < 0:
			ps.add(p.key("rate"), "negative price %s", r.Rate.String())
		case r.MonthlyFee != nil && r.MonthlyFee.Sign() < 0:
			ps.add(p.key("monthly_fee"), "negative price %s", r.MonthlyFee.String())
		case r.Rate == nil && r.MonthlyFee == nil:
			ps.add(p, "needs rate (per GPU-equivalent hour) or monthly_fee")
		}
		start, end := c.reservationTerm(r)
		switch {
		case start.IsZero():
			ps.add(p.key("start"), "required when the contract has no start")
		case end.IsZero():
			ps.add(p.key("end"), "required when the contract has no end")
		case !start.Before(end):
			ps.add(p.key("end"), "%s is not after start %s", fmtTime(end), fmtTime(start))
		case !c.Start.IsZero() && start.Before(c.Start):
			ps.add(p.key("start"), "%s is before the contract start %s", fmtTime(start), fmtTime(c.Start))
		case !c.End.IsZero() && end.After(c.End):
			ps.add(p.key("end"), "%s is after the contract end %s", fmtTime(end), fmtTime(c.End))
		}
	}
	seen := map[string]bool{}
	for i, b := range c.Burst {
		p := path("burst").index(i)
		switch {
		case b.SKU == "":
			ps.add(p.key("sku"), "required")
		case seen[b.SKU]:
			ps.add(p.key("sku"), "%q has a threshold already", b.SKU)
		}
		seen[b.SKU] = true
		switch {
		case b.AboveGPUs != nil && b.AboveInstances != nil:
			ps.add(p, "give above_gpus or above_instances, not both")
		case b.AboveGPUs == nil && b.AboveInstances == nil:
			ps.add(p, "needs above_gpus or above_instances")
		case b.AboveGPUs != nil && b.AboveGPUs.Sign() < 0:
			ps.add(p.key("above_gpus"), "must not be negative, got %s", b.AboveGPUs.String())
		case b.AboveInstances != nil && *b.AboveInstances < 0:
			ps.add(p.key("above_instances"), "must not be negative, got %d", *b.AboveInstances)
		}
	}
}

// reservationTerm is the reservation's own dates, defaulting to the
// contract term.
func (c *Contract) reservationTerm(r Reservation) (time.Time, time.Time) {
	start, end := r.Start, r.End
	if start.IsZero() {
		start = c.Start
	}
	if end.IsZero() {
		end = c.End
	}
	return start, end
}

// checkBook checks what the contract names against the book it is priced
// with.
func (c *Contract) checkBook(ps *problems, b *Book) {
	if c.Currency != "" && c.Currency != b.currency.Code {
		ps.add("currency", "contract is in %s but the book is in %s", c.Currency, b.currency.Code)
	}
	for i, r := range c.Reservations {
		p := path("reservations").index(i)
		if !b.HasSKU(r.SKU) {
			ps.add(p.key("sku"), "unknown SKU %q (not in book %s)", r.SKU, b.version)
			continue
		}
		if !b.Prices(r.SKU, GPUHours) {
			ps.add(p.key("sku"), "book %s does not price %s for %q, so a reservation of it covers nothing", b.version, GPUHours, r.SKU)
		}
		if r.Instances > 0 {
			if _, ok := b.Weight(r.SKU); !ok {
				ps.add(p.key("instances"), "the weight of %q is unknown: give it in the book or load the book WithWeights", r.SKU)
			}
		}
	}
	for i, t := range c.Burst {
		p := path("burst").index(i)
		if !b.HasSKU(t.SKU) {
			ps.add(p.key("sku"), "unknown SKU %q (not in book %s)", t.SKU, b.version)
			continue
		}
		if t.AboveInstances != nil {
			if _, ok := b.Weight(t.SKU); !ok {
				ps.add(p.key("above_instances"), "the weight of %q is unknown: give it in the book or load the book WithWeights", t.SKU)
			}
		}
	}
}

func fmtTime(t time.Time) string { return t.Format(time.RFC3339) }
