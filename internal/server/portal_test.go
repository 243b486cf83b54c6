package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/browsertest"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// The portal in a real browser: signed in with a portal token, it draws
// the month's chart and shows the month-to-date cost the API gives.
func TestPortalInHeadlessChromium(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	_, body, _ := f.get(t, f.tokens["portal"], "/v1/cost?month=2026-10")
	var cost struct {
		SoFar string `json:"so_far"`
		Trend *struct {
			Spend struct {
				Total string `json:"total"`
			} `json:"spend"`
		} `json:"trend"`
	}
	if err := json.Unmarshal(body, &cost); err != nil || cost.SoFar == "" {
		t.Fatalf("cost: %v %s", err, body)
	}
	url := f.srv.URL + "/portal/#token=" + f.tokens["portal"] + "&month=2026-10"
	dom := browsertest.Headless(t, url, "--dump-dom")
	if !strings.Contains(dom, `data-ready="1"`) {
		t.Fatalf("the portal never finished loading:\n%.3000s", dom)
	}
	m := regexp.MustCompile(`id="mtd-cost"[^>]*data-amount="([^"]+)"`).FindStringSubmatch(dom)
	if m == nil {
		m = regexp.MustCompile(`data-amount="([^"]+)"[^>]*id="mtd-cost"`).FindStringSubmatch(dom)
	}
	if m == nil || m[1] != cost.SoFar {
		t.Errorf("the portal shows month to date %v, the API %s", m, cost.SoFar)
	}
	// 2-4 October, two SKUs: six bars.
	if bars := strings.Count(dom, "data-sku="); bars != 6 {
		t.Errorf("%d bars in the chart, want 6 (3 days x 2 SKUs)", bars)
	}
	// The efficiency section shows the API's held-but-idle time (the
	// fixture's hourly samples have no SM activity: all of it), and the
	// held-vs-used chart a pair of bars per day.
	_, body, _ = f.get(t, f.tokens["portal"], "/v1/insights/efficiency?from=2026-10-01&to=2026-11-01")
	var eff struct {
		Tenants []struct {
			Tenant string `json:"tenant"`
			Idle   int64  `json:"idle_gpu_microseconds"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal(body, &eff); err != nil || len(eff.Tenants) != 1 || eff.Tenants[0].Tenant != "acme" || eff.Tenants[0].Idle == 0 {
		t.Fatalf("efficiency: %v %s", err, body)
	}
	if want := fmt.Sprintf(`data-idle-gpu-microseconds="%d"`, eff.Tenants[0].Idle); !strings.Contains(dom, want) {
		t.Errorf("the portal does not show the API's idle time (%s)", want)
	}
	if pairs := strings.Count(dom, "data-held-day="); pairs != 6 {
		t.Errorf("%d held/used bars, want 6 (3 days x 2)", pairs)
	}
	if !strings.Contains(dom, "none this month") || strings.Contains(dom, "Insights unavailable") {
		t.Errorf("the anomalies table should say none, with no error note")
	}
	// October is over: its trend is all actual (the three days, then
	// none), so the forecast chart has 31 points, no projection, no band.
	if cost.Trend == nil {
		t.Fatalf("no trend for a whole month: %s", body)
	}
	if m := regexp.MustCompile(`data-forecast-total="([^"]+)"`).FindStringSubmatch(dom); m == nil || m[1] != cost.Trend.Spend.Total {
		t.Errorf("the forecast chart's total %v, the API's %s", m, cost.Trend.Spend.Total)
	}
	if n, p := strings.Count(dom, "data-forecast-day="), strings.Count(dom, `data-projected="1"`); n != 31 || p != 0 ||
		strings.Contains(dom, "data-forecast-band") || strings.Contains(dom, `data-forecast-line="projected"`) {
		t.Errorf("a closed month's forecast chart: %d days, %d projected, band or projection drawn: %v", n, p, strings.Contains(dom, "data-forecast-band"))
	}
	if m := regexp.MustCompile(`data-forecast-label="total"[^>]*>([^<]+)<`).FindStringSubmatch(dom); m == nil ||
		m[1] != "month end "+decimal.RequireFromString(cost.Trend.Spend.Total).StringFixed(2)+" USD" || strings.Contains(dom, `data-forecast-label="low"`) {
		t.Errorf("a closed month's forecast label %v, want its total alone", m)
	}
	if !strings.Contains(dom, f.invs["acme"].Number) || strings.Contains(dom, f.invs["globex"].Number) {
		t.Errorf("the invoice table should list acme's invoice only")
	}
	shot := filepath.Join(harness.ArtifactDir(t), "portal.png")
	browsertest.Headless(t, url, "--screenshot="+shot, "--window-size=1280,1100", "--hide-scrollbars")
	if st, err := os.Stat(shot); err != nil || st.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}

	// Without a token the portal says how to sign in, and never loads data.
	dom = browsertest.Headless(t, f.srv.URL+"/portal/", "--dump-dom")
	if !strings.Contains(dom, "No token") || !strings.Contains(dom, `data-ready="error"`) {
		t.Errorf("the portal without a token:\n%.2000s", dom)
	}
}

