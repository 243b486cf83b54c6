package billing

import (
	"context"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
)

func TestChargebackRowsDepartmentsAndUnits(t *testing.T) {
	hour := time.Date(2026, 11, 3, 4, 0, 0, 0, time.UTC)
	hours := []HourlyMeters{
		{Hour: hour, Tenant: "", Department: "stale", SKU: "H100-SXM5-80GB", Totals: meter.Totals{Values: meter.Values{GPUMicroseconds: 1_800_000_000}}},
		{Hour: hour, Tenant: "acme", SKU: "H100-SXM5-80GB", Totals: meter.Totals{
			Values:     meter.Values{GPUMicroseconds: 3_600_000_000, EnergyMillijoules: 1_800_000_000},
			Unmeasured: meter.Of(meter.UnmeasuredSMActive|meter.UnmeasuredNVLink, 3_600_000_000)}},
		{Hour: hour, Tenant: "beta", Department: "physics", SKU: "H100-SXM5-80GB", Totals: meter.Totals{Values: meter.Values{GPUMicroseconds: 1}}},
	}
	rows := chargebackRows(hours)
	for i, want := range []string{"", UnassignedDepartment, "physics"} {
		if rows[i].Row.Department != want {
			t.Errorf("row %d (tenant %q): department %q, want %q", i, hours[i].Tenant, rows[i].Row.Department, want)
		}
	}
	acme := rows[1]
	if acme.Row.Unmeasured[meter.GroupSMActive] != 3_600_000_000 || acme.Row.Unmeasured[meter.GroupEnergy] != 0 {
		t.Errorf("acme unmeasured %+v, want SM-active only", acme.Row.Unmeasured)
	}
	if len(acme.Usage) != 2 || acme.Usage[0].Meter != pricing.GPUHours || acme.Usage[0].Quantity.String() != "1" ||
		acme.Usage[1].Meter != "energy_kwh" || acme.Usage[1].Quantity.String() != "0.5" {
		t.Errorf("acme usage %+v, want 1 GPU-hour and 0.5 kWh", acme.Usage)
	}
}

type hourlyFake []HourlyMeters

func (f hourlyFake) HourlyUsage(context.Context, time.Time, time.Time, string) ([]HourlyMeters, error) {
	return f, nil
}

func TestLoadTenantUsageGroupsByTenant(t *testing.T) {
	hour := time.Date(2026, 11, 3, 4, 0, 0, 0, time.UTC)
	f := hourlyFake{
		{Hour: hour, Tenant: "acme", SKU: "A", Totals: meter.Totals{Values: meter.Values{GPUMicroseconds: 3_600_000_000}}},
		{Hour: hour.Add(time.Hour), Tenant: "acme", SKU: "A", Totals: meter.Totals{Values: meter.Values{GPUMicroseconds: 1_800_000_000}}},
		{Hour: hour, Tenant: "beta", SKU: "A"}, // nothing measured: no usage rows
	}
	got, err := LoadTenantUsage(context.Background(), f, hour, hour.Add(2*time.Hour), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got["acme"].Usage) != 2 || got["acme"].Usage[1].Quantity.String() != "0.5" || len(got["beta"].Usage) != 0 {
		t.Fatalf("usage %+v", got)
	}
}
