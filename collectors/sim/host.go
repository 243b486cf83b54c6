// Package sim is a simulated fleet of DGX-style GPU hosts built on
// go-nvml's mock types (pkg/nvml/mock/server, as used by mock/dgxa100 and
// mock/dgxh100). The mocks implement identity and MIG management; this
// package fills in what they lack and the collector reads: MIG device
// handles, running processes, per-process utilization, device utilization,
// the energy counter, PCIe and NVLink field values and GPM.
//
// Everything is deterministic from a seed, and time is simulated: a host
// advances in steps when told to (AdvanceTo), so tests and demos run much
// faster than the wall clock. World changes (processes starting and
// stopping) happen on step boundaries. A Ledger records what the simulator
// ran, so end-to-end tests can compare the collector's output with it.
//
// A host can also be an NVIDIA vGPU hypervisor (HostConfig.VGPU): its GPUs
// answer the vGPU host queries (virtualization mode, scheduler state,
// active vGPU instances on go-nvml's VgpuInstance and VgpuTypeId mocks,
// per-vGPU utilization samples), its VMs are libvirt domains whose XML it
// writes, and the ledger books each VM's vGPU time by the scheduler's
// rule. vGPU instances are created and destroyed at any whole microsecond,
// inside steps too.
package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpumeter/gpumeter/collectors"
)

// CgroupLayout is how the host's processes appear in /proc/<pid>/cgroup.
type CgroupLayout int

const (
	// KubernetesSystemd: cgroup v2, the systemd cgroup driver.
	KubernetesSystemd CgroupLayout = iota
	// KubernetesCgroupfs: cgroup v1, the cgroupfs driver.
	KubernetesCgroupfs
	// SlurmV1: Slurm's cgroup v1 plugin.
	SlurmV1
	// SlurmV2: Slurm's cgroup v2 plugin.
	SlurmV2
)

// HostConfig describes one simulated host.
type HostConfig struct {
	Name  string
	Model string // canonical model, e.g. "H100-SXM5-80GB"
	GPUs  int
	Seed  int64
	Start time.Time     // simulated time at creation
	Step  time.Duration // world granularity
	// Root, when set, is where the host's procfs (Root/proc) and kubelet pod
	// log directory (Root/pods) are written, for cgroup attribution.
	Root   string
	Cgroup CgroupLayout
	// VGPU, when set, makes the host a KVM hypervisor with NVIDIA's vGPU
	// manager: its GPUs are time-sliced or MIG-backed vGPU hosts, passed
	// through or bare metal, and its VMs' domain XML is written under
	// Root/libvirt/qemu.
	VGPU *VGPUConfig
}

// Validate reports every problem with the config.
func (c HostConfig) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("name: missing"))
	}
	if _, ok := lookupModel(c.Model); !ok {
		errs = append(errs, fmt.Errorf("model: %q is not simulated", c.Model))
	}
	if c.GPUs < 1 || c.GPUs > 16 {
		errs = append(errs, fmt.Errorf("gpus: %d is not within 1..16", c.GPUs))
	}
	if c.Start.IsZero() {
		errs = append(errs, errors.New("start: missing"))
	}
	if c.Step < time.Millisecond || c.Step%time.Microsecond != 0 {
		errs = append(errs, fmt.Errorf("step: %s is below 1ms or not whole microseconds", c.Step))
	}
	if m, ok := lookupModel(c.Model); ok && c.VGPU != nil {
		if err := c.VGPU.validate(m, c.GPUs); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Host is one simulated GPU host.
type Host struct {
	mu     sync.RWMutex
	cfg    HostConfig
	model  modelSpec
	server *server.Server
	gpus   []*GPU
	now    time.Time
	step   int64 // steps taken
	procs  map[uint32]*Process
	pid    uint32
	vms    map[string]*vmState // by name
	kube   *KubeNode           // a Kubernetes host's pods and claims (kube.go)
	ledger Ledger

	// onBoundary, when set, runs at every step boundary after the step
	// (the fleet's workload scheduler).
	onBoundary func(t time.Time) error
}

// NewHost builds a host with every GPU whole and idle.
func NewHost(cfg HostConfig) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim host: %w", err)
	}
	m, _ := lookupModel(cfg.Model)
	configs := make([]gpusConfig, cfg.GPUs)
	for i := range configs {
		configs[i] = m.mock
	}
	srv, err := server.New(
		server.WithGPUs(configs...),
		server.WithDriverVersion("570.133.20"),
		server.WithNVMLVersion("12.570.133.20"),
		server.WithCUDADriverVersion(12080),
	)
	if err != nil {
		return nil, fmt.Errorf("sim host: mock server: %w", err)
	}
	h := &Host{
		cfg: cfg, model: m, server: srv,
		now:    cfg.Start.UTC(),
		procs:  make(map[uint32]*Process),
		vms:    make(map[string]*vmState),
		pid:    1000 + uint32(splitmix(uint64(cfg.Seed)^hashString(cfg.Name))%20000),
		ledger: newLedger(),
	}
	for i, d := range srv.Devices {
		g := newGPU(h, i, d.(*server.Device))
		h.gpus = append(h.gpus, g)
		if cfg.VGPU != nil && i < len(cfg.VGPU.GPUs) {
			if err := g.setupVGPU(cfg.VGPU.GPUs[i]); err != nil {
				return nil, fmt.Errorf("sim host: %w", err)
			}
		}
	}
	h.installServer()
	if cfg.Root != "" {
		for _, dir := range []string{h.procRoot(), h.podLogDir()} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("sim host: %w", err)
			}
		}
	}
	return h, nil
}