// TestPortalDrawsTheForecastBand: a tenant with six weeks of history
// before the middle of the month it views gets a trend from /v1/cost, and
// the portal, in a real browser, draws it: a point per day of the month
// (actual days, then projected ones), the band, and the month-end total,
// low and high the API gives, labelled at the currency's minor units.
func TestPortalDrawsTheForecastBand(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	ctx := context.Background()
	// The clock of the cost and insights services: 17 September, noon.
	now := time.Date(2026, 9, 17, 12, 0, 0, 0, time.UTC)
	histFrom := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	var samples []collectors.Sample
	// A share of the H100 drawn per day (40 to 89 %), so that the fit has
	// noise and the band a width.
	r := rand.New(rand.NewPCG(17, 9))
	share := map[int]uint64{}
	for h := histFrom; h.Before(now); h = h.Add(time.Hour) {
		day := int(h.Sub(histFrom).Hours()) / 24
		if _, ok := share[day]; !ok {
			share[day] = 40 + r.Uint64N(50)
		}
		samples = append(samples, h100Hour("acme", "research", "GPU-acme", "job-acme", h, share[day]*36_000_000))
	}
	if err := f.store.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	if err := rollup.New(f.store, rollup.DefaultConfig(), time.Now, slog.New(slog.DiscardHandler)).RollupRange(ctx, histFrom, now); err != nil {
		t.Fatal(err)
	}
	f.stop()
	f.srv, f.stop = f.serve(t, server.DefaultConfig(), func() time.Time { return now })

	_, body, _ := f.get(t, f.tokens["portal"], "/v1/cost?month=2026-09")
	var cost struct {
		SoFar    string `json:"so_far"`
		Currency string `json:"currency"`
		Trend    *struct {
			Spend struct {
				Total, Low, High decimal.Decimal
				Path             []struct {
					At        time.Time `json:"at"`
					Projected bool      `json:"projected"`
				} `json:"path"`
			} `json:"spend"`
		} `json:"trend"`
	}
	if err := json.Unmarshal(body, &cost); err != nil || cost.Trend == nil {
		t.Fatalf("cost with six weeks of history has no trend: %v %s", err, body)
	}
	sp := cost.Trend.Spend
	projected := 0
	for _, p := range sp.Path {
		if p.Projected {
			projected++
		}
	}
	// 1-16 September are whole days behind the clock; 17-30 projected.
	if len(sp.Path) != 30 || projected != 14 || !sp.High.GreaterThan(sp.Total) || !sp.Low.LessThan(sp.Total) {
		t.Fatalf("trend: %d points, %d projected, band [%s, %s] around %s; want 30 and 14 with a band", len(sp.Path), projected, sp.Low, sp.Total, sp.High)
	}

	dom := browsertest.Headless(t, f.srv.URL+"/portal/#token="+f.tokens["portal"]+"&month=2026-09", "--dump-dom")
	if !strings.Contains(dom, `data-ready="1"`) {
		t.Fatalf("the portal never finished loading:\n%.3000s", dom)
	}
	for attr, want := range map[string]decimal.Decimal{"data-forecast-total": sp.Total, "data-forecast-low": sp.Low, "data-forecast-high": sp.High} {
		m := regexp.MustCompile(attr + `="([^"]+)"`).FindStringSubmatch(dom)
		if m == nil || m[1] != want.String() {
			t.Errorf("the chart's %s is %v, the API's %s", attr, m, want)
		}
	}
	// The plotted days are the API's, in order, the projected ones marked.
	var days []string
	for _, m := range regexp.MustCompile(`data-forecast-day="([^"]+)" data-projected="([01])"`).FindAllStringSubmatch(dom, -1) {
		days = append(days, m[1]+"/"+m[2])
	}
	var want []string
	for _, p := range sp.Path {
		want = append(want, fmt.Sprintf("%s/%d", p.At.Format(time.DateOnly), map[bool]int{false: 0, true: 1}[p.Projected]))
	}
	if strings.Join(days, " ") != strings.Join(want, " ") {
		t.Errorf("plotted days %v, want %v", days, want)
	}
	for _, part := range []string{`data-forecast-band="1"`, `data-forecast-line="actual"`, `data-forecast-line="projected"`, `stroke-dasharray="6 4"`} {
		if !strings.Contains(dom, part) {
			t.Errorf("the chart has no %s", part)
		}
	}
	// The labels: the month-end figures at the currency's minor units.
	places := int32(len(cost.SoFar) - strings.LastIndex(cost.SoFar, ".") - 1)
	for label, v := range map[string]decimal.Decimal{"total": sp.Total, "low": sp.Low, "high": sp.High} {
		m := regexp.MustCompile(`data-forecast-label="` + label + `"[^>]*>([^<]+)<`).FindStringSubmatch(dom)
		if m == nil || !strings.HasSuffix(m[1], " "+v.StringFixed(places)+" "+cost.Currency) {
			t.Errorf("the %s label is %v, want %s %s", label, m, v.StringFixed(places), cost.Currency)
		}
	}
	shot := filepath.Join(harness.ArtifactDir(t), "portal-forecast.png")
	browsertest.Headless(t, f.srv.URL+"/portal/#token="+f.tokens["portal"]+"&month=2026-09", "--screenshot="+shot, "--window-size=1280,1400", "--hide-scrollbars")
}

