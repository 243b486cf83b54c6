package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// Rows in usage_hourly's key order (tenant, hour, department, SKU) become
// each tenant's rows per hour and SKU in hour and SKU order, departments
// summed (a peak by maximum), handed out when the next tenant begins and
// left intact until the one after; rows out of tenant or hour order are
// an error, never a wrong sum.
func TestTenantRowsSumsDepartmentsInKeyOrder(t *testing.T) {
	h := func(n int) time.Time { return time.Date(2026, 11, 1, n, 0, 0, 0, time.UTC) }
	row := func(tenant string, hour int, sku string, gpu, peak uint64) usage.Row {
		var r usage.Row
		r.Tenant, r.Bucket, r.SKU = tenant, h(hour), sku
		r.Values = meter.Values{GPUMicroseconds: gpu, MemPeakBytes: peak}
		return r
	}
	text := func(rows []usage.Row) string {
		var b strings.Builder
		for _, r := range rows {
			fmt.Fprintf(&b, "%s %d %s %d %d; ", r.Tenant, r.Bucket.Hour(), r.SKU, r.GPUMicroseconds, r.MemPeakBytes)
		}
		return b.String()
	}
	in := []usage.Row{
		row("acme", 0, "H100", 1, 5), // department ml
		row("acme", 0, "A100", 2, 0), // department research: A100 before H100 below
		row("acme", 0, "H100", 4, 3), // research
		row("acme", 1, "H100", 8, 0),
		row("beta", 0, "L4", 16, 0),
		row("beta", 0, "A100", 32, 0),
		row("gamma", 2, "H100", 64, 0),
	}
	var acc tenantRows
	var got []string
	var held []usage.Row // the rows handed out last: intact until the next are
	for _, r := range in {
		done, rows, err := acc.add(r)
		if err != nil {
			t.Fatal(err)
		}
		if rows != nil {
			got, held = append(got, done+": "+text(rows)), rows
		} else if held != nil && done == "" && got[len(got)-1] != held[0].Tenant+": "+text(held) {
			t.Errorf("after adding %s %d %s, the rows handed out became %s", r.Tenant, r.Bucket.Hour(), r.SKU, text(held))
		}
	}
	tenant, rows := acc.flush()
	got = append(got, tenant+": "+text(rows))
	want := []string{
		"acme: acme 0 A100 2 0; acme 0 H100 5 5; acme 1 H100 8 0; ",
		"beta: beta 0 A100 32 0; beta 0 L4 16 0; ",
		"gamma: gamma 2 H100 64 0; ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, rows := acc.flush(); rows != nil {
		t.Errorf("a second flush gave %s", text(rows))
	}

	for name, bad := range map[string][]usage.Row{
		"tenant": {row("beta", 0, "H100", 1, 0), row("acme", 0, "H100", 1, 0)},
		"hour":   {row("acme", 1, "H100", 1, 0), row("acme", 0, "H100", 1, 0)},
	} {
		var acc tenantRows
		var err error
		for _, r := range bad {
			if _, _, err = acc.add(r); err != nil {
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), "out of order") {
			t.Errorf("%s out of order: %v, want an error", name, err)
		}
	}
}

// The hourly read leaves its sort to servers whose FINAL reads in key
// order (18.x); others are asked for the key order.
func TestTenantHoursQueryOrder(t *testing.T) {
	q := tenantHoursQuery{From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		FirstTenant: "a", LastTenant: "b", Source: usage.SourceHourly}
	ordered, _ := q.toSQL()
	unordered, args := q.finalOrderSQL()
	if !strings.HasSuffix(ordered, " ORDER BY tenant, hour, department, sku") || ordered != unordered+" ORDER BY tenant, hour, department, sku" {
		t.Errorf("ordered: %s\nunordered: %s", ordered, unordered)
	}
	if strings.Contains(unordered, "ORDER BY") || !strings.Contains(unordered, "FROM usage_hourly FINAL") || len(args) != 4 {
		t.Errorf("unordered: %s %v", unordered, args)
	}
	for v, want := range map[Version]bool{{18, 16, 1}: true, {19, 1, 0}: false, {24, 3, 2}: false} {
		if finalInKeyOrder(v) != want {
			t.Errorf("%v: final in key order %v, want %v", v, !want, want)
		}
	}
}
