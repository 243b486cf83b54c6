package sim

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// GPU is one simulated GPU. Its methods for tests (Lose, ResetEnergy,
// DisableNVLink, EnableMIG) change what NVML reports from then on.
type GPU struct {
	host  *Host
	index int
	dev   *server.Device

	uuid, serial, busID string
	memTotal            uint64

	mig       bool
	instances []*Instance // in creation (NVML index) order
	usedMask  uint8       // memory slots taken by instances
	procs     []*Process  // by PID

	lost   bool
	nvlink bool

	// virtualization (vgpu.go)
	vmode      VGPUMode
	vcfg       VGPUGPUConfig
	virt       nvml.GpuVirtualizationMode
	vgis       []*vgpuGI // GPU instances of a MIG-backed vGPU GPU
	vgpus      []*VGPU   // not yet destroyed by the host's time, by handle
	nextHandle uint32
	vsamples   []nvml.VgpuInstanceUtilizationSample
	vstep      []vgpuPresence // the last step's instances
	passVM     *vmState       // the VM a passthrough GPU is given to
	passUtil   uint32         // its utilization in the last step

	energy             uint64 // mJ since "driver load"
	pcieTx, pcieRx     uint64 // bytes
	nvlinkTx, nvlinkRx uint64 // KiB
	samples            []nvml.ProcessUtilizationSample
	lastUtil           uint32 // device utilization of the last step, percent
	lastEnergy         uint64 // energy of the last step, mJ
}

// Instance is one MIG device (one GPU instance with one compute instance).
type Instance struct {
	gpu      *GPU
	uuid     string
	profile  gpucatalog.Profile
	gi       uint32
	giHandle *server.GpuInstance
	dev      *mock.Device

	tenant     string // the tenant it is rented to; empty: not rented
	department string
	claim      *kubePod // the pod whose DRA claim holds it (kube.go); nil: none

	placement gpucatalog.Placement

	activeUs uint64 // GPM: SM-active microseconds, cumulative
}

func newGPU(h *Host, i int, d *server.Device) *GPU {
	g := &GPU{
		host:     h,
		index:    i,
		dev:      d,
		uuid:     "GPU-" + uuidFrom(h.cfg.Name, fmt.Sprint(h.cfg.Seed), "gpu", fmt.Sprint(i)),
		serial:   fmt.Sprintf("%013d", splitmix(hashString(h.cfg.Name)+uint64(i))%1e13),
		busID:    fmt.Sprintf("00000000:%02X:00.0", []int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}[i%8]+i/8),
		memTotal: h.model.mock.MemoryMB << 20,
		nvlink:   true,
	}
	d.UUID = g.uuid
	d.Config.Name = h.model.nvmlName
	g.install()
	g.installVGPU()
	return g
}

// UUID is the GPU's UUID.
func (g *GPU) UUID() string { return g.uuid }

// Index is the GPU's NVML index.
func (g *GPU) Index() int { return g.index }

// Instances lists the MIG devices in NVML index order.
func (g *GPU) Instances() []*Instance {
	g.host.mu.RLock()
	defer g.host.mu.RUnlock()
	return slices.Clone(g.instances)
}

// Lose makes the GPU fall off the bus: every NVML call on it answers
// ERROR_GPU_IS_LOST from now on, and it runs nothing.
func (g *GPU) Lose() {
	g.host.mu.Lock()
	defer g.host.mu.Unlock()
	g.lost = true
}

// ResetEnergy models a driver reload: the energy counter starts over at 0.
func (g *GPU) ResetEnergy() {
	g.host.mu.Lock()
	defer g.host.mu.Unlock()
	g.energy = 0
}

// DisableNVLink makes the NVLink field values answer NOT_SUPPORTED, as on
// a board without NVLink.
func (g *GPU) DisableNVLink() {
	g.host.mu.Lock()
	defer g.host.mu.Unlock()
	g.nvlink = false
}

