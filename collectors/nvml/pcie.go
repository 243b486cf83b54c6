package nvml

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
)

var pcieFields = []uint32{nvml.FI_DEV_PCIE_COUNT_TX_BYTES, nvml.FI_DEV_PCIE_COUNT_RX_BYTES}

// readPCIe reads the PCIe transmit and receive byte counters (field values
// 197/198, which may wrap) as deltas.
func (c *Collector) readPCIe(d *device, r *collectors.GPUReading, iv interval) error {
	var v [2]uint64
	var w [2]uint
	if err := c.readFields(d, d.pcieFV[:], pcieFields, 0, v[:], w[:]); err != nil {
		return err
	}
	maxDelta := perInterval(c.cfg.MaxPCIeBytesPerSecond, iv)
	tx, evTx := d.pcie[0].advance(v[0], w[0], iv, maxDelta)
	rx, evRx := d.pcie[1].advance(v[1], w[1], iv, maxDelta)
	if evTx == counterImplausible || evRx == counterImplausible {
		c.logger.Warn("pcie byte delta implausible; left out this interval", "gpu_uuid", d.gpu.UUID)
	}
	r.Counters[meter.PCIeTx], r.Counters[meter.PCIeRx] = tx, rx
	return nil
}
