package pricing

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// Book is a validated, immutable price book. Build one with ParseBook or
// LoadBook; every Book in hand has passed validation, so pricing does not
// re-check it for each tenant.
type Book struct {
	version     string
	description string
	currency    Currency
	minMonthly  decimal.Decimal
	hasMin      bool
	index       map[string]int // SKU → entries index
	entries     []skuEntry     // sorted by SKU
	slots       int            // accumulator slots: one per (SKU, meter, price version)
	lines       lineIndex      // where things are in the file, for later errors
}

type skuEntry struct {
	name        string
	description string
	weight      fraction               // GPU-equivalents per instance; set when known
	meters      [numMeters]*meterPrice // nil: the book does not price this meter
}

// meterPrice is one meter's price over time: versions[0] applies from the
// beginning of time, each later one from its own instant.
type meterPrice struct {
	versions []priceVersion
	slot     int // first accumulator slot; version v uses slot+v
}

type priceVersion struct {
	from  time.Time // zero for versions[0]
	fromS int64     // from in whole Unix seconds, rounded up, for the hot path
	sched schedule
	burst burstRule
}

// burstRule prices gpu_hours above a reservation or burst threshold.
type burstRule struct {
	multiplier decimal.Decimal // of the on-demand price; 1 when no rule is given
	unitPrice  decimal.Decimal
	hasPrice   bool // a price beside on-demand instead of a multiplier
}

// versionAt returns the index of the version in effect at t (Unix
// seconds).
func (mp *meterPrice) versionAt(t int64) int {
	for v := len(mp.versions) - 1; v > 0; v-- {
		if t >= mp.versions[v].fromS {
			return v
		}
	}
	return 0
}

// ceilUnix is t in Unix seconds rounded up: for a whole second s,
// s >= ceilUnix(t) exactly when s is not before t.
func ceilUnix(t time.Time) int64 {
	if t.Nanosecond() > 0 {
		return t.Unix() + 1
	}
	return t.Unix()
}

// Version is the book's version label, kept on every invoice priced with it.
func (b *Book) Version() string { return b.version }

// Description is the book's free-text description.
func (b *Book) Description() string { return b.description }

// Currency is the book's currency and rounding rule.
func (b *Book) Currency() Currency { return b.currency }

// SKUs lists the book's SKUs in sorted order.
func (b *Book) SKUs() []string {
	out := make([]string, len(b.entries))
	for i, e := range b.entries {
		out[i] = e.name
	}
	return out
}

// HasSKU reports whether the book lists sku.
func (b *Book) HasSKU(sku string) bool {
	_, ok := b.index[sku]
	return ok
}

// Prices reports whether the book prices meter for sku.
func (b *Book) Prices(sku string, m Meter) bool {
	i, ok := b.index[sku]
	if !ok {
		return false
	}
	mi, ok := m.index()
	return ok && b.entries[i].meters[mi] != nil
}

// Weight returns the GPU-equivalents of one instance of sku (1 for a whole
// GPU, 3/7 for a 3g MIG instance), when the book or WithWeights gave one.
// Weights convert counts of instances (reservations, quotas) into
// GPU-equivalents; they are never applied to gpu_hours, which the collector
// already reports in GPU-equivalents.
func (b *Book) Weight(sku string) (decimal.Decimal, bool) {
	i, ok := b.index[sku]
	if !ok || !b.entries[i].weight.set {
		return decimal.Decimal{}, false
	}
	return b.entries[i].weight.v, true
}

// instancesToGPUs converts a count of instances of sku to GPU-equivalents,
// multiplying before dividing so that whole results come out exact.
func (b *Book) instancesToGPUs(sku string, instances int64) (decimal.Decimal, bool) {
	i, ok := b.index[sku]
	if !ok || !b.entries[i].weight.set {
		return decimal.Decimal{}, false
	}
	w := b.entries[i].weight
	return decimal.NewFromInt(instances).Mul(w.num).DivRound(w.den, maxPlaces), true
}

// MinimumMonthly returns the book's default minimum commitment per calendar
// month, which a contract may override.
func (b *Book) MinimumMonthly() (decimal.Decimal, bool) { return b.minMonthly, b.hasMin }