// EnableMIG switches the GPU to MIG mode and creates one GPU instance with
// one full compute instance per profile name, placed on the first free
// placement NVIDIA's table allows.
func (g *GPU) EnableMIG(profiles ...string) ([]*Instance, error) {
	h := g.host
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(g.procs) > 0 {
		return nil, fmt.Errorf("sim gpu %d: enable mig: processes are running", g.index)
	}
	if g.vmode != BareMetal {
		return nil, fmt.Errorf("sim gpu %d: enable mig: the gpu is %s", g.index, g.vmode)
	}
	slicesUsed := 0
	for _, in := range g.instances {
		slicesUsed += in.profile.ComputeSlices
	}
	var want []gpucatalog.Profile
	for _, name := range profiles {
		p, ok := h.model.profile(name)
		if !ok {
			return nil, fmt.Errorf("sim gpu %d: enable mig: %s has no profile %q", g.index, h.model.name, name)
		}
		slicesUsed += p.ComputeSlices
		want = append(want, p)
	}
	if slicesUsed > gpucatalog.ComputeSlices {
		return nil, fmt.Errorf("sim gpu %d: enable mig: %v need %d of %d compute slices", g.index, profiles, slicesUsed, gpucatalog.ComputeSlices)
	}
	at, ok := place(want, g.usedMask)
	if !ok {
		return nil, fmt.Errorf("sim gpu %d: enable mig: no placement fits %v", g.index, profiles)
	}
	var created []*Instance
	for k, p := range want {
		gi := uint32(len(g.instances) + 1)
		in := &Instance{
			gpu:       g,
			uuid:      "MIG-" + uuidFrom(g.uuid, "gi", fmt.Sprint(gi)),
			profile:   p,
			gi:        gi,
			giHandle:  g.placeGPUInstance(gi, p, at[k]),
			placement: at[k],
		}
		in.dev = in.newDevice()
		g.instances = append(g.instances, in)
		created = append(created, in)
	}
	g.mig = true
	g.dev.MigMode = nvml.DEVICE_MIG_ENABLE
	return created, nil
}

// placeGPUInstance takes the memory slots of placement at on g and returns
// the NVML handle of GPU instance id of profile p there.
func (g *GPU) placeGPUInstance(id uint32, p gpucatalog.Profile, at gpucatalog.Placement) *server.GpuInstance {
	g.usedMask |= at.Mask()
	return server.NewGpuInstanceFromInfo(nvml.GpuInstanceInfo{
		Device:    g.dev,
		Id:        id,
		ProfileId: uint32(p.NVMLProfile),
		Placement: nvml.GpuInstancePlacement{Start: uint32(at.Start), Size: uint32(at.Size)},
	}, g.dev.Config.MIGProfiles)
}

// place finds placements for all profiles on the free memory slots, by
// depth-first search over NVIDIA's allowed placements.
func place(want []gpucatalog.Profile, used uint8) ([]gpucatalog.Placement, bool) {
	if len(want) == 0 {
		return nil, true
	}
	for _, pl := range want[0].Placements {
		if pl.Mask()&used != 0 {
			continue
		}
		if rest, ok := place(want[1:], used|pl.Mask()); ok {
			return append([]gpucatalog.Placement{pl}, rest...), true
		}
	}
	return nil, false
}

func (g *GPU) instance(uuid string) *Instance {
	for _, in := range g.instances {
		if in.uuid == uuid {
			return in
		}
	}
	return nil
}

// UUID is the MIG device's UUID.
func (in *Instance) UUID() string { return in.uuid }

// Profile is the instance's profile name, e.g. "3g.40gb".
func (in *Instance) Profile() string { return in.profile.Name }

// ComputeSlices is the instance's share of the GPU's 7 compute slices.
func (in *Instance) ComputeSlices() int { return in.profile.ComputeSlices }

// Rent gives the instance to a tenant: the fleet writes it into the map
// file, and the ledger credits the instance's whole time to the tenant.
func (in *Instance) Rent(tenant, department string) {
	in.gpu.host.mu.Lock()
	defer in.gpu.host.mu.Unlock()
	in.tenant, in.department = tenant, department
}

// Tenant is who the instance is rented to.
func (in *Instance) Tenant() (tenant, department string) {
	in.gpu.host.mu.RLock()
	defer in.gpu.host.mu.RUnlock()
	return in.tenant, in.department
}

