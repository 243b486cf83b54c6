package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/pricing"
)

var (
	creditNov   = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	creditAsOf  = time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	creditCap   = decimal.RequireFromString("20")
	creditMoney = credits.Grant{ID: "cg_pre", Tenant: "acme", Kind: credits.Prepaid, Amount: decimal.RequireFromString("100"),
		Currency: "USD", EffectiveAt: creditNov, CreatedAt: creditNov}
	creditHours = credits.Grant{ID: "cg_hours", Tenant: "acme", Kind: credits.Included, Amount: decimal.RequireFromString("50"),
		Meter: pricing.GPUHours, SKUClass: "H100-SXM5-80GB", EffectiveAt: creditNov, ExpiresAt: creditNov.AddDate(0, 1, 0),
		Series: "plan", RolloverCap: &creditCap, CreatedAt: creditNov}
)

func creditNotices() []credits.Notice {
	d := decimal.RequireFromString
	return []credits.Notice{
		{Kind: credits.NoticeThreshold, Key: "threshold\x00acme\x00cg_pre\x0020", Tenant: "acme", Grant: creditMoney, Threshold: 20,
			Granted: d("100"), Remaining: d("12.5"), Settlement: credits.CreditThenInvoice, AsOf: creditAsOf},
		{Kind: credits.NoticeExpiring, Key: "expiring\x00acme\x00cg_hours", Tenant: "acme", Grant: creditHours,
			Granted: d("50"), Remaining: d("30"), Expiring: d("10"), Settlement: credits.CreditOnly, AsOf: creditAsOf},
		{Kind: credits.NoticeDepleted, Key: "depleted\x00acme\x00money\x00cg_pre", Tenant: "acme", Grant: creditMoney, Pool: credits.PoolMoney,
			Granted: decimal.Zero, Remaining: decimal.Zero, Settlement: credits.CreditOnly, Action: credits.ActionStop, AsOf: creditAsOf},
	}
}

// Each credit event's payload, field by field, as receivers get it.
func TestCreditNoticePayloads(t *testing.T) {
	at := creditAsOf.Add(25 * time.Minute)
	want := []struct {
		typ  string
		data map[string]any
	}{
		{TypeCreditsThreshold, map[string]any{"tenant": "acme", "grant_id": "cg_pre", "kind": "prepaid", "threshold": 20.0,
			"granted": "100", "remaining": "12.5", "currency": "USD", "effective_at": "2026-11-01T00:00:00Z",
			"settlement": "credit_then_invoice", "at": "2026-11-20T10:00:00Z"}},
		{TypeCreditsExpiring, map[string]any{"tenant": "acme", "grant_id": "cg_hours", "kind": "included", "granted": "50",
			"remaining": "30", "expiring": "10", "rollover_cap": "20", "meter": "gpu_hours", "sku_class": "H100-SXM5-80GB",
			"effective_at": "2026-11-01T00:00:00Z", "expires_at": "2026-12-01T00:00:00Z", "series": "plan",
			"settlement": "credit_only", "at": "2026-11-20T10:00:00Z"}},
		{TypeCreditsDepleted, map[string]any{"tenant": "acme", "pool": "money", "last_grant_id": "cg_pre", "currency": "USD",
			"action": "stop", "settlement": "credit_only", "at": "2026-11-20T10:00:00Z"}},
	}
	for i, n := range creditNotices() {
		ev, err := CreditNotice(n, at)
		if err != nil {
			t.Fatal(err)
		}
		var data map[string]any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		if ev.Type != want[i].typ || !ev.CreatedAt.Equal(at) || !reflect.DeepEqual(data, want[i].data) {
			t.Errorf("%s: %s %s %v\nwant %s %v", n.Kind, ev.Type, ev.CreatedAt, data, want[i].typ, want[i].data)
		}
		// The id follows from the notice's key alone: the same notice found
		// later is the same event, another key another event.
		later, _ := CreditNotice(n, at.AddDate(0, 1, 0))
		other := n
		other.Key += "x"
		differs, _ := CreditNotice(other, at)
		if later.ID != ev.ID || differs.ID == ev.ID || len(ev.ID) != len("evt_credits_")+24 {
			t.Errorf("%s: ids %s, %s (later), %s (another key)", n.Kind, ev.ID, later.ID, differs.ID)
		}
	}
	if _, err := CreditNotice(credits.Notice{Kind: "refund"}, at); err == nil {
		t.Error("an unknown notice kind made an event")
	}
}

