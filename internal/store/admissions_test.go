package store_test

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/schemas"
)

// The admission log on a real ClickHouse: held parts read back exactly
// (decimals to 18 places, the expiry rounded up to the second); a part
// written again as released, and one expired, are not held.
func TestAdmissionLog(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	d := func(v string) decimal.Decimal { return decimal.RequireFromString(v) }
	held := quota.Admitted{ID: "adm-1-1", Tenant: "acme", Department: "research", GPUModel: "H100-SXM5-80GB",
		Demand:  quota.Demand{GPUs: d("0.375"), GPUHours: d("0.123456789012345678"), Spend: d("12.5")},
		Expires: now.Add(10*time.Minute + 300*time.Millisecond)}
	started := quota.Admitted{ID: "adm-1-2", Tenant: "acme", GPUModel: "A100-SXM4-80GB", Demand: quota.Demand{GPUs: d("2")}, Expires: now.Add(time.Minute)}
	expired := quota.Admitted{ID: "adm-1-3", Tenant: "acme", GPUModel: "A100-SXM4-80GB", Part: 1, Demand: quota.Demand{GPUs: d("1")}, Expires: now.Add(-time.Second)}
	if err := s.SaveAdmissions(ctx, []quota.Admitted{held, started, expired}); err != nil {
		t.Fatal(err)
	}
	started.Released = true
	if err := s.SaveAdmissions(ctx, []quota.Admitted{started}); err != nil {
		t.Fatal(err)
	}
	got, err := s.HeldAdmissions(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("held admissions: %+v, want adm-1-1 alone", got)
	}
	g := got[0]
	want := held
	want.Expires = now.Add(10*time.Minute + time.Second)
	if g.ID != want.ID || g.Part != 0 || g.Tenant != want.Tenant || g.Department != want.Department || g.GPUModel != want.GPUModel ||
		!g.Demand.GPUs.Equal(want.Demand.GPUs) || !g.Demand.GPUHours.Equal(want.Demand.GPUHours) || !g.Demand.Spend.Equal(want.Demand.Spend) ||
		!g.Expires.Equal(want.Expires) || g.Released {
		t.Errorf("held admission read back as %+v, want %+v", g, want)
	}
}