// CheckWeights compares the book's weights with the fleet's weight table
// (the MIG profile table). A SKU the table does not know keeps the book's
// weight; a disagreement is an error naming the place in the book. Weights
// agree when equal at StoragePlaces decimal places, so "3/7" and
// "0.428571429" both match a table's 3/7.
func (b *Book) CheckWeights(weight func(sku string) (decimal.Decimal, bool)) error {
	var ps problems
	for _, e := range b.entries {
		w, ok := weight(e.name)
		if !ok {
			continue
		}
		p := path("skus").key(e.name).key("weight")
		if w.Sign() <= 0 {
			ps.add(p, "the weight table gives %s, which is not positive", w.String())
			continue
		}
		if e.weight.set && !w.Round(StoragePlaces).Equal(e.weight.v.Round(StoragePlaces)) {
			ps.add(p, "book says %s GPU-equivalents but the weight table says %s", e.weight.v.String(), w.String())
		}
	}
	return ps.err("book", b.lines)
}

// CheckSKUs runs check on every SKU of the book and reports each refusal
// at its place (the fleet's check is gpucatalog.CheckSKU, wired in by
// WithMIGTable).
func (b *Book) CheckSKUs(check func(sku string) error) error {
	var ps problems
	for _, e := range b.entries {
		if err := check(e.name); err != nil {
			ps.add(path("skus").key(e.name), "%s", err.Error())
		}
	}
	return ps.err("book", b.lines)
}

// WithWeights checks the book against the weight table (see CheckWeights)
// and returns a copy in which SKUs without a weight take the table's. The
// receiver is not changed, so books can be shared between goroutines.
func (b *Book) WithWeights(weight func(sku string) (decimal.Decimal, bool)) (*Book, error) {
	if err := b.CheckWeights(weight); err != nil {
		return nil, err
	}
	nb := *b
	nb.entries = append([]skuEntry(nil), b.entries...)
	for i := range nb.entries {
		e := &nb.entries[i]
		if e.weight.set {
			continue
		}
		if w, ok := weight(e.name); ok {
			e.weight = fraction{v: w, num: w, den: decimal.NewFromInt(1), set: true}
		}
	}
	return &nb, nil
}

// LoadBook reads and validates a YAML price book.
func LoadBook(r io.Reader) (*Book, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read book: %w", err)
	}
	return ParseBook(data)
}

// ParseBook parses and validates a YAML price book (format in
// docs/pricing.md). Validation errors are a *ValidationError naming each
// problem's path and line.
func ParseBook(data []byte) (*Book, error) {
	var doc bookDoc
	lines, err := decodeYAML(data, &doc)
	if err != nil {
		return nil, fault.Validationf("book: %w", err)
	}
	return doc.compile(lines)
}

// The YAML shape of a book. Fields are exported for the YAML decoder only.
type bookDoc struct {
	Version           string            `yaml:"version"`
	Description       string            `yaml:"description"`
	Currency          *currencyDoc      `yaml:"currency"`
	MinimumCommitment *commitmentDoc    `yaml:"minimum_commitment"`
	SKUs              map[string]skuDoc `yaml:"skus"`
}

type currencyDoc struct {
	Code     string       `yaml:"code"`
	Rounding *roundingDoc `yaml:"rounding"`
}

type roundingDoc struct {
	MinorUnits *int32 `yaml:"minor_units"`
	Mode       string `yaml:"mode"`
}

type commitmentDoc struct {
	MonthlyAmount dec `yaml:"monthly_amount"`
}

type skuDoc struct {
	Description string              `yaml:"description"`
	Weight      fraction            `yaml:"weight"`
	Meters      map[string]meterDoc `yaml:"meters"`
}

type priceDoc struct {
	UnitPrice dec       `yaml:"unit_price"`
	Mode      string    `yaml:"mode"`
	Tiers     []tierDoc `yaml:"tiers"`
	Burst     *burstDoc `yaml:"burst"`
}

type meterDoc struct {
	priceDoc `yaml:",inline"`
	Changes  []changeDoc `yaml:"changes"`
}

type changeDoc struct {
	From     stamp `yaml:"from"`
	priceDoc `yaml:",inline"`
}

