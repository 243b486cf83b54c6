package collectors

import (
	"errors"
	"fmt"
)

// ErrBadVGPUReading marks a vGPU host reading that cannot be metered as
// it stands; the GPU then makes no samples for the interval.
var ErrBadVGPUReading = errors.New("inconsistent vGPU reading")

// CheckVGPU reports a vGPU host reading NVIDIA's vGPU manager cannot
// produce: MIG-backed and time-sliced instances on one GPU, MIG-backed
// instances on a GPU not in MIG mode (or time-sliced on one that is),
// instances without a UUID or type, or a fixed-share instance without its
// type's instance count. (Fixed shares adding up to more than the GPU are
// apportioned pro rata: instances that replaced one another within the
// interval may, and Apportion knows their presence.)
// It is pure; the NVML source fails the GPU for the interval on an
// error, and Apportion makes nothing of such a reading.
func (g *GPUReading) CheckVGPU() error {
	if g.Virtualization != VirtHostVGPU {
		if len(g.VGPUs) > 0 {
			return fmt.Errorf("%w: %d vGPU instances on a GPU in virtualization mode %s", ErrBadVGPUReading, len(g.VGPUs), g.Virtualization)
		}
		return nil
	}
	var migBacked, timeSliced int
	seen := make(map[string]bool, len(g.VGPUs))
	for i := range g.VGPUs {
		v := &g.VGPUs[i]
		switch {
		case v.UUID == "":
			return fmt.Errorf("%w: vGPU instance %d has no UUID", ErrBadVGPUReading, i)
		case seen[v.UUID]:
			return fmt.Errorf("%w: vGPU instance %s listed twice", ErrBadVGPUReading, v.UUID)
		case v.Type == "":
			return fmt.Errorf("%w: vGPU instance %s has no type", ErrBadVGPUReading, v.UUID)
		}
		seen[v.UUID] = true
		if v.MIGBacked() {
			migBacked++
			continue
		}
		timeSliced++
		if g.Scheduler == SchedulerFixedShare && v.MaxInstances == 0 {
			return fmt.Errorf("%w: fixed-share vGPU %s (%s) without its type's max instances", ErrBadVGPUReading, v.UUID, v.Type)
		}
	}
	switch {
	case migBacked > 0 && timeSliced > 0:
		return fmt.Errorf("%w: %d MIG-backed and %d time-sliced vGPU instances on one GPU (NVIDIA allows one kind per GPU)", ErrBadVGPUReading, migBacked, timeSliced)
	case migBacked > 0 && !g.MIG:
		return fmt.Errorf("%w: MIG-backed vGPU instances on a GPU not in MIG mode", ErrBadVGPUReading)
	case timeSliced > 0 && g.MIG:
		return fmt.Errorf("%w: time-sliced vGPU instances on a GPU in MIG mode", ErrBadVGPUReading)
	}
	return nil
}