// The publisher writes each credit notice once: not again in a later run,
// not twice in one batch, and not again months later, when the outbox's
// ReplacingMergeTree would keep both rows (another month's partition).
func TestCreditNoticesAreWrittenOnce(t *testing.T) {
	ctx := context.Background()
	now := creditAsOf
	box := &memOutbox{}
	pub := NewPublisher(box, func() time.Time { return now })
	ns := creditNotices()
	if n, err := pub.CreditNotices(ctx, append(ns, ns[0])); err != nil || n != 3 || len(box.events) != 3 {
		t.Fatalf("first: wrote %d (%d in the outbox), %v; want 3", n, len(box.events), err)
	}
	if n, err := pub.CreditNotices(ctx, ns); err != nil || n != 0 || len(box.events) != 3 {
		t.Errorf("again: wrote %d (%d in the outbox), %v; want nothing", n, len(box.events), err)
	}
	now = creditAsOf.AddDate(0, 2, 0)
	if n, err := pub.CreditNotices(ctx, ns[:1]); err != nil || n != 0 || len(box.events) != 3 {
		t.Errorf("two months later: wrote %d, %v; want nothing", n, err)
	}
	// The lookup reaches back to the grant's start, less a day.
	if want := creditNov.Add(-announceSlack); !box.since.Equal(want) {
		t.Errorf("looked for events since %s, want %s", box.since, want)
	}
	fresh := ns[0]
	fresh.Threshold, fresh.Key = 10, "threshold\x00acme\x00cg_pre\x0010"
	if n, err := pub.CreditNotices(ctx, []credits.Notice{ns[0], fresh}); err != nil || n != 1 || len(box.events) != 4 ||
		box.events[3].Type != TypeCreditsThreshold {
		t.Errorf("a new threshold beside an old one: wrote %d, %v; outbox %d", n, err, len(box.events))
	}
	if n, err := pub.CreditNotices(ctx, nil); err != nil || n != 0 {
		t.Errorf("no notices: %d, %v", n, err)
	}
	failing := &memOutbox{err: errors.New("outbox down")}
	if _, err := NewPublisher(failing, func() time.Time { return now }).CreditNotices(ctx, ns); err == nil {
		t.Error("a failed outbox write was not reported")
	}
}

// Endpoints may ask for the credit events by type.
func TestConfigKnowsTheCreditEvents(t *testing.T) {
	c := DefaultConfig()
	c.Endpoints = []Endpoint{{Name: "ops", URL: "https://ops.example.com/hook", Secret: "0123456789abcdef",
		Events: []string{TypeCreditsThreshold, TypeCreditsDepleted, TypeCreditsExpiring}}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Endpoints[0].Events = []string{"credits.balance"}
	if err := c.Validate(); err == nil {
		t.Error("an unknown credit event type was accepted")
	}
}

// UnpublishedCreditNotices counts what CreditNotices would write, each
// notice once, and writes nothing.
func TestUnpublishedCreditNoticesWritesNothing(t *testing.T) {
	ctx := context.Background()
	box := &memOutbox{}
	pub := NewPublisher(box, func() time.Time { return creditAsOf })
	ns := creditNotices()
	if n, err := pub.UnpublishedCreditNotices(ctx, append(ns, ns[0])); err != nil || n != 3 || len(box.events) != 0 {
		t.Fatalf("before: %d unpublished (%d in the outbox), %v; want 3 and an empty outbox", n, len(box.events), err)
	}
	if n, err := pub.CreditNotices(ctx, ns[:1]); err != nil || n != 1 {
		t.Fatalf("publish one: %d, %v", n, err)
	}
	if n, err := pub.UnpublishedCreditNotices(ctx, ns); err != nil || n != 2 || len(box.events) != 1 {
		t.Errorf("one published: %d unpublished (%d in the outbox), %v; want 2 and 1", n, len(box.events), err)
	}
	if n, err := pub.UnpublishedCreditNotices(ctx, nil); err != nil || n != 0 {
		t.Errorf("no notices: %d, %v", n, err)
	}
}
