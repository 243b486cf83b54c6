package nvml

import (
	"bytes"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// device is what the collector keeps about one GPU between reads.
type device struct {
	index  int
	handle nvml.Device
	gpu    collectors.GPU
	known  bool // identity read

	off     signalBit // signals this GPU does not support
	readOK  bool      // the last read succeeded
	lastEnd time.Time // end of the last successful read

	memTotal uint64

	// profiles maps GPU instance profile ids to their info; read once.
	profiles     map[uint32]nvml.GpuInstanceProfileInfo
	fullSlices   uint32 // compute slices of the whole GPU (the 7g profile)
	profilesRead bool

	migs     map[string]*migInfo // by MIG UUID, for the instances last seen
	migGen   uint32
	migByID  map[uint64]string // (GPU instance id, compute instance id) → MIG UUID, this read
	instance []collectors.MIGInstance

	procs processTable

	energy   counter
	pcie     [2]counter // tx, rx
	nvlink   [2]counter // tx, rx
	pcieFV   [2]nvml.FieldValue
	nvlinkFV [2]nvml.FieldValue

	vgpu *vgpuState // on a vGPU host

	gpmChecked bool
	gpm        map[uint32]*gpmState // by GPU instance id
}

func newDevice(index int) *device {
	return &device{
		index: index,
		gpu:   collectors.GPU{Index: index},
		procs: newProcessTable(),
	}
}

// resetReading readies r for this read, keeping its slices' storage.
func (d *device) resetReading(r *collectors.GPUReading) {
	procs := r.Processes[:0]
	insts := r.Instances[:0]
	vgpus := r.VGPUs[:0]
	*r = collectors.GPUReading{GPU: d.gpu, Processes: procs, Instances: insts, VGPUs: vgpus}
}

// identify reads what does not change while the driver is loaded.
func (c *Collector) identify(d *device) error {
	if d.handle == nil {
		h, ret := c.lib.DeviceGetHandleByIndex(d.index)
		if err := c.check("nvmlDeviceGetHandleByIndex", ret); err != nil {
			return err
		}
		d.handle = h
	}
	uuid, ret := d.handle.GetUUID()
	if err := c.check("nvmlDeviceGetUUID", ret); err != nil {
		return err
	}
	name, ret := d.handle.GetName()
	if err := c.check("nvmlDeviceGetName", ret); err != nil {
		return err
	}
	gpu := collectors.GPU{Index: d.index, UUID: uuid, Name: name, Model: modelOf(name)}
	// Serial and PCI bus id are labels, not needed to meter: left empty
	// when the board does not offer them.
	if serial, ret := d.handle.GetSerial(); c.optional("nvmlDeviceGetSerial", ret) == nil {
		gpu.Serial = serial
	}
	if pci, ret := d.handle.GetPciInfo(); c.optional("nvmlDeviceGetPciInfo", ret) == nil {
		gpu.PCIBusID = cString(pci.BusId[:])
	}
	if mem, ret := d.handle.GetMemoryInfo(); c.optional("nvmlDeviceGetMemoryInfo", ret) == nil {
		d.memTotal = mem.Total
	}
	d.gpu = gpu
	d.known = true
	return nil
}

// optional checks a call whose failure leaves a label out; a lost GPU is
// still an error for the caller to see at the next required call.
func (c *Collector) optional(function string, ret nvml.Return) error {
	return c.check(function, ret, nvml.ERROR_NOT_SUPPORTED)
}

func (c *Collector) readIdentity(d *device, r *collectors.GPUReading, _ interval) error {
	if !d.known {
		if err := c.identify(d); err != nil {
			return err
		}
	}
	r.GPU = d.gpu
	return nil
}

func (c *Collector) readMemory(d *device, r *collectors.GPUReading, _ interval) error {
	mem, ret := d.handle.GetMemoryInfo()
	if err := c.check("nvmlDeviceGetMemoryInfo", ret); err != nil {
		return err
	}
	r.MemUsedBytes, r.MemTotalBytes = mem.Used, mem.Total
	return nil
}

// readUtilization reads the device's kernel activity. On MIG GPUs NVML does
// not report it (GPM per instance does, see gpm.go).
func (c *Collector) readUtilization(d *device, r *collectors.GPUReading, _ interval) error {
	if r.MIG {
		return nil
	}
	u, ret := d.handle.GetUtilizationRates()
	if err := c.check("nvmlDeviceGetUtilizationRates", ret); err != nil {
		return err
	}
	r.SMActive = percentRatio(float64(u.Gpu))
	return nil
}

// percentRatio converts an NVML percentage to a Ratio, clamped to 0–100 %.
func percentRatio(p float64) collectors.Ratio {
	switch {
	case p != p || p <= 0: // NaN or idle
		return collectors.Ratio{OK: true}
	case p >= 100:
		return collectors.Ratio{PPM: collectors.PPMScale, OK: true}
	}
	return collectors.Ratio{PPM: uint32(p*1e4 + 0.5), OK: true}
}

// modelOf is the model key of an NVML device name, known or not.
func modelOf(name string) string {
	m, _ := gpucatalog.ModelFromDeviceName(name)
	return m
}

// cString reads a NUL-terminated C string out of an NVML char array.
func cString[T ~int8 | ~uint8](b []T) string {
	buf := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		buf = append(buf, byte(c))
	}
	return string(bytes.TrimSpace(buf))
}
