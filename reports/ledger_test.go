package reports

import (
	"bytes"
	"testing"
	"time"
)

func TestWriteSimLedger(t *testing.T) {
	start := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	err := WriteSimLedger(&b, SimLedger{Hosts: 2, Start: start, End: start.Add(time.Hour), Written: 5760, Tenants: []SimTenant{
		{Tenant: "", GPUMicroseconds: 1_500_000, EnergyMillijoules: 3.6e9},
		{Tenant: "acme", GPUMicroseconds: 7_200_000_001, EnergyMillijoules: 1.8e9},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := "simulated 2 hosts from 2026-03-02T08:00:00Z to 2026-03-02T09:00:00Z: 5760 samples written\n" +
		"  tenant  gpu-seconds  energy-kWh\n" +
		"  (idle)     1.500000       1.000\n" +
		"    acme  7200.000001       0.500\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}
