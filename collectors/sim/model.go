package sim

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

type gpusConfig = gpus.Config

// modelSpec is what the simulation needs to know about a GPU model.
type modelSpec struct {
	name     string // canonical
	nvmlName string // what real NVML calls it
	mock     gpus.Config
	mig      gpucatalog.Model
	idleW    uint64 // board power when idle
	maxW     uint64 // board power at full load
	gpm      bool   // GPU Performance Monitoring (Hopper)
	sriov    bool   // vGPU on SR-IOV virtual functions (Ampere and newer)
	pcieBps  uint64 // PCIe bytes per second per direction at full load (a training job's typical, not the link's peak)
	nvlinkBp uint64 // NVLink bytes per second per direction at full load (likewise)
}

// lookupModel returns the simulated model. The mock's GPU configs give
// memory and architecture; profile names, slices and memory come from
// internal/gpucatalog (NVIDIA's tables), because the mock's MIG data is
// wrong for Hopper.
func lookupModel(name string) (modelSpec, bool) {
	var m modelSpec
	switch name {
	case gpucatalog.A100SXM4_40GB:
		m = modelSpec{nvmlName: "NVIDIA A100-SXM4-40GB", mock: gpus.A100_SXM4_40GB, idleW: 55, maxW: 400, pcieBps: 1 << 30, nvlinkBp: 5 << 30}
	case gpucatalog.A100SXM4_80GB:
		m = modelSpec{nvmlName: "NVIDIA A100-SXM4-80GB", mock: gpus.A100_SXM4_80GB, idleW: 60, maxW: 400, pcieBps: 1 << 30, nvlinkBp: 5 << 30}
	case gpucatalog.H100SXM5_80GB:
		m = modelSpec{nvmlName: "NVIDIA H100 80GB HBM3", mock: gpus.H100_SXM5_80GB, idleW: 70, maxW: 700, gpm: true, pcieBps: 2 << 30, nvlinkBp: 10 << 30}
	case gpucatalog.H200SXM5_141GB:
		m = modelSpec{nvmlName: "NVIDIA H200", mock: gpus.H200_SXM5_141GB, idleW: 75, maxW: 700, gpm: true, pcieBps: 2 << 30, nvlinkBp: 10 << 30}
	default:
		return modelSpec{}, false
	}
	mig, ok := gpucatalog.LookupModel(name)
	if !ok {
		return modelSpec{}, false
	}
	m.name, m.mig = name, mig
	m.sriov = true // every simulated model is Ampere or Hopper
	m.mock.Name = m.nvmlName
	return m, true
}

// Models lists the simulated GPU models.
func Models() []string {
	return []string{gpucatalog.H100SXM5_80GB, gpucatalog.A100SXM4_40GB, gpucatalog.H200SXM5_141GB, gpucatalog.A100SXM4_80GB}
}

// profile finds a MIG profile of the model by name.
func (m modelSpec) profile(name string) (gpucatalog.Profile, bool) {
	for _, p := range m.mig.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return gpucatalog.Profile{}, false
}