type tierDoc struct {
	UpTo      upTo `yaml:"up_to"`
	UnitPrice dec  `yaml:"unit_price"`
	FlatFee   dec  `yaml:"flat_fee"`
}

type burstDoc struct {
	Multiplier dec `yaml:"multiplier"`
	UnitPrice  dec `yaml:"unit_price"`
}

// compile validates the document and builds the Book in one walk, so the
// rules live in one place.
func (d *bookDoc) compile(lines lineIndex) (*Book, error) {
	var ps problems
	b := &Book{version: d.Version, description: d.Description, index: map[string]int{}, lines: lines}
	if d.Version == "" {
		ps.add("version", "required: invoices record the book version they were priced with")
	}
	switch {
	case d.Currency == nil:
		ps.add("currency", "required")
	case d.Currency.Rounding == nil:
		ps.add(path("currency").key("rounding"), "required: a currency needs a rounding rule (minor_units, mode)")
	case d.Currency.Rounding.MinorUnits == nil:
		ps.add(path("currency").key("rounding").key("minor_units"), "required: the currency's decimal places, e.g. 2 for USD")
	default:
		b.currency = Currency{Code: d.Currency.Code, MinorUnits: *d.Currency.Rounding.MinorUnits, Rounding: RoundingMode(d.Currency.Rounding.Mode)}
		if b.currency.Rounding == "" {
			b.currency.Rounding = HalfAwayFromZero
		}
		b.currency.validate(&ps, "currency")
	}
	if d.MinimumCommitment != nil {
		p := path("minimum_commitment").key("monthly_amount")
		switch m := d.MinimumCommitment.MonthlyAmount; {
		case !m.set:
			ps.add(p, "required")
		case m.v.Sign() < 0:
			ps.add(p, "must not be negative, got %s", m.v.String())
		default:
			b.minMonthly, b.hasMin = m.v, true
		}
	}
	if len(d.SKUs) == 0 {
		ps.add("skus", "at least one SKU is required")
	}
	names := slices.Sorted(maps.Keys(d.SKUs))
	for _, name := range names {
		e := compileSKU(&ps, name, d.SKUs[name], &b.slots)
		b.index[name] = len(b.entries)
		b.entries = append(b.entries, e)
	}
	if err := ps.err("book", lines); err != nil {
		return nil, err
	}
	return b, nil
}

func compileSKU(ps *problems, name string, d skuDoc, slots *int) skuEntry {
	p := path("skus").key(name)
	e := skuEntry{name: name, description: d.Description}
	if name == "" {
		ps.add(p, "SKU name must not be empty")
	}
	if d.Weight.set {
		if d.Weight.v.Sign() <= 0 {
			ps.add(p.key("weight"), "must be positive (GPU-equivalents per instance), got %s", d.Weight.v.String())
		}
		e.weight = d.Weight
	}
	meterNames := slices.Sorted(maps.Keys(d.Meters))
	for _, mn := range meterNames {
		mp := p.key("meters").key(mn)
		m := Meter(mn)
		mi, ok := m.index()
		if !ok {
			ps.add(mp, "unknown meter %q (known: %s)", mn, meterList())
			continue
		}
		e.meters[mi] = compileMeter(ps, mp, m, d.Meters[mn], slots)
	}
	return e
}

func compileMeter(ps *problems, p path, m Meter, d meterDoc, slots *int) *meterPrice {
	mp := &meterPrice{slot: *slots}
	mp.versions = append(mp.versions, compileVersion(ps, p, m, d.priceDoc))
	for i, c := range d.Changes {
		cp := p.key("changes").index(i)
		v := compileVersion(ps, cp, m, c.priceDoc)
		v.from, v.fromS = c.From.t, ceilUnix(c.From.t)
		switch {
		case !c.From.set:
			ps.add(cp.key("from"), "required: the instant the new price takes effect")
		case i > 0 && d.Changes[i-1].From.set && !c.From.t.After(d.Changes[i-1].From.t):
			ps.add(cp.key("from"), "%s is not after the previous change's %s: changes must be in time order",
				c.From.t.Format(time.RFC3339), d.Changes[i-1].From.t.Format(time.RFC3339))
		}
		mp.versions = append(mp.versions, v)
	}
	*slots += len(mp.versions)
	return mp
}

