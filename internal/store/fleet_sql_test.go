package store

import (
	"reflect"
	"testing"
	"time"
)

func TestFleetQueryToSQL(t *testing.T) {
	since := time.Date(2026, 11, 1, 10, 0, 0, 0, time.FixedZone("CET", 3600))
	sql, args := FleetQuery{Window: time.Minute}.toSQL(since)
	want := "SELECT host, gpu_uuid, gpu_model, mig_uuid, mig_profile, tenant FROM usage_samples" +
		" WHERE start >= ? AND (gpu_uuid, start) GLOBAL IN" +
		" (SELECT gpu_uuid, max(start) FROM usage_samples WHERE start >= ? GROUP BY gpu_uuid)" +
		" ORDER BY gpu_uuid, mig_uuid, tenant"
	if sql != want {
		t.Errorf("sql:\n got %s\nwant %s", sql, want)
	}
	if wantArgs := []any{since.UTC(), since.UTC()}; !reflect.DeepEqual(args, wantArgs) {
		t.Errorf("args = %v, want %v (UTC, both bounds)", args, wantArgs)
	}
	if err := (FleetQuery{}).Validate(); err == nil {
		t.Error("a zero window was accepted")
	}
}
