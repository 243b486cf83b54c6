package nvml

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpumeter/gpumeter/collectors"
)

// handled is a mock vGPU instance that says its handle, as the simulated
// fleet's do.
type handled struct {
	*mock.VgpuInstance
	h uint32
}

func (v handled) Handle() uint32 { return v.h }

func mockType(name string, maxInst int, giProfile uint32) *mock.VgpuTypeId {
	return &mock.VgpuTypeId{
		GetNameFunc:                 func() (string, nvml.Return) { return name, nvml.SUCCESS },
		GetMaxInstancesFunc:         func(nvml.Device) (int, nvml.Return) { return maxInst, nvml.SUCCESS },
		GetFramebufferSizeFunc:      func() (uint64, nvml.Return) { return 4 << 30, nvml.SUCCESS },
		GetGpuInstanceProfileIdFunc: func() (uint32, nvml.Return) { return giProfile, nvml.SUCCESS },
	}
}

func mockVGPU(h uint32, uuid, vm string, t *mock.VgpuTypeId, gi int) handled {
	return handled{h: h, VgpuInstance: &mock.VgpuInstance{
		GetUUIDFunc:          func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetVmIDFunc:          func() (string, nvml.VgpuVmIdType, nvml.Return) { return vm, nvml.VGPU_VM_ID_DOMAIN_ID, nvml.SUCCESS },
		GetTypeFunc:          func() (nvml.VgpuTypeId, nvml.Return) { return t, nvml.SUCCESS },
		GetGpuInstanceIdFunc: func() (int, nvml.Return) { return gi, nvml.SUCCESS },
		GetFbUsageFunc:       func() (uint64, nvml.Return) { return 1 << 30, nvml.SUCCESS },
		GetLicenseInfoFunc:   func() (nvml.VgpuLicenseInfo, nvml.Return) { return nvml.VgpuLicenseInfo{IsLicensed: 1}, nvml.SUCCESS },
		GetMdevUUIDFunc:      func() (string, nvml.Return) { return "mdev-" + uuid, nvml.SUCCESS },
		GetGpuPciIdFunc:      func() (string, nvml.Return) { return "", nvml.ERROR_NOT_SUPPORTED },
	}}
}

func utilSample(h uint32, at time.Time, sm uint32) nvml.VgpuInstanceUtilizationSample {
	s := nvml.VgpuInstanceUtilizationSample{VgpuInstance: h, TimeStamp: uint64(at.UnixMicro())}
	binary.LittleEndian.PutUint32(s.SmUtil[:], sm)
	binary.LittleEndian.PutUint32(s.MemUtil[:], sm/2)
	return s
}

type vgpuHost struct {
	mode      nvml.GpuVirtualizationMode
	modeRet   nvml.Return
	active    []nvml.VgpuInstance
	samples   []nvml.VgpuInstanceUtilizationSample
	policy    uint32
	lastSeen  uint64
	utilCalls int
}

func (h *vgpuHost) device() *mock.Device {
	return &mock.Device{
		GetVirtualizationModeFunc: func() (nvml.GpuVirtualizationMode, nvml.Return) { return h.mode, h.modeRet },
		GetHostVgpuModeFunc:       func() (nvml.HostVgpuMode, nvml.Return) { return nvml.HOST_VGPU_MODE_SRIOV, nvml.SUCCESS },
		GetVgpuSchedulerStateFunc: func() (nvml.VgpuSchedulerGetState, nvml.Return) {
			s := nvml.VgpuSchedulerGetState{SchedulerPolicy: h.policy, ArrMode: nvml.VGPU_SCHEDULER_ARR_DISABLE}
			binary.LittleEndian.PutUint32(s.SchedulerParams[0:4], 2000)
			return s, nvml.SUCCESS
		},
		GetActiveVgpusFunc: func() ([]nvml.VgpuInstance, nvml.Return) { return h.active, nvml.SUCCESS },
		GetVgpuUtilizationFunc: func(last uint64) (nvml.ValueType, []nvml.VgpuInstanceUtilizationSample, nvml.Return) {
			h.utilCalls++
			h.lastSeen = last
			var out []nvml.VgpuInstanceUtilizationSample
			for _, s := range h.samples {
				if s.TimeStamp > last {
					out = append(out, s)
				}
			}
			return nvml.VALUE_TYPE_UNSIGNED_INT, out, nvml.SUCCESS
		},
		GetGpuInstanceProfileInfoFunc: func(p int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
			slices := map[int]uint32{nvml.GPU_INSTANCE_PROFILE_1_SLICE: 1, nvml.GPU_INSTANCE_PROFILE_2_SLICE: 2, nvml.GPU_INSTANCE_PROFILE_3_SLICE: 3, nvml.GPU_INSTANCE_PROFILE_7_SLICE: 7}
			if n, ok := slices[p]; ok {
				return nvml.GpuInstanceProfileInfo{Id: uint32(p), SliceCount: n}, nvml.SUCCESS
			}
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		},
	}
}