func compileVersion(ps *problems, p path, m Meter, d priceDoc) priceVersion {
	v := priceVersion{burst: burstRule{multiplier: decimal.NewFromInt(1)}}
	switch {
	case d.UnitPrice.set && len(d.Tiers) > 0:
		ps.add(p, "give unit_price or tiers, not both")
	case d.UnitPrice.set:
		if d.Mode != "" {
			ps.add(p.key("mode"), "mode applies to tiers only")
		}
		if d.UnitPrice.v.Sign() < 0 {
			ps.add(p.key("unit_price"), "negative price %s", d.UnitPrice.v.String())
		}
		v.sched = schedule{mode: Graduated, tiers: []tier{{open: true, unitPrice: d.UnitPrice.v, flatFee: decimal.Zero}}}
	case len(d.Tiers) > 0:
		v.sched = compileTiers(ps, p, d)
	default:
		ps.add(p, "needs unit_price or tiers")
	}
	if d.Burst != nil {
		bp := p.key("burst")
		if m != GPUHours {
			ps.add(bp, "burst applies to %s only (usage above a reservation or threshold)", GPUHours)
		}
		switch bm, bu := d.Burst.Multiplier, d.Burst.UnitPrice; {
		case bm.set && bu.set:
			ps.add(bp, "give multiplier or unit_price, not both")
		case bm.set:
			if bm.v.Sign() < 0 {
				ps.add(bp.key("multiplier"), "must not be negative, got %s", bm.v.String())
			}
			v.burst.multiplier = bm.v
		case bu.set:
			if bu.v.Sign() < 0 {
				ps.add(bp.key("unit_price"), "negative price %s", bu.v.String())
			}
			v.burst = burstRule{unitPrice: bu.v, hasPrice: true}
		default:
			ps.add(bp, "needs multiplier or unit_price")
		}
	}
	return v
}

func compileTiers(ps *problems, p path, d priceDoc) schedule {
	s := schedule{mode: Mode(d.Mode)}
	switch s.mode {
	case Graduated, Volume:
	case "":
		ps.add(p.key("mode"), "required with tiers: %s or %s", Graduated, Volume)
	default:
		ps.add(p.key("mode"), "unknown mode %q (want %s or %s)", d.Mode, Graduated, Volume)
	}
	last := len(d.Tiers) - 1
	for i, td := range d.Tiers {
		tp := p.key("tiers").index(i)
		t := tier{open: !td.UpTo.set || td.UpTo.open, upTo: td.UpTo.v, unitPrice: decimal.Zero, flatFee: decimal.Zero}
		if !td.UnitPrice.set && !td.FlatFee.set {
			ps.add(tp, "needs unit_price or flat_fee")
		}
		if td.UnitPrice.set {
			t.unitPrice = td.UnitPrice.v
			if t.unitPrice.Sign() < 0 {
				ps.add(tp.key("unit_price"), "negative price %s", t.unitPrice.String())
			}
		}
		if td.FlatFee.set {
			t.flatFee = td.FlatFee.v
			if t.flatFee.Sign() < 0 {
				ps.add(tp.key("flat_fee"), "negative flat fee %s", t.flatFee.String())
			}
		}
		switch {
		case i == last && !t.open:
			ps.add(tp.key("up_to"), "the last tier must be open (omit up_to or write inf) so every quantity has a price")
		case i < last && t.open:
			ps.add(tp.key("up_to"), "required: only the last tier is open")
		case i < last && i == 0 && t.upTo.Sign() <= 0:
			ps.add(tp.key("up_to"), "must be positive, got %s", t.upTo.String())
		case i < last && i > 0 && !s.tiers[i-1].open && t.upTo.Cmp(s.tiers[i-1].upTo) <= 0:
			ps.add(tp.key("up_to"), "%s is not above the previous tier's up_to %s: tiers must be in increasing order and must not overlap",
				t.upTo.String(), s.tiers[i-1].upTo.String())
		}
		s.tiers = append(s.tiers, t)
	}
	return s
}
