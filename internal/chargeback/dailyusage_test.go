package chargeback

import (
	"testing"
	"time"
)

func TestDailyUsage(t *testing.T) {
	d1 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	h := uint64(3_600_000_000)
	rows := []Row{
		{Tenant: "a", Department: "x", Hour: d1.Add(23 * time.Hour), GPUMicroseconds: h, SMActiveMicroseconds: h / 4},
		{Tenant: "b", Department: "y", Hour: d1.Add(1 * time.Hour), GPUMicroseconds: h / 2, SMActiveMicroseconds: h / 2},
		{Tenant: "", Hour: d1.Add(2 * time.Hour), GPUMicroseconds: h / 2},
		// The next UTC day, given in another zone: 2026-11-03 01:00 UTC.
		{Tenant: "a", Department: "x", Hour: time.Date(2026, 11, 3, 2, 0, 0, 0, time.FixedZone("CET", 3600)), GPUMicroseconds: h},
	}
	got := DailyUsage(rows)
	want := []DayUsage{
		{Day: d1, HeldGPUMicroseconds: h + h/2, SMActiveMicroseconds: h/4 + h/2, IdleGPUMicroseconds: h / 2},
		{Day: d1.AddDate(0, 0, 1), HeldGPUMicroseconds: h},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("day %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if DailyUsage(nil) == nil || len(DailyUsage(nil)) != 0 {
		t.Error("no rows: want an empty list")
	}
}
