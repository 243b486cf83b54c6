package nvml

import (
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
)

var nvlinkFields = []uint32{nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX}

// nvlinkAllLinks as a field's scope sums the counter over every link.
const nvlinkAllLinks = math.MaxUint32

// readNVLink reads the NVLink data throughput counters (field values
// 138/139, KiB, summed over all links) as byte deltas. GPUs without NVLink
// answer NOT_SUPPORTED: the signal is switched off for them and the
// samples go out without it.
func (c *Collector) readNVLink(d *device, r *collectors.GPUReading, iv interval) error {
	var v [2]uint64
	var w [2]uint
	if err := c.readFields(d, d.nvlinkFV[:], nvlinkFields, nvlinkAllLinks, v[:], w[:]); err != nil {
		return err
	}
	maxKiB := perInterval(c.cfg.MaxNVLinkBytesPerSecond, iv) / 1024
	tx, evTx := d.nvlink[0].advance(v[0], w[0], iv, maxKiB)
	rx, evRx := d.nvlink[1].advance(v[1], w[1], iv, maxKiB)
	if evTx == counterImplausible || evRx == counterImplausible {
		c.logger.Warn("nvlink byte delta implausible; left out this interval", "gpu_uuid", d.gpu.UUID)
	}
	tx.Value *= 1024
	rx.Value *= 1024
	r.Counters[meter.NVLinkTx], r.Counters[meter.NVLinkRx] = tx, rx
	return nil
}
