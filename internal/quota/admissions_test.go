package quota

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/rollup"
)

// Retention deletes admission log rows that ended more than
// rollup.AdmissionLogRetention ago: a rebuild must never look back that
// far, and a margin of days absorbs clocks that disagree.
func TestAdmissionLogRetentionOutlastsTheRebuild(t *testing.T) {
	if margin := rollup.AdmissionLogRetention - creditHoldLookback; margin < 3*24*time.Hour {
		t.Errorf("the admission log is kept %s past a row's end and a rebuild reads credit holds up to %s back: %s of margin, want 3 days or more",
			rollup.AdmissionLogRetention, creditHoldLookback, margin)
	}
}

// With logging on, an admission's parts are queued for the log, and a
// release when its work shows up; another evaluator restored from them
// (a new leader) counts what is still held, so it refuses what the first
// one's admissions already use, and drops released and expired ones.
func TestAdmissionRecordsRebuildAnotherEvaluator(t *testing.T) {
	c := &clock{time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)}
	cfg := testConfig(Rule{Tenant: "acme", ConcurrentGPUs: limit("4", "", "")})
	old := newEval(t, cfg, c)
	old.logging = true
	old.Update(snapshot(c.t, TenantState{Tenant: "acme"}))
	for range 2 {
		if dec, err := old.Admit(Request{Tenant: "acme", GPUModel: h100, Count: 2, Duration: time.Hour}); err != nil || !dec.Allowed {
			t.Fatalf("admit 2 of 4: %+v %v", dec, err)
		}
	}
	// The first admission's work starts: released, and recorded so.
	c.t = c.t.Add(10 * time.Second)
	old.Update(snapshot(c.t, TenantState{Tenant: "acme", Concurrent: map[string]decimal.Decimal{h100: d("2")}}))
	records, dropped := old.unwritten.take()
	if len(records) != 3 || dropped != 0 || records[0].Released || records[1].Released || !records[2].Released || records[2].ID != records[0].ID {
		t.Fatalf("records: %+v (dropped %d), want two held, then the first released", records, dropped)
	}

	successor := newEval(t, cfg, c)
	successor.Update(snapshot(c.t, TenantState{Tenant: "acme", Concurrent: map[string]decimal.Decimal{h100: d("2")}}))
	successor.Restore(records)
	if dec, err := successor.Admit(Request{Tenant: "acme", GPUModel: h100, Count: 1, Duration: time.Hour}); err != nil || dec.Allowed {
		t.Fatalf("2 running + 2 held by the old leader, 1 more under 4: %+v %v, want refused", dec, err)
	}
	// Past the TTL the held admission no longer counts.
	c.t = c.t.Add(DefaultConfig().ReservationTTL)
	successor.Update(snapshot(c.t, TenantState{Tenant: "acme", Concurrent: map[string]decimal.Decimal{h100: d("2")}}))
	if dec, err := successor.Admit(Request{Tenant: "acme", GPUModel: h100, Count: 2, Duration: time.Hour}); err != nil || !dec.Allowed {
		t.Fatalf("after the old admission expired: %+v %v, want allowed", dec, err)
	}
	// Without logging nothing is queued.
	plain := newEval(t, cfg, c)
	plain.Update(snapshot(c.t, TenantState{Tenant: "acme"}))
	if _, err := plain.Admit(Request{Tenant: "acme", GPUModel: h100, Count: 1, Duration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if rs, _ := plain.unwritten.take(); len(rs) != 0 {
		t.Errorf("an evaluator without a log queued %d records", len(rs))
	}
}
