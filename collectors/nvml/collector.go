// Package nvml reads GPUs through go-nvml's nvml.Interface: the real
// library on a GPU host (nvml.New()), the simulated fleet of
// collectors/sim everywhere else. It is a collectors.Source.
//
// Each signal lives in its own file (device.go, mig.go, process.go,
// energy.go, pcie.go, nvlink.go, gpm.go) behind one small signal type, and
// the runner in this file reads them per GPU: a signal the GPU does not
// support (ERROR_NOT_SUPPORTED) is switched off for that GPU and logged once
// at debug; a signal that fails otherwise is left out of this interval; a
// GPU that falls off the bus (ERROR_GPU_IS_LOST) is reported with its error
// and the other GPUs carry on.
package nvml

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/collectors"
)

// Config configures the NVML source.
type Config struct {
	// MaxPowerWatts bounds a plausible energy delta: more than this many
	// watts over the interval is a bad read or a counter reset and is
	// dropped. An H200 board draws at most 700 W.
	MaxPowerWatts uint64
	// MaxPCIeBytesPerSecond and MaxNVLinkBytesPerSecond bound plausible
	// traffic deltas per direction the same way.
	MaxPCIeBytesPerSecond   uint64
	MaxNVLinkBytesPerSecond uint64
	// GPM reads per-MIG-instance SM activity from GPU Performance
	// Monitoring where the device supports it (Hopper and newer).
	GPM bool
	// ProcessUtilization reads per-process SM utilization on non-MIG GPUs
	// to split time-sliced GPUs; without it they are split by memory.
	ProcessUtilization bool
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		MaxPowerWatts:           2000,
		MaxPCIeBytesPerSecond:   256 << 30, // PCIe 6 x16 is 128 GB/s per direction
		MaxNVLinkBytesPerSecond: 4 << 40,   // NVLink 5 is 1.8 TB/s
		GPM:                     true,
		ProcessUtilization:      true,
	}
}

// Validate reports every problem with the config.
func (c Config) Validate() error {
	var errs []error
	if c.MaxPowerWatts == 0 {
		errs = append(errs, errors.New("max power watts: must be positive"))
	}
	if c.MaxPCIeBytesPerSecond == 0 {
		errs = append(errs, errors.New("max pcie bytes per second: must be positive"))
	}
	if c.MaxNVLinkBytesPerSecond == 0 {
		errs = append(errs, errors.New("max nvlink bytes per second: must be positive"))
	}
	return errors.Join(errs...)
}

// Collector reads every GPU of one host. It is not safe for concurrent use:
// the poll loop calls Read from one goroutine.
type Collector struct {
	lib     nvml.Interface
	cfg     Config
	logger  *slog.Logger
	metrics Metrics

	devices []*device
	out     []collectors.GPUReading

	// gpmMetrics is large (477 metric slots); one is reused for every call.
	gpmMetrics *nvml.GpmMetricsGetType
}

// New initialises NVML and enumerates the GPUs. A missing library is an
// error that says so; a GPU that cannot be identified now is retried at
// every Read and reported until it can.
func New(lib nvml.Interface, cfg Config, logger *slog.Logger, m Metrics) (*Collector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("nvml config: %w", err)
	}
	if lib == nil {
		return nil, errors.New("nvml: no library")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = nopMetrics{}
	}
	c := &Collector{lib: lib, cfg: cfg, logger: logger, metrics: m, gpmMetrics: &nvml.GpmMetricsGetType{}}
	if err := c.check("nvmlInit", lib.Init()); err != nil {
		if errors.Is(err, ErrLibraryNotFound) {
			return nil, fmt.Errorf("nvml init: %w: libnvidia-ml.so.1 is not installed or not on the library path (install the NVIDIA driver, or run with --simulate)", ErrLibraryNotFound)
		}
		return nil, fmt.Errorf("nvml init: %w", err)
	}
	n, ret := lib.DeviceGetCount()
	if err := c.check("nvmlDeviceGetCount", ret); err != nil {
		_ = lib.Shutdown()
		return nil, fmt.Errorf("nvml: count devices: %w", err)
	}
	for i := 0; i < n; i++ {
		d := newDevice(i)
		if err := c.identify(d); err != nil {
			c.logger.Error("gpu not identified; retried every poll", "gpu_index", i, "err", err)
		}
		c.devices = append(c.devices, d)
	}
	return c, nil
}

// Close frees GPM samples and shuts NVML down.
func (c *Collector) Close() error {
	for _, d := range c.devices {
		c.freeGPM(d, true)
	}
	if err := c.check("nvmlShutdown", c.lib.Shutdown()); err != nil {
		return fmt.Errorf("nvml shutdown: %w", err)
	}
	return nil
}

