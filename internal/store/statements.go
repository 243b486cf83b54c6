package store

import (
	"time"
)

// Statement is one SQL statement the store builds, with its bind arguments,
// exported so that a check can run the store's own SQL on another server
// (internal/chdbcheck runs it on chDB, ClickHouse 26.x, beside 18.16).
type Statement struct {
	Name string
	SQL  string
	Args []any
	// Exec: the statement writes (INSERT … SELECT) and returns no rows.
	Exec bool
}

// CheckedStatements is a representative set of the statements the store
// runs, in an order that works on a migrated database holding samples in
// [from, to): the hourly rollup and its tombstones (at version) first, then
// reads of raw samples and of the rollups, for every tenant and for tenant.
// Every read has a deterministic row order (ORDER BY, or a caller sorts).
func CheckedStatements(from, to time.Time, tenant string, version uint64) []Statement {
	from, to = from.UTC(), to.UTC()
	var out []Statement
	out = append(out,
		Statement{Name: "rollup", SQL: rollupSQL, Args: []any{version, from, to}, Exec: true},
		Statement{Name: "rollup tombstones", SQL: tombstoneSQL, Args: []any{version, from, to, version, from, to}, Exec: true},
	)
	usage := []struct {
		name string
		q    UsageQuery
	}{
		{"usage raw total", UsageQuery{From: from, To: to}},
		{"usage raw by tenant, department, sku per hour", UsageQuery{From: from, To: to, Bucket: BucketHour,
			GroupBy: []Dimension{DimTenant, DimDepartment, DimSKU}}},
		{"usage raw by host, workload per day", UsageQuery{From: from, To: to, Bucket: BucketDay,
			GroupBy: []Dimension{DimHost, DimWorkload}}},
		{"usage raw of a tenant per month", UsageQuery{From: from, To: to, Bucket: BucketMonth, Tenant: tenant,
			GroupBy: []Dimension{DimSKU}}},
		{"usage hourly by tenant, sku per hour", UsageQuery{From: from, To: to, Bucket: BucketHour, Source: SourceHourly,
			GroupBy: []Dimension{DimTenant, DimSKU}}},
		{"usage hourly of a tenant per day", UsageQuery{From: from, To: to, Bucket: BucketDay, Source: SourceHourly,
			Tenant: tenant, GroupBy: []Dimension{DimDepartment}}},
	}
	for _, u := range usage {
		sql, args := u.q.toSQL()
		out = append(out, Statement{Name: u.name, SQL: sql, Args: args})
	}
	sql, args := billingUsageSQL(from, to, "")
	out = append(out, Statement{Name: "billing usage", SQL: sql, Args: args})
	sql, args = billingUsageSQL(from, to, tenant)
	out = append(out, Statement{Name: "billing usage of a tenant", SQL: sql, Args: args})
	out = append(out, Statement{Name: "live concurrency (argMax)", SQL: liveConcurrencySQL, Args: []any{from, to}})
	out = append(out,
		Statement{Name: "chargeback usage", SQL: chargebackUsageSQL, Args: []any{from, to}},
		Statement{Name: "rollup versions", SQL: rollupVersionsSQL, Args: []any{from, to}},
		// Every copy of the check's data was inserted after 1970.
		Statement{Name: "hours inserted since", SQL: hoursInsertedSinceSQL, Args: []any{time.Unix(1, 0).UTC(), to}},
	)
	sql, args = FleetQuery{Window: to.Sub(from)}.toSQL(from)
	out = append(out, Statement{Name: "fleet", SQL: sql, Args: args})

	// Insights (internal/insights): holdings, hourly series, model demand.
	for _, iq := range []struct {
		name string
		q    InsightsQuery
	}{{"insights", InsightsQuery{From: from, To: to}}, {"insights of a tenant", InsightsQuery{From: from, To: to, Tenant: tenant}}} {
		sql, args = iq.q.holdingsSQL()
		out = append(out, Statement{Name: iq.name + " holdings", SQL: sql, Args: args})
		sql, args = iq.q.hourlyGPUSQL()
		out = append(out, Statement{Name: iq.name + " hourly gpu_hours", SQL: sql, Args: args})
	}
	sql, args = InsightsQuery{From: from, To: to}.demandSQL()
	out = append(out,
		Statement{Name: "insights model demand", SQL: sql, Args: args},
		Statement{Name: "insights gpus by model", SQL: gpusByModelSQL, Args: []any{from, to}},
		Statement{Name: "insights first hour", SQL: firstHourSQL},
	)
	return out
}
