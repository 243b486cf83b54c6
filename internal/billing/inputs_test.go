package billing

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

func TestInputsHash(t *testing.T) {
	p, err := MonthlyPeriod("2026-11", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	h0 := p.Start
	h1 := p.Start.Add(time.Hour)
	q := decimal.RequireFromString
	base := Inputs{Tenant: "acme", Period: p, BookDigest: "b1", Usage: []pricing.Usage{
		{Hour: h0, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: q("1.5")},
		{Hour: h1, SKU: "H100-SXM5-80GB", Meter: pricing.Meter("energy_kwh"), Quantity: q("0.7")},
	}}
	same := []Inputs{
		// Reordered, split into parts, trailing zeros, a zero row.
		{Tenant: "acme", Period: p, BookDigest: "b1", Usage: []pricing.Usage{
			{Hour: h1, SKU: "H100-SXM5-80GB", Meter: pricing.Meter("energy_kwh"), Quantity: q("0.700")},
			{Hour: h0, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: q("1")},
			{Hour: h0, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: q("0.50")},
			{Hour: h1, SKU: "A100-SXM4-40GB", Meter: pricing.GPUHours, Quantity: q("0")},
		}},
		// Hours given in another zone are the same instants.
		{Tenant: "acme", Period: p, BookDigest: "b1", Usage: []pricing.Usage{
			{Hour: h0.In(time.FixedZone("x", 3600)), SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: q("1.5")},
			{Hour: h1, SKU: "H100-SXM5-80GB", Meter: pricing.Meter("energy_kwh"), Quantity: q("0.7")},
		}},
	}
	want := base.Hash()
	for i, in := range same {
		if got := in.Hash(); got != want {
			t.Errorf("equivalent inputs %d hash %s, want %s", i, got, want)
		}
	}
	dec, err := MonthlyPeriod("2026-12", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	change := map[string]func(*Inputs){
		"tenant":   func(in *Inputs) { in.Tenant = "globex" },
		"period":   func(in *Inputs) { in.Period = dec },
		"book":     func(in *Inputs) { in.BookDigest = "b2" },
		"contract": func(in *Inputs) { in.ContractDigest = "c1" },
		"quantity": func(in *Inputs) { in.Usage[0].Quantity = q("1.500000001") },
		"sku":      func(in *Inputs) { in.Usage[0].SKU = "H100-SXM5-80GB-1g.10gb" },
		"meter":    func(in *Inputs) { in.Usage[1].Meter = pricing.Meter("sm_active_hours") },
		"hour":     func(in *Inputs) { in.Usage[1].Hour = h1.Add(time.Hour) },
		"late row": func(in *Inputs) {
			in.Usage = append(in.Usage, pricing.Usage{Hour: h1, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Quantity: q("0.1")})
		},
		// Field boundaries cannot shift: "ab"+"c" differs from "a"+"bc".
		"boundary": func(in *Inputs) { in.Tenant, in.BookDigest = "acmeb", "1" },
	}
	for name, edit := range change {
		in := base
		in.Usage = append([]pricing.Usage(nil), base.Usage...)
		edit(&in)
		if in.Hash() == want {
			t.Errorf("%s changed, hash did not", name)
		}
	}
}
