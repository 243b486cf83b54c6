package nvml_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/nvml"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/internal/meter"
)

const tenants = `
namespace team-a  alpha  physics
namespace team-b  beta   chemistry
namespace team-c  gamma  biology
`

func TestMIGInstancesOfDifferentTenants(t *testing.T) {
	r := newRig(t, "H100-SXM5-80GB", interval, tenants)
	insts, err := r.host.GPU(0).EnableMIG("1g.10gb", "2g.20gb", "3g.40gb")
	if err != nil {
		t.Fatal(err)
	}
	r.pod(0, insts[0].UUID(), "team-a", 30, 4)
	r.pod(0, insts[1].UUID(), "team-b", 60, 10)
	r.pod(0, insts[2].UUID(), "team-c", 90, 20)
	r.prime()
	readings, samples := r.poll()
	checkInvariants(t, readings, samples)

	g := readings[0]
	if !g.MIG || g.TotalMilliSlices != 7000 || len(g.Instances) != 3 {
		t.Fatalf("mig %v total %d instances %d, want MIG with 7000 milli-slices and 3 instances", g.MIG, g.TotalMilliSlices, len(g.Instances))
	}
	wantProfile := map[string]string{insts[0].UUID(): "1g.10gb", insts[1].UUID(): "2g.20gb", insts[2].UUID(): "3g.40gb"}
	wantSlices := map[string]uint64{insts[0].UUID(): 1000, insts[1].UUID(): 2000, insts[2].UUID(): 3000}
	for _, in := range g.Instances {
		if in.Profile != wantProfile[in.UUID] || in.MilliSlices != wantSlices[in.UUID] {
			t.Errorf("instance %s: profile %q slices %d, want %q %d", in.UUID, in.Profile, in.MilliSlices, wantProfile[in.UUID], wantSlices[in.UUID])
		}
	}
	for _, p := range g.Processes {
		if p.MIGUUID == "" {
			t.Errorf("process %d not placed on a MIG device", p.PID)
		}
	}

	// Slices 1/2/3 of 7 and one unpartitioned slice, over 10 s, by largest
	// remainder: 2g takes the 6/7 remainder, 1g wins the 3/7 tie with the
	// idle rest (earlier part).
	got := byTenant(samples, g.GPU.UUID, gpuTime)
	want := map[string]uint64{"alpha": 1428572, "beta": 2857143, "gamma": 4285714, "": 1428571}
	for tenant, us := range want {
		if got[tenant] != us {
			t.Errorf("tenant %q: %d µs, want %d", tenant, got[tenant], us)
		}
	}
	skus := map[string]string{}
	for _, s := range samples {
		if s.GPUUUID == g.GPU.UUID {
			skus[s.Tenant] = s.SKU
		}
	}
	if skus["alpha"] != "H100-SXM5-80GB/1g.10gb" || skus["gamma"] != "H100-SXM5-80GB/3g.40gb" || skus[""] != "H100-SXM5-80GB" {
		t.Errorf("skus %v", skus)
	}
	for _, s := range samples {
		if s.Tenant == "beta" && (s.Department != "chemistry" || s.Workload != "team-b/team-b-pod") {
			t.Errorf("beta's sample: department %q workload %q", s.Department, s.Workload)
		}
	}

	// GPM (Hopper) reports each instance's SM activity from the second
	// interval on: the sim's GPU instance is exactly as busy as its process.
	readings, samples = r.poll()
	checkInvariants(t, readings, samples)
	for _, in := range readings[0].Instances {
		want := map[string]uint32{insts[0].UUID(): 300_000, insts[1].UUID(): 600_000, insts[2].UUID(): 900_000}[in.UUID]
		if !in.SMActive.OK || in.SMActive.PPM != want {
			t.Errorf("instance %s sm active %+v, want %d ppm", in.Profile, in.SMActive, want)
		}
	}
	sm := byTenant(samples, g.GPU.UUID, func(s collectors.Sample) uint64 { return s.SMActiveMicroseconds })
	if sm["gamma"] != 4285714*9/10 {
		t.Errorf("gamma sm-active %d µs, want %d", sm["gamma"], 4285714*9/10)
	}
}

