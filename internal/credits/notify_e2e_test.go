package credits_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/internal/webhook"
	"github.com/gpumeter/gpumeter/pricing"
)

const notifyBook = `version: notify-2026
currency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}
skus:
  H100-SXM5-80GB:
    meters:
      gpu_hours: {unit_price: "3.00"}
  A100-SXM4-80GB:
    meters:
      gpu_hours: {unit_price: "2.00"}
`

// countingBox is the store's outbox, counting the events written to it.
type countingBox struct {
	*store.Store
	mu    sync.Mutex
	saved []webhook.Event
}

func (b *countingBox) SaveEvents(ctx context.Context, evs []webhook.Event) error {
	b.mu.Lock()
	b.saved = append(b.saved, evs...)
	b.mu.Unlock()
	return b.Store.SaveEvents(ctx, evs)
}

// The credit job end to end, on a real ClickHouse with a real receiver.
// acme (credit_only, at_zero webhook) has 100 USD prepaid and burns 3 USD
// an hour on one H100 from November 1st; its plan grants 5 A100 hours a
// month. globex has 20 USD promotional expiring November 5th and no
// usage. The job runs twice at each of: Nov 1 17:00 (51 USD used: 50 %),
// Nov 2 06:00 (90 used: 20 and 10 %), Nov 2 12:00 (all used: depleted,
// action stop) and Dec 2 (December's allowance; globex's credit expired).
// Each event is written once, whichever run finds it, and reaches the
// receiver once, signed; the allowances of November and December are
// written once each.
func TestCreditJobEndToEnd(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	logger := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	book := filepath.Join(dir, "book.yaml")
	if err := os.WriteFile(book, []byte(notifyBook), 0o644); err != nil {
		t.Fatal(err)
	}
	allowance := credits.Recurring{Series: "a100", Kind: credits.Included, Amount: decimal.NewFromInt(5), Meter: pricing.GPUHours,
		SKUClass: gpucatalog.A100SXM4_80GB, Start: "2026-11"}
	customers := billing.Customers{
		Issuer:   billing.Issuer{ID: "gpucloud", Name: "GPU Cloud GmbH"},
		Schedule: billing.DefaultInvoiceSchedule,
		Customers: []billing.Customer{
			{Tenant: "acme", Name: "Acme", Currency: "USD", TimeZone: "UTC", Book: book,
				Credits: credits.Plan{Settlement: credits.CreditOnly, Recurring: []credits.Recurring{allowance}}},
			{Tenant: "globex", Name: "Globex", Currency: "USD", TimeZone: "UTC", Book: book},
		},
	}
	creditCustomers, err := customers.CreditCustomers()
	if err != nil {
		t.Fatal(err)
	}
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var clock time.Time
	now := func() time.Time { return clock }
	svc := credits.NewService(s, usage.New(s, customers, now), creditCustomers, now)

	// Usage: one H100 from Nov 1 00:00 to Nov 3 00:00, rolled up.
	var samples []collectors.Sample
	for h := nov; h.Before(nov.AddDate(0, 0, 2)); h = h.Add(time.Hour) {
		smp := collectors.Sample{Host: "host-acme", GPUUUID: "GPU-acme-0", GPUModel: gpucatalog.H100SXM5_80GB, SKU: gpucatalog.H100SXM5_80GB,
			Tenant: "acme", Workload: "job-acme", Start: h, End: h.Add(time.Hour), Values: meter.Values{GPUMicroseconds: 3_600_000_000}}
		smp.ID = collectors.SampleID(smp.Host, smp.GPUUUID, smp.Tenant, smp.Workload, smp.Start)
		samples = append(samples, smp)
	}
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	if _, err := rollup.New(s, rollup.DefaultConfig(), time.Now, logger).Run(ctx); err != nil {
		t.Fatal(err)
	}
	clock = nov
	if _, err := svc.Grant(ctx, credits.Grant{Tenant: "acme", Kind: credits.Prepaid, Amount: decimal.NewFromInt(100), EffectiveAt: nov}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Grant(ctx, credits.Grant{Tenant: "globex", Kind: credits.Promotional, Amount: decimal.NewFromInt(20), EffectiveAt: nov,
		ExpiresAt: nov.AddDate(0, 0, 4)}); err != nil {
		t.Fatal(err)
	}

	// Events are stamped by the real clock, so that the sender (which looks
	// a week back from now) delivers them.
	box := &countingBox{Store: s}
	settings := credits.DefaultSettings()
	settings.AtZero = credits.StopWebhook
	job := credits.NewJob(svc, webhook.NewPublisher(box, time.Now), settings, now, logger)
	type step struct {
		at        time.Time
		recurring int
		published []string // event types new to the outbox
	}
	for _, st := range []step{
		{nov.Add(17 * time.Hour), 1, []string{webhook.TypeCreditsThreshold, webhook.TypeCreditsExpiring}},
		{nov.Add(30 * time.Hour), 0, []string{webhook.TypeCreditsThreshold, webhook.TypeCreditsThreshold}},
		{nov.Add(36 * time.Hour), 0, []string{webhook.TypeCreditsDepleted}},
		{nov.AddDate(0, 1, 1), 1, []string{webhook.TypeCreditsDepleted}},
	} {
		clock = st.at
		before := len(box.saved)
		for run := 1; run <= 2; run++ {
			rep, err := job.Run(ctx)
			if err != nil || rep.Customers != 2 || rep.Failed != 0 {
				t.Fatalf("%s run %d: %+v, %v", st.at, run, rep, err)
			}
			wantRecurring, wantPublished := st.recurring, len(st.published)
			if run == 2 {
				wantRecurring, wantPublished = 0, 0
			}
			if rep.Recurring != wantRecurring || rep.Published != wantPublished {
				t.Errorf("%s run %d: %+v; want %d allowances and %d events written", st.at, run, rep, wantRecurring, wantPublished)
			}
		}
		var types []string
		for _, ev := range box.saved[before:] {
			types = append(types, ev.Type)
		}
		slices.Sort(types)
		slices.Sort(st.published)
		if !slices.Equal(types, st.published) {
			t.Errorf("%s: wrote %q, want %q", st.at, types, st.published)
		}
	}

	// The allowances: November's and December's, once each.
	grants, err := s.Grants(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var months []string
	for _, g := range grants {
		if g.Series == "a100" {
			months = append(months, g.EffectiveAt.Format("2006-01"))
		}
	}
	slices.Sort(months)
	if !slices.Equal(months, []string{"2026-11", "2026-12"}) {
		t.Errorf("allowances stored: %q", months)
	}

	// What the events say, read back from the outbox.
	statuses, err := s.Events(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	byType := map[string][]map[string]any{}
	ids := map[string]bool{}
	for _, st := range statuses {
		var data map[string]any
		if err := json.Unmarshal(st.Event.Data, &data); err != nil {
			t.Fatal(err)
		}
		byType[st.Event.Type] = append(byType[st.Event.Type], data)
		ids[st.Event.ID] = true
	}
	if len(statuses) != 6 || len(ids) != 6 {
		t.Fatalf("outbox holds %d events (%d ids), want 6", len(statuses), len(ids))
	}
	var thresholds []float64
	for _, d := range byType[webhook.TypeCreditsThreshold] {
		thresholds = append(thresholds, d["threshold"].(float64))
		if d["tenant"] != "acme" || d["currency"] != "USD" || d["granted"] != "100" || d["kind"] != "prepaid" {
			t.Errorf("threshold event %v", d)
		}
	}
	slices.Sort(thresholds)
	if !slices.Equal(thresholds, []float64{10, 20, 50}) {
		t.Errorf("thresholds sent: %v", thresholds)
	}
	if e := byType[webhook.TypeCreditsExpiring]; len(e) != 1 || e[0]["tenant"] != "globex" || e[0]["expiring"] != "20" ||
		e[0]["expires_at"] != "2026-11-05T00:00:00Z" {
		t.Errorf("expiring events %v", e)
	}
	actions := map[any]any{}
	for _, d := range byType[webhook.TypeCreditsDepleted] {
		actions[d["tenant"]] = d["action"]
		if d["pool"] != "money" {
			t.Errorf("depleted event %v", d)
		}
	}
	if actions["acme"] != "stop" || actions["globex"] != "notify" {
		t.Errorf("depletion actions %v: want acme (credit_only, webhook) stop, globex (credit_then_invoice) notify", actions)
	}

	// Months later, in another partition of the outbox, the same state
	// writes nothing.
	later := credits.NewJob(svc, webhook.NewPublisher(box, func() time.Time { return time.Now().AddDate(0, 2, 0) }), settings, now, logger)
	if rep, err := later.Run(ctx); err != nil || rep.Published != 0 || rep.Due == 0 {
		t.Errorf("a run stamping events two months on: %+v, %v; want notices due and none written", rep, err)
	}
	if len(box.saved) != 6 {
		t.Errorf("%d events written in all, want 6", len(box.saved))
	}

	// Delivery: each event once, signed with the endpoint's secret.
	secret := "credits-receiver-secret"
	var mu sync.Mutex
	got := map[string]int{}
	all := make(chan struct{})
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify([]byte(secret), r.Header.Get(webhook.SignatureHeader), body, time.Now(), 5*time.Minute); err != nil {
			t.Errorf("delivery %s: %v", r.Header.Get("Gpumeter-Event-ID"), err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev webhook.Event
		if err := json.Unmarshal(body, &ev); err != nil || ev.ID != r.Header.Get("Gpumeter-Event-ID") || !ids[ev.ID] {
			t.Errorf("delivered %s: %v", body, err)
		}
		mu.Lock()
		got[ev.ID]++
		if len(got) == len(ids) && got[ev.ID] == 1 {
			close(all)
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()
	cfg := webhook.DefaultConfig()
	cfg.Poll = 20 * time.Millisecond
	cfg.Endpoints = []webhook.Endpoint{{Name: "ops", URL: receiver.URL, Secret: secret,
		Events: []string{webhook.TypeCreditsThreshold, webhook.TypeCreditsDepleted, webhook.TypeCreditsExpiring}}}
	sendCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); webhook.NewSender(cfg, s, logger).Run(sendCtx, s) }()
	select {
	case <-all:
	case <-time.After(time.Minute):
		t.Error("not every event was delivered within a minute")
	}
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for id, n := range got {
		if n != 1 {
			t.Errorf("event %s delivered %d times", id, n)
		}
	}
}