// GPUs lists the GPUs found at start, identified or not.
func (c *Collector) GPUs() []collectors.GPU {
	out := make([]collectors.GPU, len(c.devices))
	for i, d := range c.devices {
		out[i] = d.gpu
	}
	return out
}

// interval is [start, end) of one read.
type interval struct {
	start, end time.Time
	// prevKnown: the device was read successfully at start, so what it saw
	// then (running processes, counters) is this interval's baseline.
	prevKnown bool
}

func (iv interval) micros() uint64 {
	if !iv.end.After(iv.start) {
		return 0
	}
	return uint64(iv.end.Sub(iv.start) / time.Microsecond)
}

func (iv interval) mid() time.Time { return iv.start.Add(iv.end.Sub(iv.start) / 2) }

// signal is one thing read from a GPU. Required signals fail the GPU for
// the interval when they fail; optional ones are left out.
type signal struct {
	name     string
	bit      signalBit
	required bool
	read     func(c *Collector, d *device, r *collectors.GPUReading, iv interval) error
}

type signalBit uint16

const (
	sigIdentity signalBit = 1 << iota
	sigMIG
	sigMemory
	sigUtilization
	sigProcesses
	sigProcessUtilization // switched off inside the processes signal
	sigEnergy
	sigPCIe
	sigNVLink
	sigGPM
	sigVGPU
)

// signals in reading order: MIG layout before processes (to place them),
// processes before GPM (per-instance SM activity).
var signals = [...]signal{
	{name: "identity", bit: sigIdentity, required: true, read: (*Collector).readIdentity},
	{name: "mig", bit: sigMIG, required: true, read: (*Collector).readMIG},
	{name: "vgpu", bit: sigVGPU, required: true, read: (*Collector).readVGPU},
	{name: "memory", bit: sigMemory, read: (*Collector).readMemory},
	{name: "utilization", bit: sigUtilization, read: (*Collector).readUtilization},
	{name: "processes", bit: sigProcesses, required: true, read: (*Collector).readProcesses},
	{name: "energy", bit: sigEnergy, read: (*Collector).readEnergy},
	{name: "pcie", bit: sigPCIe, read: (*Collector).readPCIe},
	{name: "nvlink", bit: sigNVLink, read: (*Collector).readNVLink},
	{name: "gpm", bit: sigGPM, read: (*Collector).readGPM},
}

// Read reads every GPU for [start, end). The returned slice and what it
// points to are reused by the next Read.
func (c *Collector) Read(ctx context.Context, start, end time.Time) ([]collectors.GPUReading, error) {
	c.out = slices.Grow(c.out[:0], len(c.devices))[:len(c.devices)]
	for i, d := range c.devices {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("nvml read: %w", err)
		}
		c.readDevice(d, &c.out[i], start, end)
	}
	return c.out, nil
}

func (c *Collector) readDevice(d *device, r *collectors.GPUReading, start, end time.Time) {
	d.resetReading(r)
	iv := interval{start: start, end: end, prevKnown: d.readOK && d.lastEnd.Equal(start)}
	for i := range signals {
		s := &signals[i]
		if d.off&s.bit != 0 {
			continue
		}
		err := s.read(c, d, r, iv)
		if err == nil {
			continue
		}
		switch {
		case errors.Is(err, ErrGPULost):
			c.failDevice(d, r, fmt.Errorf("gpu %d: %w", d.index, err))
			return
		case errors.Is(err, collectors.ErrNotSupported) && !s.required:
			d.off |= s.bit
			c.logger.Debug("signal not supported by this gpu; left out", "signal", s.name, "gpu_uuid", d.gpu.UUID, "err", err)
		case s.required:
			c.failDevice(d, r, fmt.Errorf("gpu %d: read %s: %w", d.index, s.name, err))
			return
		default:
			c.logger.Warn("signal not read; left out this interval", "signal", s.name, "gpu_uuid", d.gpu.UUID, "err", err)
		}
	}
	d.readOK = true
	d.lastEnd = end
}

// failDevice turns the reading into an error report and forgets the
// device's baselines: after an outage every counter starts over.
func (c *Collector) failDevice(d *device, r *collectors.GPUReading, err error) {
	*r = collectors.GPUReading{GPU: d.gpu, Err: err}
	d.readOK = false
	d.procs.forget()
	d.migs = nil
	d.vgpu = nil
	c.freeGPM(d, false)
}