func TestMIGOnAmpereHasNoGPM(t *testing.T) {
	r := newRig(t, "A100-SXM4-40GB", interval, tenants)
	insts, err := r.host.GPU(3).EnableMIG("3g.20gb", "3g.20gb")
	if err != nil {
		t.Fatal(err)
	}
	r.pod(3, insts[0].UUID(), "team-a", 50, 4)
	r.prime()
	r.poll()
	readings, samples := r.poll()
	checkInvariants(t, readings, samples)
	for _, in := range readings[3].Instances {
		if in.SMActive.OK {
			t.Errorf("instance %s has sm activity %+v on Ampere", in.UUID, in.SMActive)
		}
	}
	if !strings.Contains(r.logs.String(), `signal=gpm`) {
		t.Errorf("gpm not logged as unsupported:\n%s", r.logs)
	}
	got := byTenant(samples, readings[3].GPU.UUID, gpuTime)
	// Two 3g instances and one spare slice: 3/7, 3/7, 1/7 of 10 s.
	if got["alpha"] != 4285714 || got[""] != 4285714+1428572 {
		t.Errorf("gpu 3 split %v", got)
	}
}

func TestTimeSlicedGPUSharedByTwoTenants(t *testing.T) {
	r := newRig(t, "A100-SXM4-40GB", interval, tenants)
	r.pod(0, "", "team-a", 60, 4)
	r.pod(0, "", "team-b", 20, 8)
	r.prime()
	readings, samples := r.poll()
	checkInvariants(t, readings, samples)
	uuid := readings[0].GPU.UUID

	got := byTenant(samples, uuid, gpuTime)
	if got["alpha"] != 7_500_000 || got["beta"] != 2_500_000 || len(got) != 2 {
		t.Errorf("gpu time %v, want alpha 7.5 s, beta 2.5 s, nothing idle", got)
	}
	sm := byTenant(samples, uuid, func(s collectors.Sample) uint64 { return s.SMActiveMicroseconds })
	if sm["alpha"] != 6_000_000 || sm["beta"] != 2_000_000 {
		t.Errorf("sm-active %v, want 6 s and 2 s", sm)
	}
	mem := byTenant(samples, uuid, func(s collectors.Sample) uint64 { return s.MemMiBSeconds })
	if mem["alpha"] != 4096*10 || mem["beta"] != 8192*10 {
		t.Errorf("memory %v MiB·s, want 40960 and 81920", mem)
	}
	energy := byTenant(samples, uuid, func(s collectors.Sample) uint64 { return s.EnergyMillijoules })
	// Energy by GPU time + SM-active time: 13.5 : 4.5 = 3 : 1.
	delta := readings[0].Counters[meter.Energy].Value
	if energy["alpha"]+energy["beta"] != delta || energy["alpha"] < 3*energy["beta"]-3 || energy["alpha"] > 3*energy["beta"]+3 {
		t.Errorf("energy %v of %d mJ, want 3:1", energy, delta)
	}
}

func TestTimeSlicedGPUWithIdleProcessesSplitsByMemory(t *testing.T) {
	r := newRig(t, "A100-SXM4-40GB", interval, tenants)
	r.pod(0, "", "team-a", 0, 2)
	r.pod(0, "", "team-b", 0, 6)
	r.prime()
	readings, samples := r.poll()
	checkInvariants(t, readings, samples)
	got := byTenant(samples, readings[0].GPU.UUID, gpuTime)
	if got["alpha"] != 2_500_000 || got["beta"] != 7_500_000 {
		t.Errorf("gpu time %v, want 1:3 by memory", got)
	}
}

func TestProcessExitingMidInterval(t *testing.T) {
	// One-second world steps, ten-second polls: the exit falls inside an
	// interval, and the process's last utilization sample tells when.
	r := newRig(t, "H100-SXM5-80GB", time.Second, tenants)
	r.pod(1, "", "team-a", 50, 10)
	short := r.pod(1, "", "team-b", 50, 20)
	r.prime()
	r.advance(4 * time.Second)
	if err := r.host.Stop(short); err != nil {
		t.Fatal(err)
	}
	readings, samples := r.poll()
	checkInvariants(t, readings, samples)
	g := readings[1]
	var exited *collectors.Process
	for i := range g.Processes {
		if g.Processes[i].PID == short {
			exited = &g.Processes[i]
		}
	}
	if exited == nil {
		t.Fatalf("exited process %d missing from the reading", short)
	}
	if !exited.ActiveTo.Equal(t0.Add(4 * time.Second)) {
		t.Errorf("exited process active until %s, want t0+4s", exited.ActiveTo)
	}
	// Weights 10 s × 50 % and 4 s × 50 %: 10/14 and 4/14 of the interval.
	got := byTenant(samples, g.GPU.UUID, gpuTime)
	if got["alpha"] != 7142857 || got["beta"] != 2857143 {
		t.Errorf("gpu time %v, want alpha 7142857 beta 2857143", got)
	}
	mem := byTenant(samples, g.GPU.UUID, func(s collectors.Sample) uint64 { return s.MemMiBSeconds })
	if mem["beta"] != 20*1024*4 {
		t.Errorf("beta memory %d MiB·s, want %d (20 GiB for 4 s)", mem["beta"], 20*1024*4)
	}
	// It is gone from the next interval.
	readings, samples = r.poll()
	checkInvariants(t, readings, samples)
	if got := byTenant(samples, readings[1].GPU.UUID, gpuTime); got["beta"] != 0 || got["alpha"] != 10_000_000 {
		t.Errorf("next interval %v, want all of it alpha's", got)
	}
}