// advance runs one step of this GPU: the counters that follow load.
func (g *GPU) advance(stepUs uint64, end time.Time) {
	m := g.host.model
	// busy = busyNum / busyDen of the board's SMs.
	var busyNum, busyDen uint64
	if g.vmode != BareMetal {
		busyNum, busyDen = g.vgpuBusy(stepUs)
		if !g.mig {
			g.lastUtil = uint32(busyNum)
		}
	} else if g.mig {
		busyDen = uint64(gpucatalog.ComputeSlices) * 100
		for _, in := range g.instances {
			u := uint64(0)
			for _, p := range g.procs {
				if p.MIG == in.uuid {
					u += uint64(p.util)
				}
			}
			u = min(u, 100)
			busyNum += uint64(in.profile.ComputeSlices) * u
			in.activeUs += stepUs * u / 100
		}
	} else {
		busyDen = 100
		for _, p := range g.procs {
			busyNum += uint64(p.util)
		}
		busyNum = min(busyNum, 100)
		g.lastUtil = uint32(busyNum)
		ts := micros(end)
		for _, p := range g.procs {
			g.samples = append(g.samples, nvml.ProcessUtilizationSample{Pid: p.PID, TimeStamp: ts, SmUtil: p.util})
		}
		// The driver keeps a short history.
		keep := ts - min(ts, uint64(max(20*g.host.cfg.Step, 2*time.Minute)/time.Microsecond))
		i := 0
		for i < len(g.samples) && g.samples[i].TimeStamp <= keep {
			i++
		}
		g.samples = g.samples[i:]
	}
	// mJ = W × µs / 1000
	e := collectors.MulDiv(m.idleW, stepUs, 1000) + collectors.MulDiv((m.maxW-m.idleW)*stepUs, busyNum, busyDen*1000)
	g.energy += e
	g.lastEnergy = e
	// Traffic follows load, with a trickle when idle.
	pcie := collectors.MulDiv(m.pcieBps, stepUs, 1e6)
	g.pcieTx += pcie/200 + collectors.MulDiv(pcie, busyNum, 2*busyDen)
	g.pcieRx += pcie/100 + collectors.MulDiv(pcie, busyNum, busyDen)
	nvlinkKiB := collectors.MulDiv(m.nvlinkBp/1024, stepUs, 1e6)
	g.nvlinkTx += collectors.MulDiv(nvlinkKiB, busyNum, busyDen)
	g.nvlinkRx += collectors.MulDiv(nvlinkKiB, busyNum, busyDen)
}

