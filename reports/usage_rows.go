package reports

import (
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/pricing"
)

// usageRecord is a store row as usage -o json prints it (and quote reads
// it back): every meter in its price-book unit, exact decimal text.
func usageRecord(r usage.Row) pricing.UsageRecord {
	j := pricing.UsageRecord{Tenant: r.Tenant, Department: r.Department, SKU: r.SKU, Host: r.Host, Workload: r.Workload, Samples: r.Samples}
	j.Quantities, j.Unmeasured = pricing.QuantitiesOf(r.Totals)
	if !r.Bucket.IsZero() {
		b := r.Bucket
		j.Bucket = &b
	}
	return j
}

// UsageRecords are the rows as usage -o json prints them.
func UsageRecords(rows []usage.Row) []pricing.UsageRecord {
	out := make([]pricing.UsageRecord, 0, len(rows))
	for _, r := range rows {
		out = append(out, usageRecord(r))
	}
	return out
}

// UsageTableOf is what the usage table of q prints; the total is summed
// in the store's integer units, then converted once.
func UsageTableOf(rows []usage.Row, q usage.Query) UsageTable {
	t := UsageTable{ByBucket: q.Bucket != usage.BucketNone, Rows: UsageRecords(rows)}
	for _, d := range q.GroupBy {
		switch d {
		case usage.DimTenant:
			t.ByTenant = true
		case usage.DimDepartment:
			t.ByDepartment = true
		case usage.DimSKU:
			t.BySKU = true
		case usage.DimHost:
			t.ByHost = true
		case usage.DimWorkload:
			t.ByWorkload = true
		}
	}
	var total usage.Row
	for _, r := range rows {
		total.Totals = total.Totals.Add(r.Totals)
		total.Samples += r.Samples
	}
	t.Total = usageRecord(total)
	return t
}