func TestEnergyCounterReset(t *testing.T) {
	r := newRig(t, "H100-SXM5-80GB", time.Second, tenants)
	r.pod(0, "", "team-a", 100, 10)
	r.prime()
	readings, _ := r.poll()
	normal := readings[0].Counters[meter.Energy]
	if !normal.OK || normal.Value != 7_000_000 {
		t.Fatalf("normal interval energy %+v, want 700 W × 10 s = 7,000,000 mJ", normal)
	}
	// Driver reload 6 s into the next interval: the counter restarts at 0.
	r.advance(6 * time.Second)
	r.host.GPU(0).ResetEnergy()
	readings, samples := r.poll()
	checkInvariants(t, readings, samples)
	got := readings[0].Counters[meter.Energy]
	if !got.OK || got.Value != 2_800_000 {
		t.Fatalf("energy after reset %+v, want the 4 s since the reset (2,800,000 mJ)", got)
	}
	for _, s := range samples {
		if s.EnergyMillijoules > normal.Value {
			t.Errorf("sample with %d mJ after a reset", s.EnergyMillijoules)
		}
	}
	if !strings.Contains(r.logs.String(), "energy counter went backwards") {
		t.Errorf("reset not logged:\n%s", r.logs)
	}
	// And counting goes on normally after it.
	readings, _ = r.poll()
	if e := readings[0].Counters[meter.Energy]; !e.OK || e.Value != 7_000_000 {
		t.Errorf("energy after the reset interval %+v", e)
	}
}

func TestNVLinkNotSupportedDropsOnlyThatMetric(t *testing.T) {
	r := newRig(t, "H100-SXM5-80GB", interval, tenants)
	r.host.GPU(1).DisableNVLink()
	r.pod(1, "", "team-a", 80, 10)
	r.pod(0, "", "team-b", 80, 10)
	r.prime()
	for i := 0; i < 3; i++ {
		readings, samples := r.poll()
		checkInvariants(t, readings, samples)
		g1 := readings[1]
		if g1.Counters[meter.NVLinkTx].OK || g1.Counters[meter.NVLinkRx].OK {
			t.Fatalf("gpu 1 nvlink %+v %+v, want missing", g1.Counters[meter.NVLinkTx], g1.Counters[meter.NVLinkRx])
		}
		if !g1.Counters[meter.PCIeTx].OK || !g1.Counters[meter.Energy].OK {
			t.Fatalf("gpu 1 lost other signals: pcie %+v energy %+v", g1.Counters[meter.PCIeTx], g1.Counters[meter.Energy])
		}
		if !readings[0].Counters[meter.NVLinkTx].OK || readings[0].Counters[meter.NVLinkTx].Value == 0 {
			t.Fatalf("gpu 0 nvlink %+v, want a delta", readings[0].Counters[meter.NVLinkTx])
		}
		got := byTenant(samples, g1.GPU.UUID, gpuTime)
		if got["alpha"] != 10_000_000 {
			t.Fatalf("gpu 1 samples %v, want alpha's full interval", got)
		}
		for _, s := range samples {
			if s.GPUUUID == g1.GPU.UUID && (s.NVLinkTxBytes != 0 || s.PCIeTxBytes == 0) {
				t.Fatalf("gpu 1 sample nvlink %d pcie %d", s.NVLinkTxBytes, s.PCIeTxBytes)
			}
		}
	}
	// Asked once (at priming), then switched off for that GPU.
	if n := r.metrics.count("nvmlDeviceGetFieldValues(FI_DEV_NVLINK_THROUGHPUT_DATA_TX)", "ERROR_NOT_SUPPORTED"); n != 1 {
		t.Errorf("NOT_SUPPORTED counted %d times, want 1", n)
	}
}

