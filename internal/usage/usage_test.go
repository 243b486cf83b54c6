package usage

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/pricing"
)

func TestRequestValidate(t *testing.T) {
	from := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	ok := Request{Scope: auth.Scope{Kind: auth.KindAdmin}, From: from, To: from.AddDate(0, 1, 0), Step: "day", Location: time.UTC,
		GroupBy: []Dimension{DimTenant, DimSKU}, Meters: []pricing.Meter{pricing.GPUHours}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a month by day: %v", err)
	}
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Request)
		want string
	}{
		{"backwards", func(r *Request) { r.To = r.From.Add(-time.Hour) }, "to: must be after from"},
		{"over the range", func(r *Request) { r.To = r.From.AddDate(2, 0, 0) }, "at most 400 days"},
		{"off the hour", func(r *Request) { r.From = r.From.Add(time.Minute) }, "whole hours"},
		{"before 1971", func(r *Request) {
			r.From, r.To = time.Date(1970, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(1970, 3, 1, 0, 0, 0, 0, time.UTC)
		}, "outside 1971..2105"},
		{"half-hour zone", func(r *Request) { r.Location = kolkata }, "not a whole hour"},
		{"no zone", func(r *Request) { r.Location = nil }, "tz: required"},
		{"no step", func(r *Request) { r.Step = "" }, `step "": want hour, day or month`},
		{"unknown dimension", func(r *Request) { r.GroupBy = []Dimension{"gpu"} }, `group_by "gpu"`},
		{"dimension twice", func(r *Request) { r.GroupBy = []Dimension{DimSKU, DimSKU} }, `group_by: "sku" twice`},
		{"meter twice", func(r *Request) { r.Meters = []pricing.Meter{pricing.GPUHours, pricing.GPUHours} }, `meters: "gpu_hours" twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			err := r.Validate()
			if !fault.IsValidation(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a validation error with %q", err, tc.want)
			}
		})
	}
}

func TestCostRequestValidate(t *testing.T) {
	acme := auth.Scope{Kind: auth.KindTenant, Name: "acme"}
	admin := auth.Scope{Kind: auth.KindAdmin}
	for _, tc := range []struct {
		name     string
		r        CostRequest
		notFound bool
		want     string // "" for valid
	}{
		{"a tenant key, its own by default", CostRequest{Scope: acme}, false, ""},
		{"a tenant key naming itself", CostRequest{Scope: acme, Tenant: "acme", Month: "2026-10"}, false, ""},
		{"a tenant key naming another", CostRequest{Scope: acme, Tenant: "globex"}, true, `tenant "globex": not found`},
		{"an admin key names a tenant", CostRequest{Scope: admin}, false, "tenant: required for a admin key"},
		{"not a month", CostRequest{Scope: admin, Tenant: "acme", Month: "2026-13"}, false, "month: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "":
			case tc.notFound && !fault.IsNotFound(err), !tc.notFound && !fault.IsValidation(err), !strings.Contains(err.Error(), tc.want):
				t.Fatalf("err %v, want %q (not found: %v)", err, tc.want, tc.notFound)
			}
		})
	}
}

// fakeStore answers every query with one row of an hour's GPU time per
// hour of its range, and records the queries.
type fakeStore struct {
	state rollup.State
	asked []Query
}

func (f *fakeStore) Usage(_ context.Context, q Query) ([]Row, error) {
	f.asked = append(f.asked, q)
	var out []Row
	for h := q.From; h.Before(q.To); h = h.Add(time.Hour) {
		out = append(out, Row{Bucket: h, Tenant: "acme", Samples: 1, Totals: meter.Totals{Values: meter.Values{GPUMicroseconds: 3_600_000_000}}})
	}
	return out, nil
}

func (f *fakeStore) LoadRollupState(context.Context, string) (rollup.State, bool, error) {
	return f.state, true, nil
}

func (f *fakeStore) RawDroppedBefore(context.Context) (time.Time, error) { return time.Time{}, nil }

// Hours the rollup closed come from the rollup, later ones from raw
// samples; buckets are the step's in the request's zone.
func TestUsageReadsRollupsThenRawSamples(t *testing.T) {
	from := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	closed := from.Add(30 * time.Hour)
	st := &fakeStore{state: rollup.State{ClosedThrough: closed, CompletedVersion: 1}}
	svc := New(st, billing.Customers{}, time.Now)
	res, err := svc.Usage(context.Background(), Request{Scope: auth.Scope{Kind: auth.KindAdmin}, From: from, To: from.Add(48 * time.Hour),
		Step: "day", Location: time.UTC, GroupBy: []Dimension{DimTenant}, Meters: []pricing.Meter{pricing.GPUHours}})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.asked) != 2 || st.asked[0].Source != SourceHourly || !st.asked[0].To.Equal(closed) ||
		st.asked[1].Source != SourceRaw || !st.asked[1].From.Equal(closed) {
		t.Fatalf("asked %+v, want the rollup up to %s and raw samples after", st.asked, closed)
	}
	if !res.RolledUpThrough.Equal(closed) || len(res.Points) != 2 {
		t.Fatalf("result %+v", res)
	}
	for i, p := range res.Points {
		if want := from.AddDate(0, 0, i); !p.Bucket.Equal(want) || p.Samples != 24 || !p.Quantities[pricing.GPUHours].Equal(decimal.NewFromInt(24)) {
			t.Errorf("point %d: %+v, want 24 GPU-hours on %s", i, p, want)
		}
	}
}

// seenStore has usage of acme in raw samples only.
type seenStore struct{ fakeStore }

func (s *seenStore) Usage(_ context.Context, q Query) ([]Row, error) {
	s.asked = append(s.asked, q)
	if q.Tenant == "acme" && q.Source == SourceRaw {
		return []Row{{Tenant: "acme", Samples: 2}}, nil
	}
	return nil, nil
}

func TestSeenLooksInRollupsThenRawSamples(t *testing.T) {
	st := &seenStore{}
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if ok, err := Seen(context.Background(), st, "acme", now); !ok || err != nil {
		t.Errorf("acme: %v, %v", ok, err)
	}
	if ok, err := Seen(context.Background(), st, "acmee", now); ok || err != nil {
		t.Errorf("acmee: %v, %v", ok, err)
	}
	if len(st.asked) != 4 || st.asked[0].Source != SourceHourly || !st.asked[0].To.Equal(now) {
		t.Errorf("asked %+v", st.asked)
	}
}
