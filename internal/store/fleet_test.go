package store_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/partition"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
)

func fleetSample(host, gpu, model, mig, profile, tenant string, start time.Time) collectors.Sample {
	s := collectors.Sample{
		Host:       host,
		GPUUUID:    gpu,
		GPUModel:   model,
		MIGUUID:    mig,
		MIGProfile: profile,
		SKU:        gpucatalog.SKU(model, profile),
		Tenant:     tenant,
		Start:      start,
		End:        start.Add(10 * time.Second),
		Values:     meter.Values{GPUMicroseconds: 1_000_000},
	}
	if tenant != "" {
		s.Workload = "pod/" + tenant
	}
	device := gpu
	if mig != "" {
		device = mig
	}
	s.ID = collectors.SampleID(host, device, tenant, s.Workload, start)
	return s
}

// The fleet is each GPU's newest interval: instances as they are now, busy
// when a tenant holds them, whole GPUs MIG-disabled, stale GPUs and models
// without MIG tables left out, duplicate deliveries collapsed.
func TestFleetFromNewestSamples(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	t1 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	t0 := t1.Add(-10 * time.Second)
	h100, a100, h200 := "H100-SXM5-80GB", "A100-SXM4-40GB", "H200-SXM5-141GB"
	samples := []collectors.Sample{
		// GPU-a: a 1g was idle at t0 and is gone at t1; a new 1g is shared.
		fleetSample("node1", "GPU-a", h100, "MIG-a1", "3g.40gb", "acme", t0),
		fleetSample("node1", "GPU-a", h100, "MIG-a2", "1g.10gb", "", t0),
		fleetSample("node1", "GPU-a", h100, "MIG-a1", "3g.40gb", "acme", t1),
		fleetSample("node1", "GPU-a", h100, "MIG-a3", "1g.10gb", "globex", t1),
		fleetSample("node1", "GPU-a", h100, "MIG-a3", "1g.10gb", "beta", t1),
		fleetSample("node1", "GPU-a", h100, "", "", "", t1), // unpartitioned slices
		// GPU-b: a whole GPU.
		fleetSample("node1", "GPU-b", a100, "", "", "acme", t1),
		// GPU-c: no MIG table for this model.
		fleetSample("node1", "GPU-c", "L40S", "", "", "acme", t1),
		// GPU-d: stopped reporting an hour ago.
		fleetSample("node2", "GPU-d", h100, "MIG-d1", "7g.80gb", "", t1.Add(-time.Hour)),
		// GPU-e: an idle instance, reported one interval behind the newest.
		fleetSample("node2", "GPU-e", h200, "MIG-e1", "7g.141gb", "", t0),
	}
	for range 2 { // at-least-once delivery
		if err := s.InsertSamples(ctx, samples); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := s.FleetSamples(ctx, store.FleetQuery{Window: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got, skipped := partition.FleetFromSamples(rows)
	if len(skipped) != 1 || skipped[0].UUID != "GPU-c" || skipped[0].Reason == "" {
		t.Errorf("skipped %+v, want GPU-c (L40S) with a reason", skipped)
	}
	want := partition.Fleet{GPUs: []partition.GPU{
		{Host: "node1", UUID: "GPU-a", Model: h100, Instances: []partition.Instance{
			{Profile: "3g.40gb", UUID: "MIG-a1", Tenant: "acme", Busy: true},
			{Profile: "1g.10gb", UUID: "MIG-a3", Tenant: "beta", Busy: true},
		}},
		{Host: "node1", UUID: "GPU-b", Model: a100, MIGDisabled: true},
		{Host: "node2", UUID: "GPU-e", Model: h200, Instances: []partition.Instance{
			{Profile: "7g.141gb", UUID: "MIG-e1"},
		}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Fleet() =\n%+v\nwant\n%+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("fleet does not validate: %v", err)
	}
	// The planner infers the placements the samples lack.
	plan, err := partition.Solve(got, partition.Demand{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range plan.GPUs[0].Instances {
		if !in.Inferred {
			t.Errorf("%+v: want an inferred placement", in)
		}
	}
}

func TestFleetOfAnEmptyTable(t *testing.T) {
	s := storetest.New(t)
	got, err := s.FleetSamples(context.Background(), store.FleetQuery{Window: time.Minute})
	if err != nil || len(got) != 0 {
		t.Errorf("FleetSamples() = %+v, %v; want none", got, err)
	}
}

func TestFleetQueryValidate(t *testing.T) {
	if err := (store.FleetQuery{}).Validate(); err == nil || !strings.Contains(err.Error(), "window") {
		t.Errorf("Validate() = %v, want a window problem", err)
	}
	if err := (store.FleetQuery{Window: time.Minute}).Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
}
