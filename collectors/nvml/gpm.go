package nvml

import (
	"errors"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/collectors"
)

// gpmState holds the two GPM samples of one GPU instance: the previous
// read's and a spare for this read.
type gpmState struct {
	prev, cur nvml.GpmSample
	have      bool // prev holds a sample taken at the last read
	gen       uint32
}

// errGPMUnsupported marks a device that answers the GPM support query with
// "no" rather than an error code.
var errGPMUnsupported = &Error{Function: "nvmlGpmQueryDeviceSupport", Code: "ERROR_NOT_SUPPORTED", ret: nvml.ERROR_NOT_SUPPORTED}

// readGPM reads each MIG instance's SM activity from GPU Performance
// Monitoring (nvmlGpmMigSampleGet, metric GPM_METRIC_SM_UTIL) between this
// read and the last. Only Hopper and newer support it; elsewhere the signal
// is switched off and MIG instances carry no SM activity.
func (c *Collector) readGPM(d *device, r *collectors.GPUReading, iv interval) error {
	if !r.MIG || !c.cfg.GPM || len(r.Instances) == 0 {
		return nil
	}
	if !d.gpmChecked {
		sup, ret := c.lib.GpmQueryDeviceSupport(d.handle)
		if err := c.check("nvmlGpmQueryDeviceSupport", ret); err != nil {
			return err
		}
		if sup.IsSupportedDevice == 0 {
			return errGPMUnsupported
		}
		d.gpmChecked = true
	}
	if d.gpm == nil {
		d.gpm = make(map[uint32]*gpmState)
	}
	for i := range r.Instances {
		inst := &r.Instances[i]
		st := d.gpm[inst.GPUInstanceID]
		if st != nil && st.gen == d.migGen {
			// A second compute instance of the same GPU instance: GPM is
			// per GPU instance, so it shares the reading.
			for j := 0; j < i; j++ {
				if r.Instances[j].GPUInstanceID == inst.GPUInstanceID {
					inst.SMActive = r.Instances[j].SMActive
					break
				}
			}
			continue
		}
		if st == nil {
			var err error
			if st, err = c.newGPMState(); err != nil {
				return err
			}
			d.gpm[inst.GPUInstanceID] = st
		}
		st.gen = d.migGen
		if err := c.check("nvmlGpmMigSampleGet", c.lib.GpmMigSampleGet(d.handle, int(inst.GPUInstanceID), st.cur)); err != nil {
			if errors.Is(err, ErrGPULost) || errors.Is(err, collectors.ErrNotSupported) {
				return err
			}
			st.have = false
			c.logger.Warn("gpm sample not taken; instance sm activity left out", "gpu_uuid", d.gpu.UUID, "mig_uuid", inst.UUID, "err", err)
			continue
		}
		if st.have && iv.prevKnown {
			m := c.gpmMetrics
			m.NumMetrics = 1
			m.Sample1, m.Sample2 = st.prev, st.cur
			m.Metrics[0] = nvml.GpmMetric{MetricId: uint32(nvml.GPM_METRIC_SM_UTIL)}
			err := c.check("nvmlGpmMetricsGet", c.lib.GpmMetricsGet(m))
			if err == nil {
				err = c.check("nvmlGpmMetricsGet(GPM_METRIC_SM_UTIL)", nvml.Return(m.Metrics[0].NvmlReturn))
			}
			if err == nil {
				inst.SMActive = percentRatio(m.Metrics[0].Value)
			} else {
				c.logger.Warn("gpm metric not computed; instance sm activity left out", "gpu_uuid", d.gpu.UUID, "mig_uuid", inst.UUID, "err", err)
			}
			m.Sample1, m.Sample2 = nil, nil
		}
		st.prev, st.cur = st.cur, st.prev
		st.have = true
	}
	// Free the samples of GPU instances that are gone.
	for gi, st := range d.gpm {
		if st.gen != d.migGen {
			c.freeGPMState(st)
			delete(d.gpm, gi)
		}
	}
	return nil
}

func (c *Collector) newGPMState() (*gpmState, error) {
	a, ret := c.lib.GpmSampleAlloc()
	if err := c.check("nvmlGpmSampleAlloc", ret); err != nil {
		return nil, err
	}
	b, ret := c.lib.GpmSampleAlloc()
	if err := c.check("nvmlGpmSampleAlloc", ret); err != nil {
		_ = c.lib.GpmSampleFree(a)
		return nil, err
	}
	return &gpmState{prev: a, cur: b}, nil
}

func (c *Collector) freeGPMState(st *gpmState) {
	for _, s := range []nvml.GpmSample{st.prev, st.cur} {
		if s != nil {
			_ = c.check("nvmlGpmSampleFree", c.lib.GpmSampleFree(s))
		}
	}
}

// freeGPM frees every GPM sample of a device; all also forgets whether the
// device supports GPM.
func (c *Collector) freeGPM(d *device, all bool) {
	for gi, st := range d.gpm {
		c.freeGPMState(st)
		delete(d.gpm, gi)
	}
	if all {
		d.gpmChecked = false
	}
}
