package billing

import (
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/pricing"
)

var usd = pricing.Currency{Code: "USD", MinorUnits: 2, Rounding: pricing.HalfAwayFromZero}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func priced(lines ...pricing.Line) pricing.Result {
	return pricing.Result{BookVersion: "b1", Currency: usd, Lines: lines}
}

func line(kind pricing.Kind, sku string, amount string) pricing.Line {
	a := dec(amount)
	return pricing.Line{Kind: kind, SKU: sku, Meter: pricing.GPUHours, Quantity: dec("1"), Unit: "gpu_hours",
		Amount: a.Round(pricing.StoragePlaces), AmountRounded: usd.Round(a)}
}

func testDraft(tax string, lines ...pricing.Line) Draft {
	p, _ := MonthlyPeriod("2026-10", time.UTC)
	return Draft{ID: "acme/2026-10/1", Issuer: Issuer{ID: "gc", Name: "GC"},
		Customer: Customer{Tenant: "acme", Name: "Acme", Currency: "USD", TaxRate: dec(tax)},
		Period:   p, Priced: priced(lines...), Now: time.Date(2026, 11, 2, 3, 4, 5, 600, time.UTC)}
}

func TestBuildInvoiceTotals(t *testing.T) {
	cases := []struct {
		name                 string
		tax                  string
		lines                []pricing.Line
		sub, taxMinor, total int64
	}{
		{"no lines, no tax", "0", nil, 0, 0, 0},
		{"rounded lines add up", "0", []pricing.Line{line(pricing.KindOnDemand, "A", "1.005"), line(pricing.KindBurst, "A", "2.004")}, 301, 0, 301},
		// 19 % of 10.05 is 1.9095: one tax line rounded once, to 1.91.
		{"tax on the subtotal", "19", []pricing.Line{line(pricing.KindOnDemand, "A", "10.05")}, 1005, 191, 1196},
		// 8.875 % of 0.10 is 0.008875 → 0.01.
		{"fractional rate", "8.875", []pricing.Line{line(pricing.KindOnDemand, "A", "0.10")}, 10, 1, 11},
		{"a negative subtotal gets negative tax", "10", []pricing.Line{line(pricing.KindOnDemand, "A", "-5.55")}, -555, -56, -611},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inv, err := BuildInvoice(testDraft(c.tax, c.lines...))
			if err != nil {
				t.Fatal(err)
			}
			if inv.SubtotalMinor != c.sub || inv.TaxMinor != c.taxMinor || inv.TotalMinor != c.total {
				t.Fatalf("subtotal %d tax %d total %d, want %d %d %d", inv.SubtotalMinor, inv.TaxMinor, inv.TotalMinor, c.sub, c.taxMinor, c.total)
			}
			for i, l := range inv.Lines {
				if l.No != i+1 {
					t.Errorf("line %d numbered %d", i, l.No)
				}
			}
			if inv.Status != StatusDraft || inv.Number != "" || !inv.CreatedAt.Equal(time.Date(2026, 11, 2, 3, 4, 5, 0, time.UTC)) {
				t.Errorf("status %s number %q created %s", inv.Status, inv.Number, inv.CreatedAt)
			}
		})
	}
}

func TestBuildInvoiceRefusesAnotherCurrency(t *testing.T) {
	d := testDraft("0", line(pricing.KindOnDemand, "A", "1"))
	d.Customer.Currency = "EUR"
	if _, err := BuildInvoice(d); err == nil || !strings.Contains(err.Error(), "currency EUR") {
		t.Fatalf("got %v, want a currency mismatch", err)
	}
}