func TestLostGPUIsReportedAndTheOthersGoOn(t *testing.T) {
	r := newRig(t, "H100-SXM5-80GB", interval, tenants)
	r.pod(2, "", "team-a", 80, 10)
	r.pod(3, "", "team-b", 80, 10)
	r.prime()
	r.host.GPU(2).Lose()
	readings, samples := r.poll()
	checkInvariants(t, readings, samples)
	if len(readings) != 8 {
		t.Fatalf("%d readings, want 8", len(readings))
	}
	for i, g := range readings {
		if i == 2 {
			if !errors.Is(g.Err, nvml.ErrGPULost) {
				t.Fatalf("gpu 2 err = %v, want ErrGPULost", g.Err)
			}
			if g.GPU.UUID != r.host.GPU(2).UUID() {
				t.Fatalf("lost gpu reported as %q", g.GPU.UUID)
			}
			continue
		}
		if g.Err != nil {
			t.Fatalf("gpu %d: %v", i, g.Err)
		}
	}
	for _, s := range samples {
		if s.GPUUUID == r.host.GPU(2).UUID() {
			t.Fatalf("sample for the lost gpu: %+v", s)
		}
	}
	if got := byTenant(samples, r.host.GPU(3).UUID(), gpuTime); got["beta"] != 10_000_000 {
		t.Fatalf("gpu 3: %v", got)
	}
	if r.metrics.count("nvmlDeviceGetMigMode", "ERROR_GPU_IS_LOST") != 1 {
		t.Errorf("lost gpu not counted: %v", r.metrics.n)
	}
	// It stays reported, every poll, without taking the others down.
	readings, _ = r.poll()
	if !errors.Is(readings[2].Err, nvml.ErrGPULost) || readings[3].Err != nil {
		t.Fatalf("second poll: gpu 2 %v gpu 3 %v", readings[2].Err, readings[3].Err)
	}
}

func TestLostGPUThroughThePollLoop(t *testing.T) {
	r := newRig(t, "A100-SXM4-80GB", interval, tenants)
	r.host.GPU(5).Lose()
	var got []collectors.Sample
	app := collectors.AppenderFunc(func(_ context.Context, s []collectors.Sample) error {
		got = append(got, s...)
		return nil
	})
	loop, err := collectors.NewLoop(collectors.LoopConfig{Interval: interval},
		[]collectors.Host{{Name: "node-1", Sources: []collectors.NamedSource{{Name: "nvml", Source: r.col}}, Attributor: r.chain}},
		apportionFunc, app, collectors.WallClock{}, loggerTo(r), nil)
	if err != nil {
		t.Fatal(err)
	}
	loop.Prime(context.Background(), t0)
	r.advance(interval)
	if _, err := loop.Poll(context.Background(), t0, t0.Add(interval)); err != nil {
		t.Fatal(err)
	}
	gpus := map[string]bool{}
	for _, s := range got {
		gpus[s.GPUUUID] = true
	}
	if len(gpus) != 7 || gpus[r.host.GPU(5).UUID()] {
		t.Fatalf("samples for %d gpus (lost one included: %v), want the 7 others", len(gpus), gpus[r.host.GPU(5).UUID()])
	}
	if !strings.Contains(r.logs.String(), "gpu not read") || !strings.Contains(r.logs.String(), r.host.GPU(5).UUID()) {
		t.Errorf("lost gpu not logged with its uuid:\n%s", r.logs)
	}
}

func TestMissingLibraryIsAClearError(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}
	_, err := nvml.New(lib, nvml.DefaultConfig(), nil, nil)
	if !errors.Is(err, nvml.ErrLibraryNotFound) {
		t.Fatalf("err = %v, want ErrLibraryNotFound", err)
	}
	if !strings.Contains(err.Error(), "libnvidia-ml.so.1") || !strings.Contains(err.Error(), "--simulate") {
		t.Fatalf("err = %q does not say what to do", err)
	}
}

func TestIdentity(t *testing.T) {
	for _, model := range sim.Models() {
		t.Run(model, func(t *testing.T) {
			r := newRig(t, model, interval, "")
			gpus := r.col.GPUs()
			if len(gpus) != 8 {
				t.Fatalf("%d gpus", len(gpus))
			}
			for i, g := range gpus {
				if g.Model != model || g.UUID != r.host.GPU(i).UUID() || g.Serial == "" || !strings.HasPrefix(g.PCIBusID, "00000000:") || g.Index != i {
					t.Errorf("gpu %d: %+v", i, g)
				}
			}
		})
	}
}
