// Package meter is the meter table: every quantity gpumeter measures, in
// one place. For each meter it says the ClickHouse column, the column and
// unit of import/export files, whether it sums or peaks, which
// "unmeasured" flag marks it missing, and which price-book meter it feeds
// with what divisor, label and display precision. The spool codec, the
// store's columns and rollup SQL, the importer and exporter, pricing's
// meter list, usage rows, reports and the API all range over these tables.
//
// A new meter is a field of Values, its ID, its Spec row (and a Priced row
// when a price book may price it), an NVML signal file in collectors/nvml
// that fills it, and a migration adding its column.
//
// It is a leaf package (standard library and shopspring/decimal only, no
// clock, files or network), imported by the GPU host and the server alike.
package meter

import "fmt"

// Values are the quantities of one sample, or a sum of samples, in fixed
// integer units so that shares of one GPU add up exactly (split by largest
// remainder): GPU time in GPU-microseconds (interval × share held; a whole
// GPU for 10 s is 10,000,000), memory in MiB-seconds, energy in
// millijoules (NVML's own unit), traffic in bytes.
type Values struct {
	GPUMicroseconds      uint64
	SMActiveMicroseconds uint64
	MemMiBSeconds        uint64
	MemPeakBytes         uint64 // a peak: aggregates by max, not sum
	EnergyMillijoules    uint64
	PCIeTxBytes          uint64
	PCIeRxBytes          uint64
	NVLinkTxBytes        uint64
	NVLinkRxBytes        uint64
}

// ID names one of the Values, in their fixed order (the spool and the
// store's column lists follow it).
type ID int

const (
	GPU ID = iota
	SMActive
	Memory
	MemPeak
	Energy
	PCIeTx
	PCIeRx
	NVLinkTx
	NVLinkRx
	Count // the number of meters
)

// Source says where the collector gets a meter.
type Source int

const (
	// PerConsumer meters are measured, or derived, for each consumer row.
	PerConsumer Source = iota
	// DeviceCounter meters are counters NVML reads per physical GPU (one
	// Delta per interval); the collector splits a GPU's delta over the
	// rows that held it (see collectors/attribution).
	DeviceCounter
)

// Spec describes a meter for every place that handles it.
type Spec struct {
	Column string // ClickHouse column, e.g. "gpu_microseconds"
	File   string // import/export column in human units, e.g. "gpu_seconds"
	// Scale is the decimal places of File's unit that make one stored unit
	// (6: a stored microsecond is 0.000001 s).
	Scale int
	Peak  bool // aggregated by max, not sum
	// Unmeasured is the flag that marks the meter unmeasured in a sample;
	// 0 for meters every source measures.
	Unmeasured Unmeasured
	Source     Source
	// IdleShares: a device counter's delta is shared over every row of the
	// GPU by GPU time held, idle capacity included (energy: an idle GPU
	// draws power); otherwise only over the rows that ran something
	// (traffic).
	IdleShares bool
	// MaxPerSecond is the most one GPU can add per second, in stored
	// units; imports refuse more. 0: bounded by other rules (SM time by
	// GPU time, the peak by MaxMemoryBytes).
	MaxPerSecond uint64
	// RateUnit is MaxPerSecond's unit in File's terms, for messages
	// ("4000 J a second").
	RateUnit string
}

// Physical limits of one GPU. They are upper bounds well above any GPU
// shipping or announced (B200 draws 1 kW, PCIe 6.0 x16 moves 128 GB/s a
// direction, NVLink 5 900 GB/s), there to catch wrapped or garbage
// counters (2^64-1 next to small values would make every sum wrap), not
// to judge plausible usage.
const (
	MaxGPUPowerWatts        = 4_000
	MaxPCIeBytesPerSecond   = 256_000_000_000   // PCIe 7.0 x16, one direction
	MaxNVLinkBytesPerSecond = 2_000_000_000_000 // one direction
	MaxMemoryMiB            = 2_000_000         // framebuffer, ~1.9 TiB
	MaxMemoryBytes          = MaxMemoryMiB << 20
)