func vgpuCollector(h *vgpuHost) (*Collector, *device) {
	c := &Collector{cfg: DefaultConfig(), logger: slog.New(slog.DiscardHandler), metrics: nopMetrics{}}
	d := newDevice(0)
	d.handle = h.device()
	return c, d
}

func TestReadVGPUHost(t *testing.T) {
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	iv1 := interval{start: start.Add(-10 * time.Second), end: start}
	iv2 := interval{start: start, end: start.Add(10 * time.Second), prevKnown: true}
	t4c := mockType("GRID A100-4C", 10, invalidID)
	stays := mockVGPU(11, "vgpu-stays", "vm-a", t4c, int(invalidID))
	leaves := mockVGPU(12, "vgpu-leaves", "vm-b", t4c, int(invalidID))
	comes := mockVGPU(13, "vgpu-comes", "vm-c", t4c, int(invalidID))
	h := &vgpuHost{mode: nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU, policy: nvml.VGPU_SCHEDULER_POLICY_FIXED_SHARE,
		active: []nvml.VgpuInstance{stays, leaves}}
	c, d := vgpuCollector(h)
	var r collectors.GPUReading
	if err := c.readVGPU(d, &r, iv1); err != nil {
		t.Fatal(err)
	}
	if r.Virtualization != collectors.VirtHostVGPU || !r.SRIOV || r.Scheduler != collectors.SchedulerFixedShare || r.SchedulerTimesliceMicros != 2000 || len(r.VGPUs) != 2 {
		t.Fatalf("first read: %+v", r)
	}

	// In the second interval one instance ends after its last sample at
	// +7 s, one starts with its first sample at +3 s.
	h.active = []nvml.VgpuInstance{stays, comes}
	h.samples = []nvml.VgpuInstanceUtilizationSample{
		utilSample(11, start.Add(-time.Second), 99), // before the interval: not counted
		utilSample(11, start.Add(5*time.Second), 40), utilSample(11, start.Add(10*time.Second), 60),
		utilSample(12, start.Add(2*time.Second), 30), utilSample(12, start.Add(7*time.Second), 30),
		utilSample(13, start.Add(3*time.Second), 80), utilSample(13, start.Add(9*time.Second), 80),
		utilSample(99, start.Add(5*time.Second), 50), // an instance never listed
	}
	r = collectors.GPUReading{}
	if err := c.readVGPU(d, &r, iv2); err != nil {
		t.Fatal(err)
	}
	got := map[string]collectors.VGPUInstance{}
	for _, v := range r.VGPUs {
		got[v.UUID] = v
	}
	s, l, n := got["vgpu-stays"], got["vgpu-leaves"], got["vgpu-comes"]
	if len(got) != 3 || s.Type != "A100-4C" || s.MaxInstances != 10 || s.VMID != "vm-a" || s.VMIDType != "domain" ||
		s.MdevUUID != "mdev-vgpu-stays" || !s.Licensed || s.FBUsedBytes != 1<<30 || s.MIGBacked() {
		t.Fatalf("instances: %+v", r.VGPUs)
	}
	if !s.ActiveFrom.IsZero() || !s.ActiveTo.IsZero() || s.SMActive != (collectors.Ratio{PPM: 500_000, OK: true}) || s.MemActive.PPM != 250_000 {
		t.Fatalf("the instance present throughout: %+v", s)
	}
	if !l.ActiveTo.Equal(start.Add(7*time.Second)) || !l.ActiveFrom.IsZero() || l.SMActive.PPM != 300_000 {
		t.Fatalf("the instance that ended: from %v to %v, %+v", l.ActiveFrom, l.ActiveTo, l.SMActive)
	}
	if !n.ActiveFrom.Equal(start.Add(3*time.Second)) || !n.ActiveTo.IsZero() || n.SMActive.PPM != 800_000 {
		t.Fatalf("the instance that started: from %v to %v", n.ActiveFrom, n.ActiveTo)
	}
	if h.lastSeen != uint64(start.UnixMicro()) {
		t.Fatalf("utilization asked since %d, want the interval's start", h.lastSeen)
	}
	// The third interval: only what is newer than the last sample is read.
	r = collectors.GPUReading{}
	if err := c.readVGPU(d, &r, interval{start: iv2.end, end: iv2.end.Add(10 * time.Second), prevKnown: true}); err != nil {
		t.Fatal(err)
	}
	if h.lastSeen != uint64(start.Add(10*time.Second).UnixMicro()) || len(r.VGPUs) != 2 {
		t.Fatalf("third read: since %d, %d instances", h.lastSeen, len(r.VGPUs))
	}
}