// Credit holds on a real ClickHouse: money and included hours of a class
// and of any SKU read back exactly (18 places), the end rounded up to the
// second; a replayed write is read once; holds ended by since are not
// read.
func TestCreditHoldLog(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	d := func(v string) decimal.Decimal { return decimal.RequireFromString(v) }
	hours := quota.CreditHold{Tenant: "astro", Hold: credits.Hold{ID: "adm-1-1", Money: d("1.285714285714285714"),
		Hours: map[string]decimal.Decimal{"H100-SXM5-80GB": d("0.428571428571428571"), "": d("2")}, Until: now.Add(time.Hour + 300*time.Millisecond)}}
	money := quota.CreditHold{Tenant: "astro", Hold: credits.Hold{ID: "adm-1-2", Money: d("6"), Until: now.Add(-2 * time.Hour)}}
	ended := quota.CreditHold{Tenant: "globex", Hold: credits.Hold{ID: "adm-1-3", Money: d("3"), Until: now.Add(-25 * time.Hour)}}
	for range 2 {
		if err := s.SaveCreditHolds(ctx, []quota.CreditHold{hours, money, ended}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.CreditHolds(ctx, now.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("credit holds: %+v, want adm-1-1 and adm-1-2, once each", got)
	}
	h, m := got[0], got[1]
	if h.Tenant != "astro" || h.ID != "adm-1-1" || !h.Money.Equal(hours.Money) || len(h.Hours) != 2 ||
		!h.Hours["H100-SXM5-80GB"].Equal(hours.Hours["H100-SXM5-80GB"]) || !h.Hours[""].Equal(d("2")) ||
		!h.Until.Equal(now.Add(time.Hour+time.Second)) {
		t.Errorf("hold with hours read back as %+v, want %+v (its end rounded up)", h, hours)
	}
	if m.Tenant != "astro" || m.ID != "adm-1-2" || !m.Money.Equal(d("6")) || len(m.Hours) != 0 || !m.Until.Equal(money.Until) {
		t.Errorf("money hold read back as %+v, want %+v", m, money)
	}
}

// Retention prunes the admission log on 18.16 (no TTL): rows that ended
// more than rollup.AdmissionLogRetention ago are deleted, released ones
// and every row of a hold with included hours too; rows held, and rows
// that ended within the retention (a credit hold that ended 23 hours ago
// is still read by a rebuild), are kept; what a rebuild reads is the same
// before and after, and a second run deletes nothing.
func TestRetentionPrunesAdmissionLog(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	keep := rollup.AdmissionLogRetention
	gpus := quota.Demand{GPUs: decimal.NewFromInt(1)}
	part := func(id string, expires time.Time) quota.Admitted {
		return quota.Admitted{ID: id, Tenant: "acme", GPUModel: "H100-SXM5-80GB", Demand: gpus, Expires: expires}
	}
	hold := func(id string, until time.Time, hours bool) quota.CreditHold {
		h := quota.CreditHold{Tenant: "astro", Hold: credits.Hold{ID: id, Money: decimal.NewFromInt(6), Until: until}}
		if hours {
			h.Hours = map[string]decimal.Decimal{"H100-SXM5-80GB": decimal.NewFromInt(2), "": decimal.NewFromInt(1)}
		}
		return h
	}
	parts := []quota.Admitted{
		part("held", now.Add(10*time.Minute)),
		part("expired-2d", now.Add(-48*time.Hour)),
		part("within-retention", now.Add(-keep+time.Minute)),
		part("past-retention", now.Add(-keep-time.Minute)),
		part("month-old", now.AddDate(0, 0, -30)),
	}
	released := []quota.Admitted{parts[1], parts[3]}
	for i := range released {
		released[i].Released = true
	}
	holds := []quota.CreditHold{
		hold("live", now.Add(time.Hour), true),
		hold("ended-23h", now.Add(-23*time.Hour), false),
		hold("ended-25h", now.Add(-25*time.Hour), true),
		hold("past-retention", now.Add(-keep-time.Minute), true),
		hold("month-old", now.AddDate(0, 0, -30), false),
	}
	if err := s.SaveAdmissions(ctx, parts); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveAdmissions(ctx, released); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveCreditHolds(ctx, holds); err != nil {
		t.Fatal(err)
	}
	// What a new leader reads (quota.Service.Rebuild: parts not expired
	// at now, holds that ended less than a day ago).
	rebuild := func() ([]quota.Admitted, []quota.CreditHold) {
		t.Helper()
		as, err := s.HeldAdmissions(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		hs, err := s.CreditHolds(ctx, now.Add(-24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return as, hs
	}
	rows := func(table string) uint64 {
		t.Helper()
		n, err := s.CountForTest(ctx, "SELECT count() FROM "+table)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	heldBefore, holdsBefore := rebuild()
	if len(heldBefore) != 1 || len(holdsBefore) != 2 {
		t.Fatalf("before retention a rebuild reads %d parts and %d holds, want 1 and 2", len(heldBefore), len(holdsBefore))
	}
	// 7 part rows (2 parts released again), 11 hold rows (3 for each of
	// the 3 holds with hours).
	if a, h := rows("quota_admissions"), rows("credit_holds"); a != 7 || h != 11 {
		t.Fatalf("stored %d admission rows and %d hold rows, want 7 and 11", a, h)
	}

	ret := rollup.NewRetention(s, rollup.RetentionConfig{RawDays: 90, Schedule: "@daily"}, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	// The dry run counts what the run deletes (3 part rows, 4 hold rows),
	// and deletes nothing.
	if n, before, err := ret.PlanAdmissionLog(ctx); err != nil || n != 7 || !before.Equal(now.Add(-rollup.AdmissionLogRetention).Truncate(time.Second)) {
		t.Fatalf("PlanAdmissionLog = %d rows before %s (%v), want 7 before %s", n, before, err, now.Add(-rollup.AdmissionLogRetention))
	}
	if a, h := rows("quota_admissions"), rows("credit_holds"); a != 7 || h != 11 {
		t.Fatalf("after the dry run %d admission rows and %d hold rows, want 7 and 11", a, h)
	}
	for run := 1; run <= 2; run++ {
		if _, err := ret.Run(ctx); err != nil {
			t.Fatalf("retention run %d: %v", run, err)
		}
		if n, _, err := ret.PlanAdmissionLog(ctx); err != nil || n != 0 {
			t.Errorf("after retention run %d the dry run counts %d rows (%v), want 0", run, n, err)
		}
		// Gone: past-retention (held and released rows), month-old; of
		// the holds past-retention (3 rows) and month-old.
		if a, h := rows("quota_admissions"), rows("credit_holds"); a != 4 || h != 7 {
			t.Errorf("after retention run %d: %d admission rows and %d hold rows, want 4 and 7", run, a, h)
		}
		for _, q := range []string{
			"SELECT count() FROM quota_admissions WHERE admission_id IN ('past-retention', 'month-old')",
			"SELECT count() FROM credit_holds WHERE admission_id IN ('past-retention', 'month-old')",
			"SELECT count() FROM quota_admissions WHERE admission_id = 'within-retention'",
		} {
			n, err := s.CountForTest(ctx, q)
			want := uint64(0)
			if strings.Contains(q, "within-retention") {
				want = 1
			}
			if err != nil || n != want {
				t.Errorf("after retention run %d, %s: %d (%v), want %d", run, q, n, err, want)
			}
		}
		heldAfter, holdsAfter := rebuild()
		if !reflect.DeepEqual(heldAfter, heldBefore) || !reflect.DeepEqual(holdsAfter, holdsBefore) {
			t.Errorf("after retention run %d a rebuild reads %+v and %+v, want %+v and %+v", run, heldAfter, holdsAfter, heldBefore, holdsBefore)
		}
	}
}

// Newer servers expire the admission log by TTL (migration 0018) after
// the same retention as the job that prunes it on 18.16.
func TestAdmissionLogTTLMatchesRetention(t *testing.T) {
	migs, err := store.LoadMigrations(schemas.FS)
	if err != nil {
		t.Fatal(err)
	}
	days := int(rollup.AdmissionLogRetention / (24 * time.Hour))
	want := map[string]bool{
		fmt.Sprintf("ALTER TABLE quota_admissions MODIFY TTL expires_at + INTERVAL %d DAY", days): true,
		fmt.Sprintf("ALTER TABLE credit_holds MODIFY TTL held_until + INTERVAL %d DAY", days):     true,
	}
	for _, m := range migs {
		for _, stmt := range m.Statements {
			if want[stmt] {
				if m.MinServer == nil {
					t.Errorf("migration %04d_%s sets a TTL without -- min_server: 18.16 has no TTL", m.Version, m.Name)
				}
				delete(want, stmt)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("no migration runs %v (rollup.AdmissionLogRetention is %s)", want, rollup.AdmissionLogRetention)
	}
}
