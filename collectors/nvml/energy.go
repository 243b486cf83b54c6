package nvml

import (
	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// readEnergy reads the board's energy counter (mJ since the driver loaded,
// nvmlDeviceGetTotalEnergyConsumption, Volta and newer) as a delta.
func (c *Collector) readEnergy(d *device, r *collectors.GPUReading, iv interval) error {
	mj, ret := d.handle.GetTotalEnergyConsumption()
	if err := c.check("nvmlDeviceGetTotalEnergyConsumption", ret); err != nil {
		return err
	}
	// mJ = W × ms = W × µs / 1000
	maxDelta := collectors.MulDiv(c.cfg.MaxPowerWatts, iv.micros(), 1000)
	delta, ev := d.energy.advance(mj, 64, iv, maxDelta)
	switch ev {
	case counterReset:
		c.logger.Warn("energy counter went backwards (driver reload?); counted from the reset", "gpu_uuid", d.gpu.UUID, "reading_mj", mj)
	case counterImplausible:
		c.logger.Warn("energy delta implausible; left out this interval", "gpu_uuid", d.gpu.UUID, "reading_mj", mj, "max_mj", maxDelta)
	}
	r.Counters[meter.Energy] = delta
	return nil
}