func TestInvoiceValidateCatchesBadArithmetic(t *testing.T) {
	inv, err := BuildInvoice(testDraft("19", line(pricing.KindOnDemand, "A", "10.05")))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(*Invoice)
		want string
	}{
		{"line amount", func(i *Invoice) { i.Lines[0].AmountMinor++ }, "amount_minor 1006"},
		{"subtotal", func(i *Invoice) { i.SubtotalMinor = 1 }, "subtotal_minor 1"},
		{"total", func(i *Invoice) { i.TotalMinor = 0 }, "total_minor 0"},
		{"numbering", func(i *Invoice) { i.Lines[1].No = 7 }, "lines[1].no 7"},
		{"finalized without number", func(i *Invoice) { i.Status = StatusFinalized }, "number: required"},
		{"void without reason", func(i *Invoice) { i.Status = StatusVoid }, "void_reason: required"},
		{"status", func(i *Invoice) { i.Status = "paid" }, "status \"paid\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := *inv
			bad.Lines = append([]Line(nil), inv.Lines...)
			c.edit(&bad)
			if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

func TestDocumentIsCanonical(t *testing.T) {
	d := testDraft("19", line(pricing.KindOnDemand, "A", "10.05"))
	a, _ := BuildInvoice(d)
	d.Period.Start = d.Period.Start.In(time.FixedZone("X", 3600))
	b, _ := BuildInvoice(d)
	da, err := a.Document()
	if err != nil {
		t.Fatal(err)
	}
	db, _ := b.Document()
	if string(da) != string(db) {
		t.Fatalf("the same invoice encodes two ways:\n%s\n%s", da, db)
	}
	back, err := ParseDocument(da)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := back.Document()
	if string(again) != string(da) {
		t.Fatalf("a document read back encodes differently:\n%s\n%s", da, again)
	}
	if _, err := ParseDocument([]byte("{")); err == nil {
		t.Fatal("a broken document was accepted")
	}
}

func TestCorrectBillsTheDifferenceOfRoundedAmounts(t *testing.T) {
	orig, err := BuildInvoice(testDraft("19", line(pricing.KindOnDemand, "A", "10.05"), line(pricing.KindBurst, "A", "4.50"),
		line(pricing.KindOnDemand, "B", "1.00")))
	if err != nil {
		t.Fatal(err)
	}
	orig.Number = "GC-000001"
	// Re-priced: more A on demand, B gone, a new SKU C; burst unchanged.
	repriced := priced(line(pricing.KindOnDemand, "A", "12.004"), line(pricing.KindBurst, "A", "4.50"), line(pricing.KindOnDemand, "C", "0.333"))
	got := Correct(orig, BilledFor(orig, nil), repriced)
	want := []struct {
		kind pricing.Kind
		sku  string
		cur  int64
	}{{KindAdjustment, "A", 195}, {KindCredit, "B", -100}, {KindAdjustment, "C", 33}}
	if len(got) != len(want) {
		t.Fatalf("got %d lines %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		l := got[i]
		if l.Kind != w.kind || l.SKU != w.sku || l.AmountMinor != w.cur || !l.Amount.Equal(decimal.New(w.cur, -2)) ||
			l.AdjustsInvoice != "GC-000001" || l.AdjustsPeriod != "2026-10" || l.AdjustsKind != pricing.KindOnDemand {
			t.Errorf("line %d: %+v, want %s %s %d", i, l, w.kind, w.sku, w.cur)
		}
		if !strings.Contains(l.Description, "2026-10 (invoice GC-000001)") {
			t.Errorf("line %d description %q names neither period nor invoice", i, l.Description)
		}
	}

	// Once those corrections are on a later invoice, the same re-pricing
	// finds nothing more to bill.
	later := &Invoice{Number: "GC-000002", Lines: got}
	if again := Correct(orig, BilledFor(orig, []*Invoice{later}), repriced); len(again) != 0 {
		t.Fatalf("corrected twice: %+v", again)
	}
}

func TestPreviousMonth(t *testing.T) {
	for now, want := range map[time.Time]string{
		time.Date(2026, 12, 1, 0, 30, 0, 0, time.UTC):                     "2026-11",
		time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC):                       "2026-12",
		time.Date(2026, 3, 1, 0, 30, 0, 0, time.FixedZone("UTC+2", 7200)): "2026-01",
	} {
		if got := PreviousMonth(now); got != want {
			t.Errorf("PreviousMonth(%s) = %s, want %s", now, got, want)
		}
	}
}

func TestEnergySource(t *testing.T) {
	for sku, want := range map[string]string{
		"H100-SXM5-80GB":          "measured",
		"A100-SXM4-40GB":          "measured",
		"H100-SXM5-80GB/3g.40gb":  "split_by_gpm",
		"H200-SXM5-141GB/1g.18gb": "split_by_gpm",
		"A100-SXM4-40GB/3g.20gb":  "split_by_slices",
	} {
		if got := EnergySource(sku); string(got) != want {
			t.Errorf("EnergySource(%s) = %s, want %s", sku, got, want)
		}
	}
}

func TestLedgerRefusesToChangeAFinalizedInvoice(t *testing.T) {
	draft, err := BuildInvoice(testDraft("0", line(pricing.KindOnDemand, "A", "10.00")))
	if err != nil {
		t.Fatal(err)
	}
	final := *draft
	at := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	final.Status, final.Number, final.Seq, final.FinalizedAt = StatusFinalized, "GC-000001", 1, &at
	st := &ledger{byID: map[string]*StoredInvoice{}, byTenant: map[string][]*StoredInvoice{}, seq: map[string]uint64{}}
	st.put(StoredInvoice{Invoice: &final, Revision: 2})

	changed := final
	changed.Lines = append([]Line(nil), final.Lines...)
	changed.Lines[0].AmountMinor++
	void := final
	void.Status, void.VoidReason = StatusVoid, "wrong customer"
	voidOther := void
	voidOther.Number = "GC-000002"
	cases := []struct {
		name string
		s    StoredInvoice
		want string // "" when allowed
	}{
		{"a new draft revision", StoredInvoice{Invoice: draft, Revision: 3}, "is finalized"},
		{"finalized again with other lines", StoredInvoice{Invoice: &changed, Revision: 3}, "is finalized"},
		{"the same revision", StoredInvoice{Invoice: &void, Revision: 2}, "not above"},
		{"void under another number", StoredInvoice{Invoice: &voidOther, Revision: 3}, "keeps its number"},
		{"void", StoredInvoice{Invoice: &void, Revision: 3}, ""},
	}
	for _, c := range cases {
		err := st.checkWrite(c.s)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	st.put(StoredInvoice{Invoice: &void, Revision: 3})
	if err := st.checkWrite(StoredInvoice{Invoice: &final, Revision: 4}); err == nil || !strings.Contains(err.Error(), "is void") {
		t.Errorf("un-voiding: %v", err)
	}
	// A new invoice id is always allowed.
	other := *draft
	other.ID = "acme/2026-10/2"
	if err := st.checkWrite(StoredInvoice{Invoice: &other, Revision: 1}); err != nil {
		t.Errorf("a new invoice: %v", err)
	}
}