// The portal as each kind of key sees it, in a real browser at a desktop's
// width and a phone's: a tenant's key gets its tenant's view; an admin key
// the fleet view (capacity, allocated and idle GPU-hours, spend by tenant
// and department, held-but-idle, anomalies, capacity dates) and, opened
// on a tenant, that tenant's view; a department key the fleet view of its
// tenants only. Every figure checked is the API's; nothing scrolls
// sideways at either width; the screenshots are kept as artefacts.
func TestPortalViewsAtTwoWidths(t *testing.T) {
	f := newFixture(t, server.DefaultConfig())
	// Served with credit: acme's grants (one expiring), globex's used up,
	// initech's monthly allowance.
	api := storeAPI(f.store, f.customers, f.chargeback, usage.New(f.store, f.customers, time.Now))
	api.Insights = f.insights(t, time.Now)
	api, _ = f.withCreditGrants(t, api)
	f.srv, _, _ = serveAPI(t, server.DefaultConfig(), prometheus.NewRegistry(), api, nil)
	art := harness.ArtifactDir(t)
	getJSON := func(token, path string, v any) {
		t.Helper()
		code, body, _ := f.get(t, token, path)
		if code != 200 || json.Unmarshal(body, v) != nil {
			t.Fatalf("%s: %d %s", path, code, body)
		}
	}
	// What the credit views must show, from the API.
	var acmeCredit struct {
		MoneyRemaining string `json:"money_remaining"`
		Depletion      *string
		Balances       []struct {
			Grant     struct{ ID string }
			Remaining string
		}
		Daily []struct {
			Date           string
			MoneyRemaining string `json:"money_remaining"`
		}
		Expiring []struct{ Grant struct{ ID string } }
	}
	getJSON(f.tokens["admin"], "/v1/credits?tenant=acme", &acmeCredit)
	if len(acmeCredit.Balances) == 0 || len(acmeCredit.Daily) == 0 || len(acmeCredit.Expiring) == 0 {
		t.Fatalf("acme's credit has no balances, days or expiring grants to show: %+v", acmeCredit)
	}
	type creditCustomer struct {
		Tenant         string
		DaysLeft       *int   `json:"days_left"`
		MoneyRemaining string `json:"money_remaining"`
	}
	summaries := map[string][]creditCustomer{}
	for _, key := range []string{"admin", "research"} {
		var sum struct{ Customers []creditCustomer }
		getJSON(f.tokens[key], "/v1/credits", &sum)
		summaries[key] = sum.Customers
	}
	if len(summaries["admin"]) != 3 || summaries["admin"][0].Tenant != "globex" || len(summaries["research"]) != 2 {
		t.Fatalf("credit summaries: %+v", summaries)
	}
	type cost struct {
		Tenant string `json:"tenant"`
		SoFar  string `json:"so_far"`
	}
	// What the fleet view must show, from the API.
	var usage struct {
		Points []struct {
			Tenant   string          `json:"tenant"`
			GPUHours decimal.Decimal `json:"gpu_hours"`
		} `json:"points"`
	}
	getJSON(f.tokens["admin"], "/v1/usage?from=2026-10-01T00:00:00Z&to=2026-11-01T00:00:00Z&step=day&group_by=tenant&meters=gpu_hours&tz=UTC", &usage)
	allocated := decimal.Zero
	for _, p := range usage.Points {
		if p.Tenant != "" {
			allocated = allocated.Add(p.GPUHours)
		}
	}
	spend := map[string]string{}
	for _, tenant := range []string{"acme", "globex", "initech"} {
		var c cost
		getJSON(f.tokens["admin"], "/v1/cost?month=2026-10&tenant="+tenant, &c)
		spend[tenant] = c.SoFar
	}

	for _, tc := range []struct {
		name, token, fragment, view string
		tenants                     []string // the spenders listed, for fleet views
	}{
		{"tenant", f.tokens["portal"], "&month=2026-10", "tenant", nil},
		{"fleet-admin", f.tokens["admin"], "&month=2026-10", "fleet", []string{"acme", "globex", "initech"}},
		{"fleet-department", f.tokens["research"], "&month=2026-10", "fleet", []string{"acme", "globex"}},
		{"admin-opens-acme", f.tokens["admin"], "&month=2026-10&tenant=acme", "tenant", nil},
	} {
		for _, width := range []int{1400, 400} {
			t.Run(fmt.Sprintf("%s-%d", tc.name, width), func(t *testing.T) {
				url := f.srv.URL + "/portal/#token=" + tc.token + tc.fragment
				size := fmt.Sprintf("--window-size=%d,1800", width)
				dom := browsertest.Headless(t, url, "--dump-dom", size, "--hide-scrollbars")
				if !strings.Contains(dom, `data-ready="1"`) || !strings.Contains(dom, `data-view="`+tc.view+`"`) {
					t.Fatalf("not the %s view, or never ready:\n%.3000s", tc.view, dom)
				}
				if m := regexp.MustCompile(`data-overflow="(\d+)"`).FindStringSubmatch(dom); m == nil || m[1] != "0" {
					t.Errorf("at %d px the page scrolls sideways by %v px", width, m)
				}
				if strings.Contains(dom, "required for a") || strings.Contains(dom, "Signing in") {
					t.Errorf("an operator's key is refused or left signing in")
				}
				switch tc.view {
				case "tenant":
					m := regexp.MustCompile(`id="mtd-cost"[^>]*data-amount="([^"]+)"|data-amount="([^"]+)"[^>]*id="mtd-cost"`).FindStringSubmatch(dom)
					if m == nil || m[1]+m[2] != spend["acme"] {
						t.Errorf("month to date %v, the API's %s", m, spend["acme"])
					}
					if !strings.Contains(dom, "through 31 Oct 2026, 24:00 UTC") {
						t.Errorf("as-of not in words and the tenant's zone")
					}
					// The credit section: the API's figures, drawn.
					if !strings.Contains(dom, `id="credit-section"`) || strings.Contains(dom, `id="credit-section" hidden`) || strings.Contains(dom, "Credit unavailable") {
						t.Fatalf("no credit section for acme")
					}
					if !strings.Contains(dom, `data-amount="`+acmeCredit.MoneyRemaining+`"`) {
						t.Errorf("credit left: the API's %s not shown", acmeCredit.MoneyRemaining)
					}
					for _, b := range acmeCredit.Balances {
						if !strings.Contains(dom, `data-credit-grant="`+b.Grant.ID+`" data-remaining="`+b.Remaining+`"`) {
							t.Errorf("grant %s: no row with the API's %s left", b.Grant.ID, b.Remaining)
						}
					}
					var drawn, want []string
					for _, m := range regexp.MustCompile(`data-credit-day="([^"]+)" data-credit-left="([^"]+)"`).FindAllStringSubmatch(dom, -1) {
						drawn = append(drawn, m[1]+"="+m[2])
					}
					for _, d := range acmeCredit.Daily {
						want = append(want, d.Date+"="+d.MoneyRemaining)
					}
					if !slices.Equal(drawn, want) {
						t.Errorf("burn-down points %v, the API's days %v", drawn, want)
					}
					if wantDep := ""; acmeCredit.Depletion != nil {
						wantDep = *acmeCredit.Depletion
						if !strings.Contains(dom, `data-depletion="`+wantDep+`"`) {
							t.Errorf("depletion: the API's %q not shown", wantDep)
						}
					} else if !strings.Contains(dom, `data-depletion=""`) || !strings.Contains(dom, "not this month") {
						t.Errorf("no depletion this month: not said")
					}
					for _, b := range acmeCredit.Expiring {
						if !strings.Contains(dom, `data-expiring-grant="`+b.Grant.ID+`"`) {
							t.Errorf("expiring grant %s not listed", b.Grant.ID)
						}
					}
				case "fleet":
					var listed []string
					for _, m := range regexp.MustCompile(`data-tenant="([^"]+)" data-so-far="([^"]+)"`).FindAllStringSubmatch(dom, -1) {
						listed = append(listed, m[1])
						if m[2] != spend[m[1]] {
							t.Errorf("%s: spend %s, the API's %s", m[1], m[2], spend[m[1]])
						}
					}
					sorted := append([]string(nil), listed...)
					slices.SortFunc(sorted, func(a, b string) int {
						return decimal.RequireFromString(spend[b]).Cmp(decimal.RequireFromString(spend[a]))
					})
					if fmt.Sprint(listed) != fmt.Sprint(sorted) || !sameSet(listed, tc.tenants) {
						t.Errorf("spenders %v, want %v, top spender first", listed, tc.tenants)
					}
					// Close to depletion: the API's summary, in its order.
					var rows, wantRows []string
					for _, m := range regexp.MustCompile(`data-credit-tenant="([^"]+)" data-days-left="([^"]*)" data-money-remaining="([^"]+)"`).FindAllStringSubmatch(dom, -1) {
						rows = append(rows, m[1]+" "+m[2]+" "+m[3])
					}
					key := map[string]string{"fleet-admin": "admin", "fleet-department": "research"}[tc.name]
					for _, c := range summaries[key] {
						days := ""
						if c.DaysLeft != nil {
							days = fmt.Sprint(*c.DaysLeft)
						}
						wantRows = append(wantRows, c.Tenant+" "+days+" "+c.MoneyRemaining)
					}
					if !slices.Equal(rows, wantRows) || strings.Contains(dom, `id="depletion-section" hidden`) {
						t.Errorf("close to depletion %v, the API's %v", rows, wantRows)
					}
					if tc.name == "fleet-admin" {
						m := regexp.MustCompile(`id="fleet-allocated"[^>]*data-value="([^"]+)"|data-value="([^"]+)"[^>]*id="fleet-allocated"`).FindStringSubmatch(dom)
						if m == nil || !decimal.RequireFromString(m[1]+m[2]).Equal(allocated) {
							t.Errorf("allocated %v, the API's %s", m, allocated)
						}
						if !strings.Contains(dom, `id="capacity-section"`) || strings.Contains(dom, `id="capacity-section" hidden`) {
							t.Errorf("no capacity dates for an admin key")
						}
					} else if !strings.Contains(dom, "an admin key shows them") {
						t.Errorf("a department key's fleet view does not say what it leaves out")
					}
				}
				browsertest.Headless(t, url, "--screenshot="+filepath.Join(art, tc.name+"-"+fmt.Sprint(width)+".png"), size, "--hide-scrollbars")
			})
		}
	}
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// The portal prints every quantity at its unit's places and in its unit,
// as the meter table gives them: its PLACES and UNITS are the table's.
func TestPortalMetersAreTheMeterTable(t *testing.T) {
	js, err := os.ReadFile(filepath.Join("portal", "portal.js"))
	if err != nil {
		t.Fatal(err)
	}
	places := regexp.MustCompile(`var PLACES = \{([^}]*)\}`).FindSubmatch(js)
	units := regexp.MustCompile(`var UNITS = \{([^}]*)\}`).FindSubmatch(js)
	if places == nil || units == nil {
		t.Fatal("portal.js has no PLACES or UNITS")
	}
	var wantPlaces, wantUnits []string
	for _, p := range meter.PricedMeters {
		wantPlaces = append(wantPlaces, fmt.Sprintf("%s: %d", p.Name, p.Places))
		wantUnits = append(wantUnits, fmt.Sprintf("%s: %q", p.Name, p.Unit))
	}
	if got, want := strings.TrimSpace(string(places[1])), strings.Join(wantPlaces, ", "); got != want {
		t.Errorf("PLACES {%s}, the meter table's {%s}", got, want)
	}
	if got, want := strings.TrimSpace(string(units[1])), strings.Join(wantUnits, ", "); got != want {
		t.Errorf("UNITS {%s}, the meter table's {%s}", got, want)
	}
}
