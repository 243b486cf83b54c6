package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// TestCollectSimulatedVGPUHostStoresWhatEachVMRan runs the collector over
// half a simulated hour of a DGX host and a vGPU hypervisor (fixed share,
// equal share, best effort with and without utilization, MIG-backed
// vGPU, a passthrough GPU; VMs starting and stopping mid-interval, mapped
// by libvirt metadata, by vm rules or not at all) through the spool and
// shipper into a real ClickHouse, and checks the stored samples: per GPU
// and interval allocated + idle is the wall time exactly, and GPU time
// per VM and per tenant equals the simulator's ledger exactly.
func TestCollectSimulatedVGPUHostStoresWhatEachVMRan(t *testing.T) {
	const seed = 3
	d := 30 * time.Minute
	dsn := testDSN(t)
	code, _, stderr := gpumeter(t, "--clickhouse", dsn, "collect", "--simulate", "--vgpu", "--hosts", "1", "--seed", "3",
		"--spool", t.TempDir(), "--start", collectStart.Format(time.RFC3339), "--duration", d.String(), "--listen", "")
	if code != 0 {
		t.Fatalf("collect exit %d\n%s", code, stderr)
	}

	fleet, err := sim.New(sim.Config{Hosts: 1, VGPUHosts: 1, GPUsPerHost: 8, Seed: seed, Start: collectStart, Step: 10 * time.Second, Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := fleet.AdvanceTo(collectStart.Add(d)); err != nil {
		t.Fatal(err)
	}
	ledger := fleet.Ledger()
	var uuids []string
	for _, h := range fleet.Hosts() {
		for _, g := range h.GPUs() {
			uuids = append(uuids, g.UUID())
		}
	}

	ctx := context.Background()
	s := harness.OpenStore(t, dsn)
	type gpuInterval struct {
		gpu   string
		start time.Time
	}
	perInterval := map[gpuInterval]uint64{}
	byWorkload, byTenant := map[string]uint64{}, map[string]uint64{}
	skus := map[string]bool{}
	err = s.ScanSamples(ctx, uuids, collectStart, collectStart.Add(d), func(smp collectors.Sample) error {
		perInterval[gpuInterval{smp.GPUUUID, smp.Start}] += smp.GPUMicroseconds
		byTenant[smp.Tenant] += smp.GPUMicroseconds
		if strings.HasPrefix(smp.Workload, "vm/") {
			byWorkload[smp.Workload] += smp.GPUMicroseconds
		}
		skus[smp.SKU] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	intervals := int(d / (10 * time.Second))
	if len(perInterval) != len(uuids)*intervals {
		t.Fatalf("%d GPU-intervals stored, want %d GPUs × %d", len(perInterval), len(uuids), intervals)
	}
	for k, us := range perInterval {
		if us != 10_000_000 {
			t.Errorf("GPU %s at %s: allocated + idle = %d µs, want the 10 s interval", k.gpu, k.start.Format(time.TimeOnly), us)
		}
	}
	if len(ledger.GPUMicrosecondsByWorkload) < 8 {
		t.Fatalf("the simulated VMs ran too little to test: %v", ledger.GPUMicrosecondsByWorkload)
	}
	for vm, want := range ledger.GPUMicrosecondsByWorkload {
		if got := byWorkload[vm]; got != want {
			t.Errorf("%s: stored %d GPU-µs, the simulator ran %d (diff %d)", vm, got, want, int64(got)-int64(want))
		}
	}
	for vm := range byWorkload {
		if _, ok := ledger.GPUMicrosecondsByWorkload[vm]; !ok {
			t.Errorf("stored VM %s the simulator never ran", vm)
		}
	}
	for tenant, want := range ledger.GPUMicroseconds {
		if got := byTenant[tenant]; got != want {
			t.Errorf("tenant %q: stored %d GPU-µs, the simulator ran %d", tenant, got, want)
		}
	}
	if byTenant[collectors.UnattributedTenant] == 0 {
		t.Error("the unmapped VM's usage is missing from (unattributed)")
	}
	var vgpuSKUs []string
	for sku := range skus {
		if strings.Contains(sku, "/vgpu:") {
			vgpuSKUs = append(vgpuSKUs, sku)
		}
	}
	if len(vgpuSKUs) < 3 {
		t.Errorf("vGPU SKUs stored: %v", vgpuSKUs)
	}
	t.Logf("VMs: %d, vGPU SKUs: %v", len(byWorkload), vgpuSKUs)
}
