package collectors

import "fmt"

// Meters are the quantities one sample measures, in fixed integer units so
// that shares of one GPU add up exactly (split by largest remainder): GPU
// time in GPU-microseconds (interval × share held; a whole GPU for 10 s is
// 10,000,000), memory in MiB-seconds, energy in millijoules (NVML's own
// unit), traffic in bytes.
//
// This file is the one list of meters. Apportioning, the simulator's
// ledger, the spool codec, the store's columns and sums, and the import
// and export columns all range over MeterSpecs; a new meter is a field
// here, its Meter, its MeterSpec and its case in Ptr, plus a migration.
type Meters struct {
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

// Meter names one of the Meters, in their fixed order (the spool and the
// store's column lists follow it).
type Meter int

const (
	MeterGPU Meter = iota
	MeterSMActive
	MeterMemory
	MeterMemPeak
	MeterEnergy
	MeterPCIeTx
	MeterPCIeRx
	MeterNVLinkTx
	MeterNVLinkRx
	NumMeters
)

// MeterSpec describes a meter for every place that handles it.
type MeterSpec struct {
	Column string // ClickHouse column, e.g. "gpu_microseconds"
	File   string // import/export column in human units, e.g. "gpu_seconds"
	// Scale is the decimal places of File's unit that make one stored unit
	// (6: a stored microsecond is 0.000001 s).
	Scale int
	Peak  bool // aggregated by max, not sum
	// Unmeasured is the flag that marks the meter unmeasured in a sample;
	// 0 for meters every source measures.
	Unmeasured Unmeasured
}

// MeterSpecs lists every meter, indexed by Meter.
var MeterSpecs = [NumMeters]MeterSpec{
	MeterGPU:      {Column: "gpu_microseconds", File: "gpu_seconds", Scale: 6},
	MeterSMActive: {Column: "sm_active_microseconds", File: "sm_active_seconds", Scale: 6, Unmeasured: UnmeasuredSMActive},
	MeterMemory:   {Column: "mem_mib_seconds", File: "mem_mib_seconds"},
	MeterMemPeak:  {Column: "mem_peak_bytes", File: "mem_peak_bytes", Peak: true},
	MeterEnergy:   {Column: "energy_millijoules", File: "energy_joules", Scale: 3, Unmeasured: UnmeasuredEnergy},
	MeterPCIeTx:   {Column: "pcie_tx_bytes", File: "pcie_tx_bytes", Unmeasured: UnmeasuredPCIe},
	MeterPCIeRx:   {Column: "pcie_rx_bytes", File: "pcie_rx_bytes", Unmeasured: UnmeasuredPCIe},
	MeterNVLinkTx: {Column: "nvlink_tx_bytes", File: "nvlink_tx_bytes", Unmeasured: UnmeasuredNVLink},
	MeterNVLinkRx: {Column: "nvlink_rx_bytes", File: "nvlink_rx_bytes", Unmeasured: UnmeasuredNVLink},
}

// Ptr points at one meter of m.
func (m *Meters) Ptr(i Meter) *uint64 {
	switch i {
	case MeterGPU:
		return &m.GPUMicroseconds
	case MeterSMActive:
		return &m.SMActiveMicroseconds
	case MeterMemory:
		return &m.MemMiBSeconds
	case MeterMemPeak:
		return &m.MemPeakBytes
	case MeterEnergy:
		return &m.EnergyMillijoules
	case MeterPCIeTx:
		return &m.PCIeTxBytes
	case MeterPCIeRx:
		return &m.PCIeRxBytes
	case MeterNVLinkTx:
		return &m.NVLinkTxBytes
	case MeterNVLinkRx:
		return &m.NVLinkRxBytes
	}
	panic(fmt.Sprintf("collectors: no meter %d", int(i))) // a programming error, never input
}

// Get returns one meter of m.
func (m *Meters) Get(i Meter) uint64 { return *m.Ptr(i) }

// Values lists every meter in Meter order (a literal: the spool and the
// store's insert call it for every sample).
func (m *Meters) Values() [NumMeters]uint64 {
	return [NumMeters]uint64{m.GPUMicroseconds, m.SMActiveMicroseconds, m.MemMiBSeconds, m.MemPeakBytes,
		m.EnergyMillijoules, m.PCIeTxBytes, m.PCIeRxBytes, m.NVLinkTxBytes, m.NVLinkRxBytes}
}

// Add sums two meter sets, peaks by maximum.
func (m Meters) Add(o Meters) Meters {
	for i := range NumMeters {
		p, v := m.Ptr(i), o.Get(i)
		if MeterSpecs[i].Peak {
			*p = max(*p, v)
		} else {
			*p += v
		}
	}
	return m
}
