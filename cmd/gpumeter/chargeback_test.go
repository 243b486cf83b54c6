package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/chargeback"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/tests/harness"
)

const chargebackCLIBook = `version: internal-1
currency: {code: EUR, rounding: {minor_units: 2, mode: half_even}}
skus:
  A100-SXM4-80GB: {meters: {gpu_hours: {unit_price: "0.85"}, energy_kwh: {unit_price: "0.30"}}}
  A100-SXM4-80GB/3g.40gb: {meters: {gpu_hours: {unit_price: "0.91"}}}
`

// A fleet of one whole A100 (alpha, research) and one A100 in MIG mode
// whose 3g.40gb instance beta (ops) holds and whose other 4/7 nobody
// does, over two days; charged back in every idle mode from the real
// ClickHouse.
func TestChargebackAddsUpInEveryIdleMode(t *testing.T) {
	dsn := testDSN(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "internal.yaml"), []byte(chargebackCLIBook), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gpumeter.yaml")
	if err := os.WriteFile(cfg, []byte("chargeback:\n  book: internal.yaml\n  weights: {research: 1, ops: 3}\n  carbon: {g_co2e_per_kwh: 400}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := harness.OpenStore(t, dsn)
	mig := uint64(3_600_000_000) * 3 / 7
	var samples []collectors.Sample
	add := func(gpu, mig, sku, tenant, dept string, h time.Time, us, mj uint64) {
		x := collectors.Sample{Host: "h", GPUUUID: gpu, MIGUUID: mig, GPUModel: "A100-SXM4-80GB", SKU: sku, Tenant: tenant, Department: dept,
			Start: h, End: h.Add(time.Hour), Values: meter.Values{GPUMicroseconds: us, EnergyMillijoules: mj}}
		if tenant != "" {
			x.Workload = "w"
		}
		if mig != "" {
			x.MIGProfile = strings.TrimPrefix(sku, "A100-SXM4-80GB/")
		}
		x.ID = collectors.SampleID(x.Host, x.GPUUUID+x.MIGUUID, x.Tenant, x.Workload, x.Start)
		samples = append(samples, x)
	}
	for h := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC); h.Before(time.Date(2026, 10, 3, 0, 0, 0, 0, time.UTC)); h = h.Add(time.Hour) {
		add("GPU-0", "", "A100-SXM4-80GB", "alpha", "research", h, 3_600_000_000, 1_000_000_000)
		add("GPU-1", "MIG-1", "A100-SXM4-80GB/3g.40gb", "beta", "ops", h, mig, 0)
		add("GPU-1", "MIG-idle", "A100-SXM4-80GB/3g.40gb", "", "", h, 3_600_000_000-mig, 0)
	}
	for i := range samples {
		if samples[i].Tenant == "alpha" {
			samples[i].SMActiveMicroseconds = samples[i].GPUMicroseconds / 2 // busy; beta's instance shows no SM activity
		}
	}
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := gpumeter(t, "--clickhouse", dsn, "rollup", "--scheduled"); code != 0 {
		t.Fatalf("rollup: %s", stderr)
	}
	// What the fleet costs at the rate card, worked out by hand: alpha
	// 48 GPU-h x 0.85 = 40.80 and 48 x 1 MJ = 13.333 kWh x 0.30 = 4.00;
	// beta 48 x 3/7 GPU-h x 0.91; idle 48 x 4/7 GPU-h x 0.91.
	h := decimal.NewFromInt(48)
	rate := decimal.RequireFromString("0.91")
	betaExact := h.Mul(decimal.NewFromUint64(mig)).Div(decimal.NewFromInt(3_600_000_000)).Mul(rate)
	idleExact := h.Mul(decimal.NewFromUint64(3_600_000_000 - mig)).Div(decimal.NewFromInt(3_600_000_000)).Mul(rate)
	fleet := decimal.RequireFromString("44.80").Add(betaExact).Add(idleExact).RoundBank(2)

	for _, mode := range []string{"own_row", "by_use", "by_weight", "evenly"} {
		t.Run(mode, func(t *testing.T) {
			code, out, stderr := gpumeter(t, "--clickhouse", dsn, "--config", cfg, "chargeback", "--period", "2026-10", "--format", "json", "--idle", mode)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var rep chargeback.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !rep.Fleet.Cost.Equal(fleet) {
				t.Fatalf("fleet cost %s, want %s", rep.Fleet.Cost, fleet)
			}
			sum := decimal.Zero
			for _, d := range rep.Departments {
				dsum := decimal.Zero
				for _, tn := range d.Tenants {
					dsum = dsum.Add(tn.Cost)
				}
				if !dsum.Equal(d.Cost) {
					t.Errorf("department %s: tenants add up to %s, the department to %s", d.Name, dsum, d.Cost)
				}
				sum = sum.Add(d.Cost)
			}
			if rep.Idle != nil {
				sum = sum.Add(rep.Idle.Cost)
			}
			if !sum.Equal(fleet) {
				t.Errorf("rows add up to %s, the fleet costs %s", sum, fleet)
			}
			if (mode == "own_row") != (rep.Idle != nil) {
				t.Errorf("idle row %v in mode %s", rep.Idle, mode)
			}
		})
	}
	for _, f := range []string{"csv", "html", "pdf"} {
		code, out, stderr := gpumeter(t, "--clickhouse", dsn, "--config", cfg, "chargeback", "--period", "2026-10", "--format", f)
		if code != 0 || len(out) == 0 {
			t.Fatalf("%s: exit %d: %s", f, code, stderr)
		}
		if f != "pdf" && !strings.Contains(out, fleet.StringFixed(2)) {
			t.Errorf("%s does not show the fleet cost %s", f, fleet.StringFixed(2))
		}
	}
	// The efficiency section: beta's instance was held two days without SM
	// activity (held-but-idle all along), alpha was busy.
	code, out, stderr := gpumeter(t, "--clickhouse", dsn, "--config", cfg, "chargeback", "--period", "2026-10", "--format", "json", "--efficiency")
	if code != 0 {
		t.Fatalf("efficiency: exit %d: %s", code, stderr)
	}
	var effRep chargeback.Report
	if err := json.Unmarshal([]byte(out), &effRep); err != nil {
		t.Fatal(err)
	}
	betaHeld := int64(48 * mig)
	want := []chargeback.EfficiencyRow{
		{Department: "ops", HeldGPUMicros: betaHeld, MeasuredGPUMicros: betaHeld, IdleGPUMicros: betaHeld},
		{Department: "ops", Tenant: "beta", HeldGPUMicros: betaHeld, MeasuredGPUMicros: betaHeld, IdleGPUMicros: betaHeld},
		{Department: "research", HeldGPUMicros: 48 * 3_600_000_000, MeasuredGPUMicros: 48 * 3_600_000_000, SMActiveMicros: 24 * 3_600_000_000},
		{Department: "research", Tenant: "alpha", HeldGPUMicros: 48 * 3_600_000_000, MeasuredGPUMicros: 48 * 3_600_000_000, SMActiveMicros: 24 * 3_600_000_000},
	}
	if len(effRep.Efficiency) != len(want) {
		t.Fatalf("efficiency rows %+v, want %+v", effRep.Efficiency, want)
	}
	for i := range want {
		if effRep.Efficiency[i] != want[i] {
			t.Errorf("efficiency row %d: %+v, want %+v", i, effRep.Efficiency[i], want[i])
		}
	}
	if !effRep.Fleet.Cost.Equal(fleet) {
		t.Errorf("the efficiency section changed the fleet cost: %s", effRep.Fleet.Cost)
	}
	code, out, _ = gpumeter(t, "--clickhouse", dsn, "--config", cfg, "chargeback", "--period", "2026-10", "--format", "html", "--efficiency")
	if code != 0 || !strings.Contains(out, "Efficiency: held-but-idle GPUs") || !strings.Contains(out, `<td class="num idle-hours">20.571</td>`) || !strings.Contains(out, "50.0 %") {
		t.Errorf("html efficiency section: exit %d\n%s", code, out)
	}
	code, out, _ = gpumeter(t, "--clickhouse", dsn, "--config", cfg, "chargeback", "--period", "2026-10", "--format", "html")
	if code != 0 || strings.Contains(out, "held-but-idle GPUs") {
		t.Errorf("without --efficiency the section is absent")
	}
	if code, out, _ = gpumeter(t, "--clickhouse", dsn, "--config", cfg, "chargeback", "--period", "2026-10", "--format", "pdf", "--efficiency"); code != 0 || !strings.HasPrefix(out, "%PDF") {
		t.Errorf("pdf with the efficiency section: exit %d", code)
	}
	for _, bad := range [][]string{
		{"chargeback"},
		{"chargeback", "--period", "2026-13"},
		{"chargeback", "--period", "2026-10", "--format", "xls"},
		{"chargeback", "--period", "2026-10", "--idle", "share"},
	} {
		if code, _, _ := gpumeter(t, append([]string{"--clickhouse", dsn, "--config", cfg}, bad...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
	// Carbon per hour from a CSV: alpha's 1 MJ an hour (0.2778 kWh) at
	// 100 g in the first hour and 400 g in the other 47 is
	// 1e9 mJ x 18,900 g/kWh = 5.25 kg.
	csv := "hour,g_co2e_per_kwh\n2026-10-01T00:00:00Z,100\n"
	for h := time.Date(2026, 10, 1, 1, 0, 0, 0, time.UTC); h.Before(time.Date(2026, 10, 3, 0, 0, 0, 0, time.UTC)); h = h.Add(time.Hour) {
		csv += h.Format(time.RFC3339) + ",400\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "carbon.csv"), []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	carbonCfg := filepath.Join(dir, "carbon.yaml")
	if err := os.WriteFile(carbonCfg, []byte("chargeback:\n  book: internal.yaml\n  carbon: {hourly_csv: carbon.csv}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = gpumeter(t, "--clickhouse", dsn, "--config", carbonCfg, "chargeback", "--period", "2026-10", "--format", "json")
	if code != 0 {
		t.Fatalf("carbon: exit %d %s", code, stderr)
	}
	var rep chargeback.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if kg := rep.Fleet.Energy.KgCO2e; !kg.Valid || kg.Decimal.Sub(decimal.RequireFromString("5.25")).Abs().GreaterThan(decimal.RequireFromString("0.000001")) {
		t.Errorf("fleet kgCO2e %v, want 5.25", kg)
	}
	both := filepath.Join(dir, "both.yaml")
	if err := os.WriteFile(both, []byte("chargeback:\n  book: internal.yaml\n  carbon: {g_co2e_per_kwh: 400, hourly_csv: carbon.csv}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := gpumeter(t, "--config", both, "chargeback", "--period", "2026-10"); code != 2 || !strings.Contains(stderr, "not both") {
		t.Errorf("a fixed and an hourly intensity: exit %d %q", code, stderr)
	}
	if code, _, stderr := gpumeter(t, "--clickhouse", dsn, "chargeback", "--period", "2026-10"); code != 2 || !strings.Contains(stderr, "chargeback.book") {
		t.Errorf("without a rate card: exit %d %q", code, stderr)
	}
}