// install fills the device functions the mock lacks and guards all of them
// with the lost state.
func (g *GPU) install() {
	h, d := g.host, g.dev
	d.GetUUIDFunc = func() (string, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return "", nvml.ERROR_GPU_IS_LOST
		}
		return g.uuid, nvml.SUCCESS
	}
	d.GetNameFunc = func() (string, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return "", nvml.ERROR_GPU_IS_LOST
		}
		return h.model.nvmlName, nvml.SUCCESS
	}
	d.GetSerialFunc = func() (string, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return "", nvml.ERROR_GPU_IS_LOST
		}
		return g.serial, nvml.SUCCESS
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return nvml.PciInfo{}, nvml.ERROR_GPU_IS_LOST
		}
		p := nvml.PciInfo{PciDeviceId: h.model.mock.PciDeviceId}
		for i := 0; i < len(g.busID) && i < len(p.BusId)-1; i++ {
			p.BusId[i] = int8(g.busID[i])
		}
		return p, nvml.SUCCESS
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		var used uint64
		for _, p := range g.procs {
			used += p.MemBytes
		}
		for _, v := range g.vgpus {
			if v.existsAt(h.now) {
				used += uint64(v.typ.FramebufferGB) << 30 // a vGPU holds its type's framebuffer
			}
		}
		used = min(used, g.memTotal)
		return nvml.Memory{Total: g.memTotal, Used: used, Free: g.memTotal - used}, nvml.SUCCESS
	}
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return 0, 0, nvml.ERROR_GPU_IS_LOST
		}
		mode := nvml.DEVICE_MIG_DISABLE
		if g.mig {
			mode = nvml.DEVICE_MIG_ENABLE
		}
		return mode, mode, nvml.SUCCESS
	}
	d.GetGpuInstanceProfileInfoFunc = func(idx int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_GPU_IS_LOST
		}
		for _, p := range h.model.mig.Profiles {
			if p.NVMLProfile == idx {
				return nvml.GpuInstanceProfileInfo{
					Id:                  uint32(idx),
					SliceCount:          uint32(p.ComputeSlices),
					InstanceCount:       uint32(p.MaxInstances),
					MultiprocessorCount: uint32(p.ComputeSlices) * 16,
					MemorySizeMB:        uint64(p.MemoryGB) * 1024,
				}, nvml.SUCCESS
			}
		}
		if idx < 0 || idx >= nvml.GPU_INSTANCE_PROFILE_COUNT {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		for _, in := range g.instances {
			if int(in.gi) == id {
				return in.giHandle, nvml.SUCCESS
			}
		}
		for _, gi := range g.vgis {
			if int(gi.id) == id {
				return gi.handle, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		if !g.mig {
			return 0, nvml.SUCCESS
		}
		return gpucatalog.ComputeSlices, nvml.SUCCESS
	}
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		if i < 0 || i >= gpucatalog.ComputeSlices {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if !g.mig || i >= len(g.instances) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return g.instances[i].dev, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		out := make([]nvml.ProcessInfo, 0, len(g.procs))
		for _, p := range g.procs {
			pi := nvml.ProcessInfo{Pid: p.PID, UsedGpuMemory: p.MemBytes, GpuInstanceId: ^uint32(0), ComputeInstanceId: ^uint32(0)}
			if in := g.instance(p.MIG); in != nil {
				pi.GpuInstanceId, pi.ComputeInstanceId = in.gi, 0
			}
			out = append(out, pi)
		}
		return out, nvml.SUCCESS
	}
	d.GetProcessUtilizationFunc = func(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		if g.mig {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		var out []nvml.ProcessUtilizationSample
		for _, s := range g.samples {
			if s.TimeStamp > lastSeen {
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST
		}
		if g.mig {
			return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.Utilization{Gpu: g.lastUtil, Memory: g.lastUtil / 2}, nvml.SUCCESS
	}
	d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
		defer h.readLock()()
		if g.lost {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return g.energy, nvml.SUCCESS
	}
	d.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		defer h.readLock()()
		if g.lost {
			return nvml.ERROR_GPU_IS_LOST
		}
		ts := h.now.UnixMicro()
		for i := range values {
			v := &values[i]
			v.Timestamp = ts
			var x uint64
			switch v.FieldId {
			case nvml.FI_DEV_PCIE_COUNT_TX_BYTES:
				x = g.pcieTx
			case nvml.FI_DEV_PCIE_COUNT_RX_BYTES:
				x = g.pcieRx
			case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
				if !g.nvlink {
					v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
					continue
				}
				x = g.nvlinkTx
				if v.FieldId == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX {
					x = g.nvlinkRx
				}
			default:
				v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				continue
			}
			v.NvmlReturn = uint32(nvml.SUCCESS)
			v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
			binary.NativeEndian.PutUint64(v.Value[:], x)
		}
		return nvml.SUCCESS
	}
}

// newDevice makes the MIG device handle of an instance.
func (in *Instance) newDevice() *mock.Device {
	g := in.gpu
	h := g.host
	memTotal := uint64(in.profile.MemoryGB) << 30
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) {
			defer h.readLock()()
			if g.lost {
				return "", nvml.ERROR_GPU_IS_LOST
			}
			return in.uuid, nvml.SUCCESS
		},
		GetNameFunc: func() (string, nvml.Return) {
			defer h.readLock()()
			if g.lost {
				return "", nvml.ERROR_GPU_IS_LOST
			}
			return h.model.nvmlName + " MIG " + in.profile.Name, nvml.SUCCESS
		},
		GetGpuInstanceIdFunc: func() (int, nvml.Return) {
			defer h.readLock()()
			if g.lost {
				return 0, nvml.ERROR_GPU_IS_LOST
			}
			return int(in.gi), nvml.SUCCESS
		},
		GetComputeInstanceIdFunc: func() (int, nvml.Return) {
			defer h.readLock()()
			if g.lost {
				return 0, nvml.ERROR_GPU_IS_LOST
			}
			return 0, nvml.SUCCESS
		},
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			defer h.readLock()()
			if g.lost {
				return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
			}
			var used uint64
			for _, p := range g.procs {
				if p.MIG == in.uuid {
					used += p.MemBytes
				}
			}
			used = min(used, memTotal)
			return nvml.Memory{Total: memTotal, Used: used, Free: memTotal - used}, nvml.SUCCESS
		},
		GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
			defer h.readLock()()
			if g.lost {
				return nvml.DeviceAttributes{}, nvml.ERROR_GPU_IS_LOST
			}
			s := uint32(in.profile.ComputeSlices)
			return nvml.DeviceAttributes{
				MultiprocessorCount: s * 16, GpuInstanceSliceCount: s, ComputeInstanceSliceCount: s,
				MemorySizeMB: uint64(in.profile.MemoryGB) * 1024,
			}, nvml.SUCCESS
		},
		IsMigDeviceHandleFunc: func() (bool, nvml.Return) { return true, nvml.SUCCESS },
		GetDeviceHandleFromMigDeviceHandleFunc: func() (nvml.Device, nvml.Return) {
			return g.dev, nvml.SUCCESS
		},
	}
}