// Name is the host name.
func (h *Host) Name() string { return h.cfg.Name }

// Model is the hosts's GPU model.
func (h *Host) Model() string { return h.cfg.Model }

// NVML is the host's NVML, for collectors/nvml.
func (h *Host) NVML() nvml.Interface { return h.server }

// GPU returns GPU i.
func (h *Host) GPU(i int) *GPU { return h.gpus[i] }

// GPUs returns the host's GPUs.
func (h *Host) GPUs() []*GPU { return slices.Clone(h.gpus) }

// readLock read-locks the host's state for an NVML call and returns the
// unlock: `defer h.readLock()()`.
func (h *Host) readLock() func() {
	h.mu.RLock()
	return h.mu.RUnlock
}

// Now is the host's simulated time.
func (h *Host) Now() time.Time {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.now
}

// ProcRoot is where the host's procfs is written ("" without Root).
func (h *Host) ProcRoot() string {
	if h.cfg.Root == "" {
		return ""
	}
	return h.procRoot()
}

// PodLogDir is where the host's kubelet pod log directory is written.
func (h *Host) PodLogDir() string {
	if h.cfg.Root == "" {
		return ""
	}
	return h.podLogDir()
}

func (h *Host) procRoot() string  { return filepath.Join(h.cfg.Root, "proc") }
func (h *Host) podLogDir() string { return filepath.Join(h.cfg.Root, "pods") }

// Ledger returns a copy of what the host ran so far.
func (h *Host) Ledger() Ledger {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.ledger.clone()
}

// AdvanceTo runs the world in steps until t (rounded down to a step
// boundary). Going backwards is an error.
func (h *Host) AdvanceTo(t time.Time) error {
	for {
		h.mu.Lock()
		next := h.now.Add(h.cfg.Step)
		if t.Before(h.now) {
			h.mu.Unlock()
			return fmt.Errorf("sim host %s: advance to %s: already at %s", h.cfg.Name, t.UTC().Format(time.RFC3339), h.now.Format(time.RFC3339))
		}
		if next.After(t) {
			h.mu.Unlock()
			return nil
		}
		h.stepLocked()
		hook := h.onBoundary
		now := h.now
		h.mu.Unlock()
		if hook != nil {
			if err := hook(now); err != nil {
				return err
			}
		}
	}
}

// stepLocked runs one step [now, now+step): utilization per process, the
// counters that follow load, the utilization samples and the ledger.
func (h *Host) stepLocked() {
	stepUs := uint64(h.cfg.Step / time.Microsecond)
	end := h.now.Add(h.cfg.Step)
	for _, g := range h.gpus {
		if g.lost {
			continue
		}
		for _, p := range g.procs {
			p.util = p.utilAt(h.step)
		}
		g.stepVGPU(h.step, h.now, end)
		g.advance(stepUs, end)
		h.ledger.record(g, stepUs)
	}
	h.now = end
	h.step++
}

// Process is a simulated compute process.
type Process struct {
	PID      uint32
	GPU      int
	MIG      string // instance UUID; empty on a whole GPU
	MemBytes uint64
	Workload Workload

	// Util gives its SM utilization (percent) in a step; nil: SMUtil.
	Util   func(step int64) uint32
	SMUtil uint32

	util uint32 // this step's
}

func (p *Process) utilAt(step int64) uint32 {
	if p.Util != nil {
		return min(p.Util(step), 100)
	}
	return min(p.SMUtil, 100)
}

// Workload is who a process belongs to: a pod, a Slurm job, or neither
// (nothing attributes it). Tenant and Department are what attribution is
// expected to find; the ledger credits them.
type Workload struct {
	Tenant     string
	Department string
	Pod        *Pod
	Slurm      *SlurmJob
}