func TestReadVGPUMIGBackedAndRefused(t *testing.T) {
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	iv := interval{start: start, end: start.Add(10 * time.Second)}
	mig3 := mockType("A100-3-20C", 2, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	h := &vgpuHost{mode: nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU, active: []nvml.VgpuInstance{mockVGPU(1, "vgpu-m", "vm-a", mig3, 2)}}
	c, d := vgpuCollector(h)
	r := collectors.GPUReading{MIG: true, TotalMilliSlices: 7000}
	if err := c.readVGPU(d, &r, iv); err != nil {
		t.Fatal(err)
	}
	if v := r.VGPUs[0]; v.GPUInstanceID != 2 || v.MilliSlices != 3000 || !v.MIGBacked() || r.Scheduler != collectors.SchedulerBestEffort {
		t.Fatalf("MIG-backed instance: %+v (scheduler %s)", v, r.Scheduler)
	}
	// A time-sliced instance beside it is a reading NVIDIA cannot give.
	h.active = append(h.active, mockVGPU(2, "vgpu-t", "vm-b", mockType("A100-4C", 10, invalidID), int(invalidID)))
	c, d = vgpuCollector(h)
	r = collectors.GPUReading{MIG: true, TotalMilliSlices: 7000}
	if err := c.readVGPU(d, &r, iv); !errors.Is(err, collectors.ErrBadVGPUReading) {
		t.Fatalf("mixed MIG-backed and time-sliced: %v", err)
	}
}

func TestReadVGPUWithoutVirtualization(t *testing.T) {
	iv := interval{start: time.Unix(0, 0), end: time.Unix(10, 0)}
	for _, tc := range []struct {
		name string
		h    *vgpuHost
		want collectors.Virtualization
		off  bool
	}{
		{"not supported: bare metal, never asked again", &vgpuHost{modeRet: nvml.ERROR_NOT_SUPPORTED}, collectors.VirtNone, true},
		{"passthrough, read inside the VM", &vgpuHost{mode: nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH}, collectors.VirtPassthrough, false},
		{"none", &vgpuHost{mode: nvml.GPU_VIRTUALIZATION_MODE_NONE}, collectors.VirtNone, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, d := vgpuCollector(tc.h)
			var r collectors.GPUReading
			if err := c.readVGPU(d, &r, iv); err != nil {
				t.Fatal(err)
			}
			if r.Virtualization != tc.want || (d.off&sigVGPU != 0) != tc.off || tc.h.utilCalls != 0 {
				t.Fatalf("virtualization %s, off %t, util calls %d", r.Virtualization, d.off&sigVGPU != 0, tc.h.utilCalls)
			}
		})
	}
	if got := sanitizeTypeName("GRID A100-3-20C"); got != "A100-3-20C" {
		t.Fatalf("sanitizeTypeName = %q", got)
	}
	if got := sanitizeTypeName("A100/4C x"); got != "A1004C-x" {
		t.Fatalf("sanitizeTypeName = %q", got)
	}
}
