package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

// credits grant, list and void through the CLI: a grant takes the
// customer's currency, lists in every form, voids with its reason kept;
// bad input is refused with exit status 2 and nothing stored.
func TestCreditsCLI(t *testing.T) {
	dsn, cfg := invoiceFixture(t)
	g := []string{"--clickhouse", dsn, "--config", cfg}
	list := func() []map[string]any {
		t.Helper()
		code, out, stderr := gpumeter(t, append(g, "credits", "list", "-o", "json")...)
		var gs []map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &gs) != nil {
			t.Fatalf("credits list: exit %d %q %s", code, out, stderr)
		}
		return gs
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"zero amount", []string{"--tenant", "alpha", "--kind", "prepaid", "--amount", "0"}, "--amount 0: must be above zero"},
		{"not a number", []string{"--tenant", "alpha", "--kind", "prepaid", "--amount", "lots"}, `--amount: "lots" is not a decimal number`},
		{"an exponent", []string{"--tenant", "alpha", "--kind", "prepaid", "--amount", "1e-999999999"}, `--amount: "1e-999999999" is not a decimal number`},
		{"another currency", []string{"--tenant", "alpha", "--kind", "prepaid", "--amount", "5", "--currency", "USD"}, `--currency "USD": the customer is billed in EUR`},
		{"expiry before effective", []string{"--tenant", "alpha", "--kind", "promotional", "--amount", "5", "--effective", "2026-11-10", "--expires", "2026-11-01"},
			"--expires 2026-11-01T00:00:00Z: not after --effective"},
		{"unknown customer", []string{"--tenant", "nobody", "--kind", "prepaid", "--amount", "5"}, `--tenant "nobody": not a billing customer`},
		{"unknown SKU class", []string{"--tenant", "alpha", "--kind", "included", "--amount", "5", "--meter", "gpu_hours", "--sku-class", "B9000"}, `--sku-class "B9000"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := gpumeter(t, append(append(g, "credits", "grant"), tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d, stderr %q; want 2 naming %q", code, stderr, tc.want)
			}
		})
	}
	if gs := list(); len(gs) != 0 {
		t.Fatalf("refused grants were stored: %v", gs)
	}

	code, id, stderr := gpumeter(t, append(g, "credits", "grant", "--tenant", "alpha", "--kind", "prepaid", "--amount", "250.50", "--note", "first order")...)
	id = strings.TrimSpace(id)
	if code != 0 || !strings.HasPrefix(id, "cg_") {
		t.Fatalf("credits grant: exit %d %q %s", code, id, stderr)
	}
	if code, _, stderr := gpumeter(t, append(g, "credits", "grant", "--tenant", "beta", "--kind", "included", "--amount", "100",
		"--meter", "gpu_hours", "--sku-class", "H100-SXM5-80GB", "--expires", "2027-01-01")...); code != 0 {
		t.Fatalf("an included grant: %s", stderr)
	}
	gs := list()
	if len(gs) != 2 || gs[0]["id"] != id || gs[0]["currency"] != "EUR" || gs[0]["amount"] != "250.5" || gs[1]["meter"] != "gpu_hours" {
		t.Fatalf("the ledger: %v", gs)
	}

	if code, _, stderr := gpumeter(t, append(g, "credits", "void", id)...); code != 2 || !strings.Contains(stderr, "--reason: required") {
		t.Errorf("a void without a reason: exit %d %s", code, stderr)
	}
	if code, _, stderr := gpumeter(t, append(g, "credits", "void", "cg_000000000000", "--reason", "x")...); code != 2 || !strings.Contains(stderr, "no such grant") {
		t.Errorf("voiding an unknown grant: exit %d %s", code, stderr)
	}
	if code, out, stderr := gpumeter(t, append(g, "credits", "void", id, "--reason", "paid twice")...); code != 0 || !strings.Contains(out, "voided "+id) {
		t.Fatalf("void: exit %d %q %s", code, out, stderr)
	}
	gs = list()
	if len(gs) != 2 || gs[0]["void_reason"] != "paid twice" || gs[0]["voided_at"] == nil || gs[0]["amount"] != "250.5" {
		t.Errorf("the voided grant's record: %v", gs[0])
	}
}

// credits balance burns a customer's grants down against its usage priced
// as its invoices price it, month by month: grants for beta's October (in
// its zone, Europe/Berlin) cover what its October invoice totals (beta
// pays no tax), an included grant of H100 GPU-hours first; the usage
// before and after October (the fixture's 30 September and 1 November
// hours: the first of them, since nothing could cover them, is not even
// priced) is left uncovered, and what October left of the grants expired.
func TestCreditsBalance(t *testing.T) {
	dsn, cfg := invoiceFixture(t)
	g := []string{"--clickhouse", dsn, "--config", cfg}
	for _, args := range [][]string{
		{"credits", "grant", "--tenant", "beta", "--kind", "prepaid", "--amount", "100000", "--effective", "2026-09-30T22:00:00Z",
			"--expires", "2026-10-31T23:00:00Z"},
		{"credits", "grant", "--tenant", "beta", "--kind", "included", "--amount", "2", "--meter", "gpu_hours",
			"--sku-class", "H100-SXM5-80GB", "--effective", "2026-09-30T22:00:00Z", "--expires", "2026-10-31T23:00:00Z"},
		{"invoice", "run", "--period", "2026-10", "--quiet"},
	} {
		if code, _, stderr := gpumeter(t, append(g, args...)...); code != 0 {
			t.Fatalf("%v: %s", args, stderr)
		}
	}
	// The invoice run applied the grants: the included hours before the
	// prepaid money, which pays the rest, so nothing is due.
	var total decimal.Decimal
	for _, inv := range listInvoices(t, dsn, cfg) {
		if inv.Tenant != "beta" {
			continue
		}
		kinds := ""
		for _, l := range inv.Lines {
			if l.GrantID == "" {
				total = total.Add(decimal.New(l.AmountMinor, -2))
			} else {
				kinds += string(l.Kind) + " "
			}
		}
		if inv.TotalMinor != 0 || kinds != "included_credit prepaid_credit " || len(inv.Credits) != 2 {
			t.Errorf("beta's October invoice: total %d, credit lines %q, %d accounts; want 0, included then prepaid, 2", inv.TotalMinor, kinds, len(inv.Credits))
		}
	}
	code, out, stderr := gpumeter(t, append(g, "credits", "balance", "--tenant", "beta", "-o", "json")...)
	var r struct {
		Balances []struct {
			Grant struct {
				Kind string `json:"kind"`
			} `json:"grant"`
			Used, Expired, Remaining, Granted decimal.Decimal
		} `json:"balances"`
		Uncovered decimal.Decimal `json:"uncovered"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || len(r.Balances) != 2 {
		t.Fatalf("credits balance: exit %d %q %s", code, out, stderr)
	}
	prepaid, hours := r.Balances[0], r.Balances[1]
	if prepaid.Grant.Kind != "prepaid" {
		prepaid, hours = hours, prepaid
	}
	// The included hours went first; the money covered the rest of
	// October: with the two hours' share (a few euros) the invoice's total.
	if !hours.Used.Equal(decimal.NewFromInt(2)) || !hours.Remaining.IsZero() || r.Uncovered.Sign() <= 0 ||
		!prepaid.Remaining.IsZero() || !prepaid.Used.Add(prepaid.Expired).Equal(decimal.NewFromInt(100000)) {
		t.Fatalf("balances %+v, uncovered %s", r.Balances, r.Uncovered)
	}
	if share := total.Sub(prepaid.Used); total.IsZero() || share.Sign() <= 0 || share.GreaterThan(decimal.NewFromInt(10)) {
		t.Errorf("prepaid used %s of an October invoice of %s: want all but the two included hours' share", prepaid.Used, total)
	}
	if code, _, stderr := gpumeter(t, append(g, "credits", "balance", "--tenant", "nobody")...); code != 2 || !strings.Contains(stderr, `--tenant "nobody"`) {
		t.Errorf("an unknown customer: exit %d %s", code, stderr)
	}
}
