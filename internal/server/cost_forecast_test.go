package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
)

// costBody is what these tests read of GET /v1/cost.
type costBody struct {
	BeforeTax      bool   `json:"before_tax"`
	SoFar          string `json:"so_far"`
	Forecast       string `json:"forecast"`
	ForecastLow    string `json:"forecast_low"`
	ForecastHigh   string `json:"forecast_high"`
	ForecastMethod string `json:"forecast_method"`
	Trend          *struct {
		Method string `json:"method"`
		Spend  struct {
			BeforeTax                bool `json:"before_tax"`
			Actual, Total, Low, High decimal.Decimal
			Path                     []struct {
				At               time.Time `json:"at"`
				Projected        bool      `json:"projected"`
				Total, Low, High decimal.Decimal
			} `json:"path"`
		} `json:"spend"`
	} `json:"trend"`
}

// TestCostTrendAndForecastAreTheInvoicesPricing: acme of `make demo` (its
// book and reservation contract, New York time, a tax rate) uses GPUs on
// a weekly pattern from September, but not at all for two weeks of
// October. For October, over and invoiced, the month so far, the
// forecast and the trend's month end are all the invoice's subtotal
// (before tax): the reservation is take-or-pay on the idle days too. For
// November, open on the 18th, the trend's month end is the forecast, and
// both are before tax. Before the fix the trend priced each day with
// usage on its own (October's idle days cost nothing) and the forecast
// was a run rate of its own.
func TestCostTrendAndForecastAreTheInvoicesPricing(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	r := rand.New(rand.NewPCG(31, 3))
	var samples []collectors.Sample
	add := func(gpu string, h time.Time, share uint64) {
		samples = append(samples, h100Hour("acme", "research", gpu, "job-"+gpu, h, share*36_000_000))
	}
	now := time.Date(2026, 11, 18, 12, 0, 0, 0, time.UTC)
	idleFrom, idleTo := time.Date(2026, 10, 10, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC)
	day := -1
	var share uint64
	for h := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC); h.Before(now); h = h.Add(time.Hour) {
		if d := h.YearDay(); d != day {
			day, share = d, 60+r.Uint64N(41)
		}
		if !h.Before(idleFrom) && h.Before(idleTo) {
			continue
		}
		add("GPU-a", h, share)
		// Weekday afternoons: two more GPUs, one above the reservation.
		if wd := h.Weekday(); wd != time.Saturday && wd != time.Sunday && h.Hour() >= 12 && h.Hour() < 20 {
			add("GPU-b", h, 100)
			add("GPU-c", h, share)
		}
	}
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	rollUp(t, s)
	demo := filepath.Join("..", "demo", "billing")
	cs := billing.Customers{Issuer: billing.Issuer{ID: "gc", Name: "GPU Cloud", NumberPrefix: "GC-"}, Schedule: billing.DefaultInvoiceSchedule,
		Customers: []billing.Customer{{Tenant: "acme", Department: "research", Name: "Acme Corp", Currency: "USD", TimeZone: "America/New_York",
			TaxRate: decimal.RequireFromString("8.875"), Book: filepath.Join(demo, "cloud-book.yaml"), Contract: filepath.Join(demo, "acme-contract.yaml")}}}
	rep, err := invoiceRunner(s, cs).Run(ctx, billing.RunRequest{Period: "2026-10", Tenant: "acme"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Outcomes) != 1 || rep.Outcomes[0].Action != billing.ActionFinalized {
		t.Fatalf("October's invoice run: %+v", rep.Outcomes)
	}
	inv := rep.Outcomes[0].Invoice
	_, token := saveKey(t, s, auth.NewKeyRequest{Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}}, time.Now())
	f := &fixture{store: s, customers: cs}
	f.srv, f.stop = f.serve(t, server.DefaultConfig(), func() time.Time { return now })
	cost := func(month string) costBody {
		t.Helper()
		code, body, _ := f.get(t, token, "/v1/cost?month="+month)
		var c costBody
		if err := json.Unmarshal(body, &c); code != 200 || err != nil {
			t.Fatalf("cost of %s: %d %v %s", month, code, err, body)
		}
		if !c.BeforeTax || c.Trend == nil || !c.Trend.Spend.BeforeTax || len(c.Trend.Spend.Path) == 0 {
			t.Fatalf("cost of %s: not marked before tax, or no trend: %s", month, body)
		}
		last := c.Trend.Spend.Path[len(c.Trend.Spend.Path)-1]
		fc := decimal.RequireFromString(c.Forecast)
		if !c.Trend.Spend.Total.Equal(fc) || !last.Total.Equal(fc) || !last.Low.Equal(c.Trend.Spend.Low) || !last.High.Equal(c.Trend.Spend.High) ||
			!c.Trend.Spend.Low.Equal(decimal.RequireFromString(c.ForecastLow)) || !c.Trend.Spend.High.Equal(decimal.RequireFromString(c.ForecastHigh)) {
			t.Errorf("%s: forecast %s [%s, %s], the trend's month end %s [%s, %s], its path's last day %s", month, c.Forecast, c.ForecastLow,
				c.ForecastHigh, c.Trend.Spend.Total, c.Trend.Spend.Low, c.Trend.Spend.High, last.Total)
		}
		return c
	}

	oct := cost("2026-10")
	sub := inv.Money(inv.SubtotalMinor)
	if oct.SoFar != sub || oct.Forecast != sub || oct.ForecastMethod != "actual" || inv.TaxMinor == 0 {
		t.Errorf("October: so far %s, forecast %s (%s); the invoice's subtotal is %s (tax %s on top)", oct.SoFar, oct.Forecast,
			oct.ForecastMethod, sub, inv.Money(inv.TaxMinor))
	}
	if n := len(oct.Trend.Spend.Path); n != 31 || oct.Trend.Spend.Path[30].Projected {
		t.Errorf("October's path: %d days, the last projected %v; want 31 actual", n, oct.Trend.Spend.Path[n-1].Projected)
	}
	// An idle day still costs the reservation: the path rises through it.
	ny, _ := time.LoadLocation("America/New_York")
	for i, p := range oct.Trend.Spend.Path {
		if d := p.At.In(ny); d.Day() > 11 && d.Day() < 24 && !p.Total.GreaterThan(oct.Trend.Spend.Path[i-1].Total) {
			t.Errorf("October %d, without usage: %s, the day before %s; the reservation is take-or-pay", d.Day(), p.Total, oct.Trend.Spend.Path[i-1].Total)
		}
	}

	nov := cost("2026-11")
	projected := 0
	for _, p := range nov.Trend.Spend.Path {
		if p.Projected {
			projected++
		}
	}
	if nov.ForecastMethod != "trend" || nov.Trend.Method != "trend" || projected != 13 ||
		!nov.Trend.Spend.Actual.Equal(decimal.RequireFromString(nov.SoFar)) || !decimal.RequireFromString(nov.Forecast).GreaterThan(decimal.RequireFromString(nov.SoFar)) {
		t.Errorf("November: %s/%s, %d days projected, so far %s (trend's actual %s), forecast %s", nov.ForecastMethod, nov.Trend.Method,
			projected, nov.SoFar, nov.Trend.Spend.Actual, nov.Forecast)
	}
	t.Log(fmt.Sprintf("October %s = invoice subtotal %s; November so far %s, forecast %s [%s, %s]", oct.Forecast, sub, nov.SoFar, nov.Forecast, nov.ForecastLow, nov.ForecastHigh))
}
