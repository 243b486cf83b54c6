package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// TestInsightsEndToEndFindThePlants runs the collector over a planted,
// simulated fleet (an H100 and an A100 host of 16 GPUs) through the spool
// and shipper into a migrated ClickHouse, and the insights commands over
// what the store reads back:
//
//   - six hours at the collector's 10 s interval (the spike plant at its
//     third hour): the hoarder's 6 GPU-hours are all held-but-idle and
//     cost 12 USD, no other tenant has idle time, and the 7g tenant is
//     right-sized to 1g.10gb and laid out, while every other tenant but
//     the (idle) hoarder keeps its SKU;
//   - three weeks and a day at 10-minute steps, later, with the spike on
//     the fourth Monday at 14:00, rolled up: the anomalies command over
//     that last day finds the spike, in hourly gpu_hours and in daily
//     spend, and nothing else; saved twice, the second run stores and
//     enqueues nothing, and the outbox holds one event per anomaly.
//
// The history is collected at a coarser step because a month at 10 s
// takes minutes; the simulator's random work is drawn per step, so that
// fleet is idler, which the seasonal baseline does not mind (efficiency,
// which does mind, runs on the 10 s part only). The 10 s window is the
// pipeline test's: at other starts the random work can leave a rented MIG
// instance empty for over half an hour between jobs, which the method
// rightly reports as held-but-idle (seen at 2026-11-24 03:49-04:24 for
// globex), and which would not be a plant.
func TestInsightsEndToEndFindThePlants(t *testing.T) {
	dsn := testDSN(t)
	// The 10 s hours are those of internal/insights' pipeline test (same
	// fleet, seed, plants and start); the history starts five weeks later,
	// so that the baseline of its last day (four weeks back) sees none of
	// them.
	effStart := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	effEnd := effStart.Add(6 * time.Hour)
	start := effStart.Add(35 * 24 * time.Hour) // a Monday
	spikeAt := start.Add(21*24*time.Hour + 14*time.Hour)
	histEnd := start.Add(22 * 24 * time.Hour)
	rfc := func(t time.Time) string { return t.Format(time.RFC3339) }
	collect := func(step string, from time.Time, d time.Duration, plants ...string) {
		t.Helper()
		args := append([]string{"--clickhouse", dsn, "collect", "--simulate", "--spool", t.TempDir(), "--hosts", "2", "--gpus", "16",
			"--interval", step, "--start", rfc(from), "--duration", d.String(), "--listen", "",
			"--plant-hoarder", "hoarder", "--plant-oversized-mig", "bigmig"}, plants...)
		if code, _, stderr := gpumeter(t, args...); code != 0 {
			t.Fatalf("collect exit %d\n%s", code, stderr)
		}
	}
	collect("10s", effStart, effEnd.Sub(effStart), "--plant-spike", "spiky", "--plant-spike-at", rfc(effStart.Add(2*time.Hour)))
	collect("10m", start, histEnd.Sub(start), "--plant-spike", "spiky", "--plant-spike-at", rfc(spikeAt))
	if code, _, stderr := gpumeter(t, "--clickhouse", dsn, "rollup", "--from", rfc(effStart), "--to", rfc(histEnd)); code != 0 {
		t.Fatalf("rollup exit %d\n%s", code, stderr)
	}
	book := flatBook(t, dsn, effStart, histEnd)

	// Anomalies: the spike, once, in both series.
	var an struct{ Anomalies []insights.Anomaly }
	day := []string{"--from", rfc(histEnd.Add(-24 * time.Hour)), "--to", rfc(histEnd), "--book", book}
	code, out, stderr := gpumeter(t, append([]string{"--clickhouse", dsn, "insights", "anomalies", "--save", "--json"}, day...)...)
	if code != 0 {
		t.Fatalf("anomalies exit %d\n%s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &an); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got []string
	for _, a := range an.Anomalies {
		t.Logf("anomaly %s: %s %s %s %s, observed %s, expected %s ± %s", a.ID, a.Tenant, a.Meter, rfc(a.Start), a.Direction, a.Observed.StringFixed(2), a.Expected.StringFixed(2), a.Spread.StringFixed(2))
		got = append(got, fmt.Sprintf("%s/%s/%s/%s", a.Tenant, a.Meter, rfc(a.Start), a.Direction))
	}
	want := []string{"spiky/gpu_hours/2026-12-28T14:00:00Z/spike", "spiky/spend/2026-12-28T00:00:00Z/spike"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("anomalies %v, want %v", got, want)
	}
	if an.Anomalies[0].ID != insights.AnomalyID("spiky", "gpu_hours", "", insights.Hourly, spikeAt) {
		t.Errorf("anomaly id %s is not the deterministic one", an.Anomalies[0].ID)
	}
	if !strings.Contains(stderr, "2 anomalies, 2 new") {
		t.Errorf("first save: %s", stderr)
	}
	code, _, stderr = gpumeter(t, append([]string{"--clickhouse", dsn, "insights", "anomalies", "--save"}, day...)...)
	if code != 0 || !strings.Contains(stderr, "2 anomalies, 0 new") {
		t.Errorf("second save: exit %d, %s", code, stderr)
	}
	s := harness.OpenStore(t, dsn)
	evs, err := s.Events(context.Background(), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, ev := range evs {
		if ev.Event.Type == "insight.anomaly" {
			ids = append(ids, ev.Event.ID)
		}
	}
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Errorf("outbox holds insight.anomaly events %v, want one per anomaly", ids)
	}
	stored, err := s.Anomalies(context.Background(), store.AnomalyQuery{From: effStart, To: histEnd})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 2 {
		t.Errorf("%d anomalies stored, want 2", len(stored))
	}

	// Efficiency over the 10 s hours: the hoarder only.
	period := []string{"--from", rfc(effStart), "--to", rfc(effEnd), "--book", book, "--json"}
	var eff insights.EfficiencyReport
	code, out, stderr = gpumeter(t, append([]string{"--clickhouse", dsn, "insights", "efficiency"}, period...)...)
	if code != 0 {
		t.Fatalf("efficiency exit %d\n%s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &eff); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	seen := map[string]bool{}
	for _, r := range eff.Tenants {
		seen[r.Tenant] = true
		switch r.Tenant {
		case "hoarder":
			if r.IdleGPUMicros != r.HeldGPUMicros || r.HeldGPUMicros != int64(6*time.Hour/time.Microsecond) || len(r.IdleSpans) != 1 {
				t.Errorf("hoarder: held %d µs, idle %d µs in %d spans; want 6 GPU-hours all idle in one span", r.HeldGPUMicros, r.IdleGPUMicros, len(r.IdleSpans))
			}
			if r.IdleCost == nil || !r.IdleCost.Amount.Equal(decimal.NewFromInt(12)) || r.IdleCost.Currency != "USD" {
				t.Errorf("hoarder: idle cost %v, want 6 GPU-hours × 2 = 12 USD", r.IdleCost)
			}
		default:
			if r.IdleGPUMicros != 0 {
				t.Errorf("%s: %d µs held-but-idle, want none", r.Tenant, r.IdleGPUMicros)
			}
		}
	}
	for _, want := range []string{"hoarder", "bigmig", "spiky", "acme", "globex", "initech", "umbrella"} {
		if !seen[want] {
			t.Errorf("no efficiency row for %s", want)
		}
	}

	// Right-sizing: the 7g tenant down to 1g.10gb, laid out; others keep.
	var rs insights.RightSizeReport
	code, out, stderr = gpumeter(t, append([]string{"--clickhouse", dsn, "insights", "rightsize"}, period...)...)
	if code != 0 {
		t.Fatalf("rightsize exit %d\n%s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	found := false
	for _, r := range rs.Tenants {
		switch {
		case r.Tenant == "bigmig":
			found = true
			if r.Action != insights.Downsize || r.Current.SKU != "H100-SXM5-80GB/7g.80gb" || r.Recommended.SKU != "H100-SXM5-80GB/1g.10gb" || r.Saving == nil || !r.Saving.Amount.IsPositive() {
				t.Errorf("bigmig: %s %s → %s, saving %v", r.Action, r.Current.SKU, r.Recommended.SKU, r.Saving)
			}
		case r.Tenant == "hoarder": // its idle whole GPU fits a 1g too
		case r.Action != insights.Keep:
			t.Errorf("%s on %s: %s to %s, want keep", r.Tenant, r.Current.SKU, r.Action, r.Recommended.SKU)
		}
	}
	if !found {
		t.Error("no verdict for bigmig")
	}
	placed := false
	if rs.Plan != nil {
		for _, g := range rs.Plan.GPUs {
			for _, in := range g.Instances {
				placed = placed || (in.Tenant == "bigmig" && in.Profile == "1g.10gb")
			}
		}
	}
	if !placed {
		t.Error("the layout has no 1g.10gb for bigmig")
	}

	// The text forms name the findings too.
	code, out, _ = gpumeter(t, "--clickhouse", dsn, "insights", "efficiency", "--from", rfc(effStart), "--to", rfc(effEnd), "--book", book)
	if code != 0 || !strings.Contains(out, "hoarder") || !strings.Contains(out, "12 USD") {
		t.Errorf("efficiency table: exit %d\n%s", code, out)
	}

	// Capacity: both models, 16 GPUs each, fitted over the three weeks.
	var capy struct{ Models []insights.CapacityForecast }
	code, out, stderr = gpumeter(t, "--clickhouse", dsn, "insights", "capacity", "--to", rfc(histEnd), "--weeks", "3", "--json")
	if code != 0 {
		t.Fatalf("capacity exit %d\n%s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &capy); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(capy.Models) != 2 {
		t.Fatalf("capacity of %d models, want the H100 and the A100: %s", len(capy.Models), out)
	}
	for _, m := range capy.Models {
		if !m.CapacityGPUs.Equal(decimal.NewFromInt(16)) || !m.HistoryPeak.IsPositive() || m.HistoryPeak.GreaterThan(decimal.NewFromInt(16)) {
			t.Errorf("%s: capacity %s, history peak %s", m.Model, m.CapacityGPUs, m.HistoryPeak)
		}
	}

	// The API's capacity, from `serve` over the same database, is the
	// CLI's JSON; a tenant key gets none of it.
	tokens := map[string]string{}
	for _, scope := range []string{"admin", "tenant:spiky"} {
		code, token, stderr := gpumeter(t, "--clickhouse", dsn, "keys", "create", "--scope", scope, "--expires", "1h")
		if code != 0 {
			t.Fatalf("keys create %s: exit %d\n%s", scope, code, stderr)
		}
		tokens[scope] = strings.TrimSpace(token)
	}
	addr, _ := startServe(t, "--clickhouse", dsn)
	apiGet := func(token, path string) (int, []byte) { t.Helper(); return harness.GetAuthed(t, addr, token, path) }
	path := "/v1/insights/capacity?to=" + url.QueryEscape(rfc(histEnd)) + "&weeks=3"
	code, body := apiGet(tokens["admin"], path)
	var fromAPI, fromCLI any
	if err := json.Unmarshal(body, &fromAPI); err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", path, code, err, body)
	}
	if err := json.Unmarshal([]byte(out), &fromCLI); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromAPI, fromCLI) {
		t.Errorf("GET %s answers\n%s\nthe CLI printed\n%s", path, body, out)
	}
	if code, body := apiGet(tokens["tenant:spiky"], path); code != http.StatusForbidden {
		t.Errorf("capacity with a tenant key: %d %s, want 403", code, body)
	}
}

// flatBook writes a book pricing every SKU stored in [from, to), and the
// right-sizing targets, at 2 USD per GPU-hour.
func flatBook(t *testing.T, dsn string, from, to time.Time) string {
	t.Helper()
	rows, err := harness.OpenStore(t, dsn).Usage(context.Background(), usage.Query{From: from, To: to, GroupBy: []usage.Dimension{usage.DimSKU}, Source: usage.SourceHourly})
	if err != nil {
		t.Fatal(err)
	}
	skus := map[string]bool{"H100-SXM5-80GB/1g.10gb": true, "H100-SXM5-80GB/1g.20gb": true, "H100-SXM5-80GB/2g.20gb": true}
	for _, r := range rows {
		skus[r.SKU] = true
	}
	names := make([]string, 0, len(skus))
	for s := range skus {
		names = append(names, s)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("version: flat\ncurrency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}\nskus:\n")
	for _, s := range names {
		fmt.Fprintf(&b, "  %q:\n    meters:\n      gpu_hours: {unit_price: \"2\"}\n", s)
	}
	path := filepath.Join(t.TempDir(), "flat.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestInsightsRefuseBadInputWithExit2: every malformed flag is refused
// before any connection (the DSN points nowhere), naming the problem.
func TestInsightsRefuseBadInputWithExit2(t *testing.T) {
	down := []string{"--clickhouse", "clickhouse://127.0.0.1:1/none"}
	p := []string{"--from", "2026-11-01", "--to", "2026-11-02"}
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"no subcommand", []string{"insights"}, "want a subcommand"},
		{"unknown subcommand", []string{"insights", "frob"}, `unknown subcommand "frob"`},
		{"no period", []string{"insights", "efficiency"}, "--from: required"},
		{"bad month", []string{"insights", "rightsize", "--period", "2026-13"}, "--period"},
		{"period and from", []string{"insights", "efficiency", "--period", "2026-11", "--from", "2026-11-01"}, "not both"},
		{"bad time", []string{"insights", "efficiency", "--from", "yesterday", "--to", "2026-11-02"}, "--from"},
		{"no to", []string{"insights", "anomalies", "--from", "2026-11-01"}, "--to: required"},
		{"not a whole hour", []string{"insights", "efficiency", "--from", "2026-11-01T00:30:00Z", "--to", "2026-11-02"}, "not a whole UTC hour"},
		{"backwards", []string{"insights", "efficiency", "--from", "2026-11-02", "--to", "2026-11-01"}, "to must be after from"},
		{"too long", []string{"insights", "efficiency", "--from", "2026-01-01", "--to", "2026-12-01"}, "at most"},
		{"missing book", append([]string{"insights", "efficiency", "--book", "/no/such/book.yaml"}, p...), "--book"},
		{"capacity weeks", []string{"insights", "capacity", "--to", "2026-11-01", "--weeks", "1"}, "weeks 1"},
		{"capacity target", []string{"insights", "capacity", "--to", "2026-11-01", "--target", "1.5"}, "target 1.5"},
		{"capacity target text", []string{"insights", "capacity", "--target", "most"}, "--target"},
		{"capacity until", []string{"insights", "capacity", "--to", "2026-11-02", "--until", "2026-11-01"}, "until"},
		{"capacity to off the hour", []string{"insights", "capacity", "--to", "2026-11-02T10:10:00Z"}, "whole UTC hour"},
		{"spike without its hour", []string{"collect", "--simulate", "--duration", "1h", "--plant-spike", "s"}, "--plant-spike-at"},
		{"spike hour not RFC 3339", []string{"collect", "--simulate", "--duration", "1h", "--plant-spike", "s", "--plant-spike-at", "noon"}, "RFC 3339"},
		{"plants without --simulate", []string{"collect", "--plant-hoarder", "h"}, "only with --simulate"},
		{"no hoarded GPUs", []string{"collect", "--simulate", "--duration", "1h", "--plant-hoarder", "h", "--plant-hoard-gpus", "0"}, "at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := gpumeter(t, append(down, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.msg) {
				t.Fatalf("exit %d, stderr %q; want 2 with %q", code, stderr, tc.msg)
			}
			if stdout != "" {
				t.Errorf("wrote to stdout: %q", stdout)
			}
		})
	}
}
