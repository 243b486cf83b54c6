package admission

import (
	"fmt"

	"github.com/shopspring/decimal"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// HAMi shares a GPU between containers by a granted part of its compute
// (nvidia.com/gpucores, in percent; 0 or none means unlimited, so the
// whole GPU) and of its memory. A container that asks for a HAMi resource
// without nvidia.com/gpu gets one GPU, HAMi's default.
const hamiDefaultGPUs = 1

var (
	hundred = decimal.NewFromInt(100)
	one     = decimal.NewFromInt(1)
)

// share is the part of each of its GPUs a container is granted under
// HAMi: its cores percentage, or its memory share when that is larger (a
// memory-bound slice holds the GPU's memory from others). One (the whole
// GPU) when it limits no cores. asks is whether it names any HAMi
// resource. memoryMiB is one GPU's memory (0 when the model's is not
// known: memory then counts for nothing and cores alone decide).
func (h HAMiConfig) share(c corev1.Container, memoryMiB int64) (share decimal.Decimal, asks bool, err error) {
	quantity := func(name string) (int64, bool, error) {
		if name == "" {
			return 0, false, nil
		}
		q, ok := c.Resources.Requests[corev1.ResourceName(name)]
		if !ok {
			q, ok = c.Resources.Limits[corev1.ResourceName(name)]
		}
		if !ok {
			return 0, false, nil
		}
		if q.Sign() < 0 {
			return 0, true, fmt.Errorf("container %s: %s %s is negative", c.Name, name, q.String())
		}
		v, exact := q.AsInt64()
		if !exact {
			return 0, true, fmt.Errorf("container %s: %s %s: want a whole number", c.Name, name, q.String())
		}
		return v, true, nil
	}
	cores, hasCores, err := quantity(h.CoresResource)
	if err != nil {
		return decimal.Decimal{}, true, err
	}
	mem, hasMem, err := quantity(h.MemoryResource)
	if err != nil {
		return decimal.Decimal{}, true, err
	}
	memPct, hasMemPct, err := quantity(h.MemoryPercentageResource)
	if err != nil {
		return decimal.Decimal{}, true, err
	}
	asks = hasCores || hasMem || hasMemPct
	if hasCores && cores > 100 {
		return decimal.Decimal{}, true, fmt.Errorf("container %s: %s %d: want a percentage from 0 to 100", c.Name, h.CoresResource, cores)
	}
	if hasMemPct && memPct > 100 {
		return decimal.Decimal{}, true, fmt.Errorf("container %s: %s %d: want a percentage from 0 to 100", c.Name, h.MemoryPercentageResource, memPct)
	}
	if cores == 0 {
		return one, asks, nil // no cores limit: the container may use all of the GPU
	}
	share = decimal.NewFromInt(cores).Div(hundred)
	if hasMemPct {
		share = decimal.Max(share, decimal.NewFromInt(memPct).Div(hundred))
	}
	if hasMem && memoryMiB > 0 {
		share = decimal.Max(share, decimal.NewFromInt(mem).DivRound(decimal.NewFromInt(memoryMiB), 18))
	}
	return decimal.Min(share, one), asks, nil
}

// hamiGPUs is a container's nvidia.com/gpu count where HAMi decides it:
// the request (else limit), or HAMi's default of one when the container
// names a HAMi resource but no GPU count.
func hamiGPUs(c corev1.Container, asks bool) (resource.Quantity, bool) {
	q, ok := c.Resources.Requests[gpuResource]
	if !ok {
		q, ok = c.Resources.Limits[gpuResource]
	}
	if !ok && asks {
		return *resource.NewQuantity(hamiDefaultGPUs, resource.DecimalSI), true
	}
	return q, ok
}
