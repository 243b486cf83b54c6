package billing

import (
	"context"
	"time"

	"github.com/gpumeter/gpumeter/internal/chargeback"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
)

// HourlyMeters is one hour of stored usage of one SKU by one tenant (idle
// capacity: tenant ""), as the hourly rollups hold it: stored units,
// summed. Department and Unmeasured are filled where the read groups by
// them (chargeback).
type HourlyMeters struct {
	Hour       time.Time
	Tenant     string
	Department string
	SKU        string
	meter.Totals
}

// HourlyUsageReader reads hourly rollups of [from, to) per tenant and
// SKU; tenant "" reads every tenant.
type HourlyUsageReader interface {
	HourlyUsage(ctx context.Context, from, to time.Time, tenant string) ([]HourlyMeters, error)
}

// LoadTenantUsage is every tenant's hourly usage of [from, to) in
// price-book units (tenant "" for all tenants).
func LoadTenantUsage(ctx context.Context, st HourlyUsageReader, from, to time.Time, tenant string) (map[string]TenantUsage, error) {
	hours, err := st.HourlyUsage(ctx, from, to, tenant)
	if err != nil {
		return nil, err
	}
	out := map[string]TenantUsage{}
	for _, h := range hours {
		tu := out[h.Tenant]
		tu.Usage = append(tu.Usage, pricing.UsageOf(h.Hour.UTC(), h.SKU, h.Values)...)
		out[h.Tenant] = tu
	}
	return out, nil
}

// UnassignedDepartment is the department of tenant usage no mapping
// named a department for: chargeback reports it under this name.
const UnassignedDepartment = "(unassigned)"

// chargebackRows turns the hourly rollups into chargeback rows with the
// same usage in price-book units. Idle capacity has no department; a
// tenant without one is UnassignedDepartment.
func chargebackRows(hours []HourlyMeters) []UsageRow {
	out := make([]UsageRow, 0, len(hours))
	for _, h := range hours {
		dept := h.Department
		if h.Tenant == "" {
			dept = ""
		} else if dept == "" {
			dept = UnassignedDepartment
		}
		hour := h.Hour.UTC()
		r := chargeback.Row{Department: dept, Tenant: h.Tenant, SKU: h.SKU, Hour: hour,
			GPUMicroseconds: h.GPUMicroseconds, SMActiveMicroseconds: h.SMActiveMicroseconds, MemMiBSeconds: h.MemMiBSeconds,
			EnergyMillijoules: h.EnergyMillijoules,
			Unmeasured:        h.Unmeasured}
		out = append(out, UsageRow{Row: r, Usage: pricing.UsageOf(hour, h.SKU, h.Values)})
	}
	return out
}
