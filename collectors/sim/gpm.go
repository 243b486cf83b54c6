package sim

import (
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// gpmSample is a simulated GPM sample: when it was taken and the GPU
// instance's cumulative SM-active time then.
type gpmSample struct {
	mu       sync.Mutex
	atUs     uint64
	activeUs uint64
	valid    bool
}

var _ nvml.GpmSample = (*gpmSample)(nil)

func newGPMSample() *gpmSample { return &gpmSample{} }

// Free, Get and MigGet satisfy nvml.GpmSample; the collector goes through
// the library's functions (GpmMigSampleGet), which the host implements.
func (s *gpmSample) Free() nvml.Return                   { return nvml.SUCCESS }
func (s *gpmSample) Get(nvml.Device) nvml.Return         { return nvml.ERROR_NOT_SUPPORTED }
func (s *gpmSample) MigGet(nvml.Device, int) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }

// gpmSample fills sample with GPU instance gi's state now.
func (g *GPU) gpmSample(gi int, sample nvml.GpmSample) nvml.Return {
	h := g.host
	h.mu.RLock()
	defer h.mu.RUnlock()
	if g.lost {
		return nvml.ERROR_GPU_IS_LOST
	}
	if !h.model.gpm {
		return nvml.ERROR_NOT_SUPPORTED
	}
	s, ok := sample.(*gpmSample)
	if !ok {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	for _, in := range g.instances {
		if int(in.gi) == gi {
			s.mu.Lock()
			s.atUs, s.activeUs, s.valid = micros(h.now), in.activeUs, true
			s.mu.Unlock()
			return nvml.SUCCESS
		}
	}
	return nvml.ERROR_NOT_FOUND
}

// gpmMetricsGet computes the metrics between two samples; only
// GPM_METRIC_SM_UTIL is simulated.
func gpmMetricsGet(m *nvml.GpmMetricsGetType) nvml.Return {
	if m == nil || m.NumMetrics > uint32(len(m.Metrics)) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	s1, ok1 := m.Sample1.(*gpmSample)
	s2, ok2 := m.Sample2.(*gpmSample)
	if !ok1 || !ok2 {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	s1.mu.Lock()
	at1, active1, valid1 := s1.atUs, s1.activeUs, s1.valid
	s1.mu.Unlock()
	s2.mu.Lock()
	at2, active2, valid2 := s2.atUs, s2.activeUs, s2.valid
	s2.mu.Unlock()
	if !valid1 || !valid2 || at2 <= at1 || active2 < active1 {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	for i := uint32(0); i < m.NumMetrics; i++ {
		mt := &m.Metrics[i]
		if nvml.GpmMetricId(mt.MetricId) != nvml.GPM_METRIC_SM_UTIL {
			mt.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			continue
		}
		mt.Value = float64(active2-active1) / float64(at2-at1) * 100
		mt.NvmlReturn = uint32(nvml.SUCCESS)
	}
	return nvml.SUCCESS
}
