package store

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/usage"
)

func TestUsageQueryToSQL(t *testing.T) {
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 1, 0)
	meters := "count() AS sample_count, sum(gpu_microseconds), sum(sm_active_microseconds), sum(mem_mib_seconds), max(mem_peak_bytes), sum(energy_millijoules), sum(pcie_tx_bytes), sum(pcie_rx_bytes), sum(nvlink_tx_bytes), sum(nvlink_rx_bytes), " + unmeasuredSums()
	cases := []struct {
		name     string
		q        usageQuery
		wantSQL  string
		wantArgs []any
	}{
		{
			name: "an API key's tenant scope filters on top of any filter, host from raw samples",
			q: usageQuery{From: from, To: to, GroupBy: []usage.Dimension{usage.DimHost}, Department: "research",
				Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}},
			wantSQL:  "SELECT toDateTime(0) AS bucket, '' AS no_tenant, '' AS no_department, '' AS no_sku, host, '' AS no_workload, " + meters + " FROM usage_samples FINAL WHERE start >= ? AND start < ? AND department = ? AND tenant = ? GROUP BY host ORDER BY host",
			wantArgs: []any{from, to, "research", "acme"},
		},
		{
			name:     "tenant by day from raw samples reads FINAL",
			q:        usageQuery{From: from, To: to, GroupBy: []usage.Dimension{usage.DimTenant}, Bucket: usage.BucketDay},
			wantSQL:  "SELECT toStartOfDay(start) AS bucket, tenant, '' AS no_department, '' AS no_sku, '' AS no_host, '' AS no_workload, " + meters + " FROM usage_samples FINAL WHERE start >= ? AND start < ? GROUP BY bucket, tenant ORDER BY bucket, tenant",
			wantArgs: []any{from, to},
		},
		{
			name:     "tenant scope adds the tenant predicate",
			q:        usageQuery{From: from, To: to, GroupBy: []usage.Dimension{usage.DimSKU}, Bucket: usage.BucketMonth, Tenant: "acme"},
			wantSQL:  "SELECT toDateTime(toStartOfMonth(start)) AS bucket, '' AS no_tenant, '' AS no_department, sku, '' AS no_host, '' AS no_workload, " + meters + " FROM usage_samples FINAL WHERE start >= ? AND start < ? AND tenant = ? GROUP BY bucket, sku ORDER BY bucket, sku",
			wantArgs: []any{from, to, "acme"},
		},
		{
			name:     "department scope and no grouping",
			q:        usageQuery{From: from, To: to, Department: "physics"},
			wantSQL:  "SELECT toDateTime(0) AS bucket, '' AS no_tenant, '' AS no_department, '' AS no_sku, '' AS no_host, '' AS no_workload, " + meters + " FROM usage_samples FINAL WHERE start >= ? AND start < ? AND department = ?",
			wantArgs: []any{from, to, "physics"},
		},
		{
			name:     "hourly rollup source sums sample counts",
			q:        usageQuery{From: from, To: to, GroupBy: []usage.Dimension{usage.DimTenant, usage.DimDepartment, usage.DimSKU}, Bucket: usage.BucketHour, Source: usage.SourceHourly},
			wantSQL:  "SELECT toStartOfHour(hour) AS bucket, tenant, department, sku, '' AS no_host, '' AS no_workload, " + strings.Replace(strings.Replace(meters, "count()", "sum(samples)", 1), unmeasuredSums(), "sum(sm_unmeasured_microseconds), sum(energy_unmeasured_microseconds), sum(pcie_unmeasured_microseconds), sum(nvlink_unmeasured_microseconds)", 1) + " FROM usage_hourly FINAL WHERE hour >= ? AND hour < ? AND samples > 0 GROUP BY bucket, tenant, department, sku ORDER BY bucket, tenant, department, sku",
			wantArgs: []any{from, to},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := usage.Query(tc.q).Validate(); err != nil {
				t.Fatal(err)
			}
			sql, args := tc.q.toSQL()
			if sql != tc.wantSQL {
				t.Errorf("sql:\n got %s\nwant %s", sql, tc.wantSQL)
			}
			if !reflect.DeepEqual(args, tc.wantArgs) {
				t.Errorf("args = %v, want %v", args, tc.wantArgs)
			}
		})
	}
}

func TestUsageQueryValidate(t *testing.T) {
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	cases := map[string]usageQuery{
		"to before from":      {From: from, To: from.Add(-time.Hour)},
		"missing range":       {},
		"unknown dimension":   {From: from, To: from.Add(time.Hour), GroupBy: []usage.Dimension{"host; DROP TABLE x"}},
		"duplicate dimension": {From: from, To: from.Add(time.Hour), GroupBy: []usage.Dimension{usage.DimSKU, usage.DimSKU}},
		"unknown bucket":      {From: from, To: from.Add(time.Hour), Bucket: "week"},
		"unknown source":      {From: from, To: from.Add(time.Hour), Source: "cache"},
		"to past DateTime":    {From: from, To: time.Date(2106, 3, 1, 0, 0, 0, 0, time.UTC)},
		"from before 1970":    {From: time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC), To: from},
		"host from rollups":   {From: from, To: from.Add(time.Hour), GroupBy: []usage.Dimension{usage.DimHost}, Source: usage.SourceHourly},
		"bad scope":           {From: from, To: from.Add(time.Hour), Scope: auth.Scope{Kind: "root"}},
	}
	for name, q := range cases {
		t.Run(name, func(t *testing.T) {
			if err := usage.Query(q).Validate(); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