// Specs lists every meter, indexed by ID.
var Specs = [Count]Spec{
	GPU:      {Column: "gpu_microseconds", File: "gpu_seconds", Scale: 6, MaxPerSecond: 1_000_000, RateUnit: "s"},
	SMActive: {Column: "sm_active_microseconds", File: "sm_active_seconds", Scale: 6, Unmeasured: UnmeasuredSMActive},
	Memory:   {Column: "mem_mib_seconds", File: "mem_mib_seconds", MaxPerSecond: MaxMemoryMiB, RateUnit: "MiB"},
	MemPeak:  {Column: "mem_peak_bytes", File: "mem_peak_bytes", Peak: true},
	Energy: {Column: "energy_millijoules", File: "energy_joules", Scale: 3, Unmeasured: UnmeasuredEnergy,
		Source: DeviceCounter, IdleShares: true, MaxPerSecond: MaxGPUPowerWatts * 1000, RateUnit: "J"},
	PCIeTx: {Column: "pcie_tx_bytes", File: "pcie_tx_bytes", Unmeasured: UnmeasuredPCIe,
		Source: DeviceCounter, MaxPerSecond: MaxPCIeBytesPerSecond, RateUnit: "bytes"},
	PCIeRx: {Column: "pcie_rx_bytes", File: "pcie_rx_bytes", Unmeasured: UnmeasuredPCIe,
		Source: DeviceCounter, MaxPerSecond: MaxPCIeBytesPerSecond, RateUnit: "bytes"},
	NVLinkTx: {Column: "nvlink_tx_bytes", File: "nvlink_tx_bytes", Unmeasured: UnmeasuredNVLink,
		Source: DeviceCounter, MaxPerSecond: MaxNVLinkBytesPerSecond, RateUnit: "bytes"},
	NVLinkRx: {Column: "nvlink_rx_bytes", File: "nvlink_rx_bytes", Unmeasured: UnmeasuredNVLink,
		Source: DeviceCounter, MaxPerSecond: MaxNVLinkBytesPerSecond, RateUnit: "bytes"},
}

// MaxRateText is a meter's MaxPerSecond in File's unit ("4000 J").
func (s Spec) MaxRateText() string {
	q := s.MaxPerSecond
	for range s.Scale {
		q /= 10
	}
	return fmt.Sprintf("%d %s", q, s.RateUnit)
}

// Columns lists every meter's ClickHouse column in ID order.
func Columns() []string {
	out := make([]string, Count)
	for i, s := range Specs {
		out[i] = s.Column
	}
	return out
}

// Ptr points at one meter of v.
func (v *Values) Ptr(i ID) *uint64 {
	switch i {
	case GPU:
		return &v.GPUMicroseconds
	case SMActive:
		return &v.SMActiveMicroseconds
	case Memory:
		return &v.MemMiBSeconds
	case MemPeak:
		return &v.MemPeakBytes
	case Energy:
		return &v.EnergyMillijoules
	case PCIeTx:
		return &v.PCIeTxBytes
	case PCIeRx:
		return &v.PCIeRxBytes
	case NVLinkTx:
		return &v.NVLinkTxBytes
	case NVLinkRx:
		return &v.NVLinkRxBytes
	}
	panic(fmt.Sprintf("meter: no meter %d", int(i))) // a programming error, never input
}

// Get returns one meter of v.
func (v *Values) Get(i ID) uint64 { return *v.Ptr(i) }

// Array lists every meter in ID order (a literal: the spool and the
// store's insert call it for every sample).
func (v *Values) Array() [Count]uint64 {
	return [Count]uint64{v.GPUMicroseconds, v.SMActiveMicroseconds, v.MemMiBSeconds, v.MemPeakBytes,
		v.EnergyMillijoules, v.PCIeTxBytes, v.PCIeRxBytes, v.NVLinkTxBytes, v.NVLinkRxBytes}
}

// FromArray is the inverse of Array (a literal, like Array).
func FromArray(a [Count]uint64) Values {
	return Values{a[GPU], a[SMActive], a[Memory], a[MemPeak], a[Energy], a[PCIeTx], a[PCIeRx], a[NVLinkTx], a[NVLinkRx]}
}

// Add sums two meter sets, peaks by maximum.
func (v Values) Add(o Values) Values {
	for i := range Count {
		p, x := v.Ptr(i), o.Get(i)
		if Specs[i].Peak {
			*p = max(*p, x)
		} else {
			*p += x
		}
	}
	return v
}
