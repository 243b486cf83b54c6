package collectors

import (
	"time"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// GPU identifies one physical GPU on a host.
type GPU struct {
	Index    int    // NVML index on the host
	UUID     string // "GPU-…"
	Name     string // as NVML reports it, e.g. "NVIDIA H100 80GB HBM3"
	Model    string // canonical model, e.g. "H100-SXM5-80GB"; the whole GPU's SKU
	Serial   string // empty where the board does not report one
	PCIBusID string // e.g. "00000000:07:00.0"
}

// Delta is the growth of a device counter over one interval. OK is false
// when the device does not report the counter, on the first read (no
// baseline yet), or when the delta was not trustworthy (an implausible jump).
// A Delta that is not OK is missing data, never zero usage.
type Delta struct {
	Value uint64
	OK    bool
}

// Ratio is a fraction in parts per million (1,000,000 = 100 %). OK is false
// when the hardware did not report it.
type Ratio struct {
	PPM uint32
	OK  bool
}

// PPMScale is 100 % as a Ratio.
const PPMScale = 1_000_000

// GPUReading is what a Source saw on one GPU for one interval [start, end).
// Sources fill the measurements; attribution fills Claims and Process.Owner;
// apportioning turns the whole into Samples.
type GPUReading struct {
	GPU GPU

	// Err is set when the GPU could not be read this interval (it fell off
	// the bus, the driver failed a required call). Nothing else is valid then
	// and no samples are made for it.
	Err error

	// MIG is true when MIG mode is enabled; Instances then lists the MIG
	// devices and TotalMilliSlices is the GPU's compute capacity in
	// thousandths of a compute slice (7 slices: 7000).
	MIG              bool
	TotalMilliSlices uint64
	Instances        []MIGInstance

	// Processes are the compute processes seen on the GPU during the
	// interval, including those that started or exited inside it.
	Processes []Process
	// ProcessUtilization is true when per-process SM utilization was read
	// for this interval (never on MIG GPUs, where NVML does not offer it).
	ProcessUtilization bool

	// Claims are the holders of the whole GPU as attribution found them (a
	// pod that was allocated it, a static map entry). Unused time of a
	// claimed GPU goes to its claimants instead of idle.
	Claims []Owner
	// Grants are the shares of the whole GPU a sharing layer granted its
	// holders (HAMi's cores %), as attribution found them. Apportioning
	// bills by them only when told to (attribution.Options.Granted);
	// otherwise they are informational and use is measured.
	Grants []Grant

	// SMActive is the device's utilization (non-MIG GPUs).
	SMActive      Ratio
	MemUsedBytes  uint64
	MemTotalBytes uint64

	// Counters are the device counters of the interval, indexed by
	// meter; only the meters whose Source is meter.DeviceCounter are set
	// (by the NVML signal files), the rest stay zero.
	Counters [meter.Count]Delta

	// Virtualization is how the GPU is shared with virtual machines.
	// On a vGPU host (VirtHostVGPU) VGPUs lists the vGPU instances seen
	// during the interval and Scheduler says how time-sliced instances
	// share the GPU; SRIOV is true when the host runs vGPU on SR-IOV
	// virtual functions (Ampere and newer).
	Virtualization Virtualization
	SRIOV          bool
	Scheduler      VGPUScheduler
	// SchedulerTimesliceMicros is the scheduler's time slice, 0 when the
	// driver chose it or did not say.
	SchedulerTimesliceMicros uint32
	VGPUs                    []VGPUInstance
}

// Virtualization is NVML's GPU virtualization mode.
type Virtualization uint8

const (
	VirtNone        Virtualization = iota // bare metal
	VirtPassthrough                       // the GPU is passed through to this VM (read from inside it)
	VirtVGPUGuest                         // a vGPU, read from inside the VM that holds it
	VirtHostVGPU                          // a vGPU host: the GPU is shared by vGPU instances
	VirtHostVSGA                          // a vSGA host (graphics sharing; not metered per VM)
)

var virtualizationNames = [...]string{"none", "passthrough", "vgpu", "host_vgpu", "host_vsga"}

func (v Virtualization) String() string {
	if int(v) < len(virtualizationNames) {
		return virtualizationNames[v]
	}
	return "unknown"
}

// VGPUScheduler is the vGPU scheduler policy of a vGPU host's GPU.
type VGPUScheduler uint8

const (
	// SchedulerBestEffort is NVIDIA's default: an instance may use the
	// whole GPU when the others are idle. An unknown or unreported policy
	// is read as best effort.
	SchedulerBestEffort VGPUScheduler = iota
	// SchedulerEqualShare gives each running instance an equal share.
	SchedulerEqualShare
	// SchedulerFixedShare gives each instance 1/(max instances of its
	// type), used or not.
	SchedulerFixedShare
)

var schedulerNames = [...]string{"best_effort", "equal_share", "fixed_share"}

func (s VGPUScheduler) String() string {
	if int(s) < len(schedulerNames) {
		return schedulerNames[s]
	}
	return "unknown"
}

// VGPUInstance is one vGPU instance on a vGPU host's GPU during an
// interval.
type VGPUInstance struct {
	UUID     string // the vGPU instance UUID
	VMID     string // the VM that holds it: a domain name/id or a UUID
	VMIDType string // "domain" or "uuid", as NVML reports the VM id
	MdevUUID string // the mediated device UUID (KVM), empty where none
	PCIBusID string // the instance's (virtual function's) PCI address as NVML reports it
	Type     string // vGPU type name, e.g. "A100-4C" or "A100-3-20C"
	// MaxInstances is how many instances of its type fit on the GPU
	// (nvmlVgpuTypeGetMaxInstances): a fixed-share instance holds 1/MaxInstances.
	MaxInstances     uint32
	FramebufferBytes uint64 // the type's framebuffer
	// GPUInstanceID is the MIG GPU instance a MIG-backed vGPU runs on, -1
	// for a time-sliced vGPU; MilliSlices is then that GPU instance's
	// compute share in thousandths of a slice.
	GPUInstanceID int
	MilliSlices   uint64
	FBUsedBytes   uint64 // framebuffer in use at the read
	Licensed      bool
	// SMActive and MemActive are the instance's mean SM and memory
	// controller utilization over the interval, as shares of the whole GPU.
	SMActive  Ratio
	MemActive Ratio
	// ActiveFrom and ActiveTo bound the part of the interval the instance
	// existed in (zero: from the start, to the end).
	ActiveFrom time.Time
	ActiveTo   time.Time
	// Claims are the holders of the instance as attribution found them:
	// its VM's tenant.
	Claims []Owner
}

// MIGBacked reports whether the instance runs on a MIG GPU instance.
func (v *VGPUInstance) MIGBacked() bool { return v.GPUInstanceID >= 0 }

// Profile is the instance's profile in SKUs: "vgpu:" and its type name.
func (v *VGPUInstance) Profile() string { return gpucatalog.VGPUProfile(v.Type) }

// MIGInstance is one MIG device (a compute instance inside a GPU instance).
type MIGInstance struct {
	UUID              string // "MIG-…"
	Profile           string // GPU instance profile, e.g. "3g.40gb"
	GPUInstanceID     uint32
	ComputeInstanceID uint32
	// MilliSlices is the share of the GPU's compute this device holds, in
	// thousandths of a compute slice: a 3g instance with one compute
	// instance is 3000.
	MilliSlices  uint64
	MemUsedBytes uint64
	// SMActive is the instance's SM activity from GPM (Hopper and newer).
	SMActive Ratio
	// Claims are the holders of this instance as attribution found them.
	Claims []Owner
}

// Process is one compute process seen on a GPU during an interval.
type Process struct {
	PID     uint32
	MIGUUID string // the MIG device it ran on; empty on a whole GPU

	// ActiveFrom and ActiveTo bound the part of the interval the process
	// existed in, as far as the source could tell.
	ActiveFrom time.Time
	ActiveTo   time.Time

	// MemBytes is the framebuffer memory it held on average while active;
	// MemPeakBytes the most it was seen holding.
	MemBytes     uint64
	MemPeakBytes uint64

	// SMUtil is its mean SM utilization while active (non-MIG GPUs).
	SMUtil Ratio

	// Owner is filled by attribution; empty until something claims it.
	Owner Owner
}

// Owner is who a device or process belongs to.
type Owner struct {
	Tenant     string
	Department string
	Workload   string // "namespace/pod", "slurm/<job>", "pid/<pid>"
}

// IsZero reports whether nothing has attributed the owner yet.
func (o Owner) IsZero() bool { return o == Owner{} }

// Grant is a holder's granted share of a GPU's compute, in parts per
// million (HAMi's 25 % cores: 250,000; HAMi's 0 %, no limit, is recorded
// as the whole GPU, 1,000,000).
type Grant struct {
	Owner    Owner
	SharePPM uint32
}