// Pod is a Kubernetes pod.
type Pod struct{ Namespace, Name, UID string }

// SlurmJob is a Slurm job.
type SlurmJob struct{ ID, Account string }

// Start starts a process now. PID 0 picks the next free one.
func (h *Host) Start(p Process) (uint32, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.GPU < 0 || p.GPU >= len(h.gpus) {
		return 0, fmt.Errorf("sim host %s: start: no gpu %d", h.cfg.Name, p.GPU)
	}
	g := h.gpus[p.GPU]
	if g.vmode != BareMetal {
		return 0, fmt.Errorf("sim host %s: start: gpu %d is a %s gpu: it runs no host processes", h.cfg.Name, p.GPU, g.vmode)
	}
	if p.MIG != "" && g.instance(p.MIG) == nil {
		return 0, fmt.Errorf("sim host %s: start: gpu %d has no mig device %s", h.cfg.Name, p.GPU, p.MIG)
	}
	if p.MIG == "" && g.mig {
		return 0, fmt.Errorf("sim host %s: start: gpu %d is in mig mode; name a mig device", h.cfg.Name, p.GPU)
	}
	if p.PID == 0 {
		for {
			h.pid++
			if _, used := h.procs[h.pid]; !used {
				break
			}
		}
		p.PID = h.pid
	}
	if _, used := h.procs[p.PID]; used {
		return 0, fmt.Errorf("sim host %s: start: pid %d is running", h.cfg.Name, p.PID)
	}
	if p.Workload.Tenant == "" {
		p.Workload.Tenant = collectors.UnattributedTenant
	}
	proc := p
	if err := h.writeProc(&proc); err != nil {
		return 0, err
	}
	h.procs[proc.PID] = &proc
	g.procs = append(g.procs, &proc)
	slices.SortFunc(g.procs, func(a, b *Process) int { return int(a.PID) - int(b.PID) })
	if !g.mig {
		// The driver's first sample of a new process, at its start.
		g.samples = append(g.samples, nvml.ProcessUtilizationSample{Pid: proc.PID, TimeStamp: micros(h.now)})
	}
	return proc.PID, nil
}

// Stop ends a process now.
func (h *Host) Stop(pid uint32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.procs[pid]
	if !ok {
		return fmt.Errorf("sim host %s: stop: pid %d is not running", h.cfg.Name, pid)
	}
	delete(h.procs, pid)
	g := h.gpus[p.GPU]
	g.procs = slices.DeleteFunc(g.procs, func(q *Process) bool { return q.PID == pid })
	return h.removeProc(p)
}

// Processes lists the running processes, by PID.
func (h *Host) Processes() []Process {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]Process, 0, len(h.procs))
	for _, p := range h.procs {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Process) int { return int(a.PID) - int(b.PID) })
	return out
}

// installServer fills the host-level NVML functions the mock server lacks.
func (h *Host) installServer() {
	s := h.server
	s.GpmQueryDeviceSupportFunc = func(d nvml.Device) (nvml.GpmSupport, nvml.Return) {
		g := h.gpuOf(d)
		if g == nil {
			return nvml.GpmSupport{}, nvml.ERROR_INVALID_ARGUMENT
		}
		h.mu.RLock()
		defer h.mu.RUnlock()
		if g.lost {
			return nvml.GpmSupport{}, nvml.ERROR_GPU_IS_LOST
		}
		sup := nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION}
		if h.model.gpm {
			sup.IsSupportedDevice = 1
		}
		return sup, nvml.SUCCESS
	}
	s.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) { return newGPMSample(), nvml.SUCCESS }
	s.GpmSampleFreeFunc = func(nvml.GpmSample) nvml.Return { return nvml.SUCCESS }
	s.GpmMigSampleGetFunc = func(d nvml.Device, gi int, sample nvml.GpmSample) nvml.Return {
		g := h.gpuOf(d)
		if g == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return g.gpmSample(gi, sample)
	}
	s.GpmMetricsGetFunc = gpmMetricsGet
}

func (h *Host) gpuOf(d nvml.Device) *GPU {
	for _, g := range h.gpus {
		if nvml.Device(g.dev) == d {
			return g
		}
	}
	return nil
}

// deterministic ids

func hashString(s string) uint64 {
	sum := sha256.Sum256([]byte(s))
	return binary.BigEndian.Uint64(sum[:8])
}

// splitmix is a 64-bit mixing function: a cheap, good hash of a counter.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// uuidFrom formats a deterministic UUID from its parts.
func uuidFrom(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	b := h.Sum(nil)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func micros(t time.Time) uint64 { return uint64(t.UnixMicro()) }
