package sim

import (
	"maps"
	"slices"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// Ledger is what the simulator ran, per tenant, by the accounting rules of
// docs/collector.md: whole GPUs and time-sliced GPUs split by SM
// utilization (memory when nothing ran), MIG instances by compute slices
// and going to the tenant they are rented to, rounded to whole
// microseconds per GPU and step by largest remainder exactly as the
// collector rounds. Idle time is under the empty tenant.
//
// The ledger matches the collector's output exactly when the collector
// polls at every step boundary from the host's start and processes on MIG
// instances run only on rented ones (their exact start and stop are not
// visible to NVML). Energy is apportioned by the same rule in floating
// point; the collector's integer split differs by rounding only.
//
// On vGPU hosts each VM is booked its vGPU instances' time by the rules of
// vgpuShares (the scheduler's policy, MIG-backed by slices) and a
// passthrough GPU's whole time, under its tenant ("(unattributed)" for a
// VM nothing maps) and, in GPUMicrosecondsByWorkload, under "vm/<VM id>".
type Ledger struct {
	GPUMicroseconds map[string]uint64 // by tenant; "" is idle
	// GPUMicrosecondsByWorkload is the VMs' time by workload, "vm/<id>"
	// with the id as NVML's GetVmID reports it (VM.Workload).
	GPUMicrosecondsByWorkload map[string]uint64
	// GPUMicrosecondsByPod is the Kubernetes hosts' pods' time
	// (kube.go), by "namespace/name", measured: whole GPUs and shared
	// ones by SM utilization, a claimed MIG device wholly to its pod.
	// GrantedGPUMicrosecondsByPod is the HAMi pods' time billed by their
	// grants instead (cores % × time, by largest remainder per step).
	GPUMicrosecondsByPod        map[string]uint64
	GrantedGPUMicrosecondsByPod map[string]uint64
	EnergyMillijoules           map[string]float64 // by tenant; "" is idle
	TotalEnergyMillijoules      uint64
	GPUSteps                    uint64 // GPU × steps recorded
}

func newLedger() Ledger {
	return Ledger{GPUMicroseconds: map[string]uint64{}, GPUMicrosecondsByWorkload: map[string]uint64{}, EnergyMillijoules: map[string]float64{},
		GPUMicrosecondsByPod: map[string]uint64{}, GrantedGPUMicrosecondsByPod: map[string]uint64{}}
}

func (l Ledger) clone() Ledger {
	c := l
	c.GPUMicroseconds = maps.Clone(l.GPUMicroseconds)
	c.GPUMicrosecondsByWorkload = maps.Clone(l.GPUMicrosecondsByWorkload)
	c.GPUMicrosecondsByPod = maps.Clone(l.GPUMicrosecondsByPod)
	c.GrantedGPUMicrosecondsByPod = maps.Clone(l.GrantedGPUMicrosecondsByPod)
	c.EnergyMillijoules = maps.Clone(l.EnergyMillijoules)
	return c
}

// Add adds another ledger into l.
func (l *Ledger) Add(o Ledger) {
	if l.GPUMicroseconds == nil {
		*l = newLedger()
	}
	for k, v := range o.GPUMicroseconds {
		l.GPUMicroseconds[k] += v
	}
	for k, v := range o.GPUMicrosecondsByWorkload {
		l.GPUMicrosecondsByWorkload[k] += v
	}
	for k, v := range o.GPUMicrosecondsByPod {
		l.GPUMicrosecondsByPod[k] += v
	}
	for k, v := range o.GrantedGPUMicrosecondsByPod {
		l.GrantedGPUMicrosecondsByPod[k] += v
	}
	for k, v := range o.EnergyMillijoules {
		l.EnergyMillijoules[k] += v
	}
	l.TotalEnergyMillijoules += o.TotalEnergyMillijoules
	l.GPUSteps += o.GPUSteps
}

// Tenants lists the tenants with GPU time, idle ("") included, sorted.
func (l Ledger) Tenants() []string {
	return slices.Sorted(maps.Keys(l.GPUMicroseconds))
}

type ledgerRow struct {
	tenant   string
	workload string // a VM's "vm/<id>"; empty otherwise
	pod      string // a pod's "namespace/name"; empty otherwise
	gpu, sm  float64
}

// record books one step of one GPU.
func (l *Ledger) record(g *GPU, stepUs uint64) {
	var rows []ledgerRow
	if g.vmode != BareMetal {
		rows = vgpuRows(g, stepUs)
	} else if !g.mig {
		rows = splitProcs(g.procs, stepUs, true)
		if len(rows) == 0 && g.host.kube != nil {
			rows = claimRows(g.host.kube.claimants(g), stepUs)
		}
		if len(rows) == 0 {
			rows = append(rows, ledgerRow{tenant: "", gpu: float64(stepUs)})
		}
	} else {
		insts := slices.Clone(g.instances)
		slices.SortFunc(insts, func(a, b *Instance) int {
			switch {
			case a.uuid < b.uuid:
				return -1
			case a.uuid > b.uuid:
				return 1
			}
			return 0
		})
		weights := make([]uint64, 0, len(insts)+1)
		used := uint64(0)
		for _, in := range insts {
			w := uint64(in.profile.ComputeSlices) * 1000
			weights = append(weights, w)
			used += w
		}
		if rest := uint64(gpucatalog.ComputeSlices)*1000 - used; rest > 0 {
			weights = append(weights, rest)
		}
		caps := collectors.Split(nil, stepUs, weights)
		for i, in := range insts {
			var procs []*Process
			var util uint64
			for _, p := range g.procs {
				if p.MIG == in.uuid {
					procs = append(procs, p)
					util += uint64(p.util)
				}
			}
			sm := 0.0
			if g.host.model.gpm {
				sm = float64(caps[i]) * float64(min(util, 100)) / 100
			}
			switch {
			case in.claim != nil:
				rows = append(rows, ledgerRow{tenant: in.claim.tenant, pod: in.claim.key(), gpu: float64(caps[i]), sm: sm})
			case in.tenant != "":
				rows = append(rows, ledgerRow{tenant: in.tenant, gpu: float64(caps[i]), sm: sm})
			case len(procs) > 0:
				sub := splitProcs(procs, caps[i], false)
				for j := range sub {
					sub[j].sm = sm * sub[j].gpu / float64(caps[i])
				}
				rows = append(rows, sub...)
			default:
				rows = append(rows, ledgerRow{tenant: "", gpu: float64(caps[i]), sm: sm})
			}
		}
		if len(caps) > len(insts) {
			rows = append(rows, ledgerRow{tenant: "", gpu: float64(caps[len(insts)])})
		}
	}
	var total float64
	for _, r := range rows {
		l.GPUMicroseconds[r.tenant] += uint64(r.gpu)
		if r.workload != "" {
			l.GPUMicrosecondsByWorkload[r.workload] += uint64(r.gpu)
		}
		if r.pod != "" && g.host.kube != nil {
			l.GPUMicrosecondsByPod[r.pod] += uint64(r.gpu)
		}
		total += r.gpu + r.sm
	}
	for _, r := range rows {
		l.EnergyMillijoules[r.tenant] += float64(g.lastEnergy) * (r.gpu + r.sm) / total
	}
	l.TotalEnergyMillijoules += g.lastEnergy
	l.GPUSteps++
	if g.host.kube != nil {
		l.recordGrants(g.host.kube, g, stepUs)
	}
}

// splitProcs splits a slot's time over its processes: by SM utilization
// where any ran (and perProc utilization exists), else by memory, else
// equally; in PID order, by largest remainder.
func splitProcs(procs []*Process, capacity uint64, perProc bool) []ledgerRow {
	if len(procs) == 0 {
		return nil
	}
	w := make([]uint64, len(procs))
	var sum uint64
	if perProc {
		for i, p := range procs {
			w[i] = uint64(p.util)
			sum += w[i]
		}
	}
	if sum == 0 {
		for i, p := range procs {
			w[i] = p.MemBytes >> 10
			sum += w[i]
		}
	}
	if sum == 0 {
		for i := range w {
			w[i] = 1
		}
	}
	shares := collectors.Split(nil, capacity, w)
	rows := make([]ledgerRow, len(procs))
	for i, p := range procs {
		rows[i] = ledgerRow{tenant: p.Workload.Tenant, gpu: float64(shares[i])}
		if p.Workload.Pod != nil {
			rows[i].pod = p.Workload.Pod.Namespace + "/" + p.Workload.Pod.Name
		}
		if perProc {
			rows[i].sm = min(float64(collectors.MulDiv(capacity, uint64(p.util), 100)), rows[i].gpu)
		}
	}
	return rows
}

// claimRows gives a whole GPU's step to the pods that hold it and ran
// nothing on it, equally, the larger parts first, as the collector gives
// a claimed GPU's unused time to its claimants.
func claimRows(pods []*kubePod, stepUs uint64) []ledgerRow {
	parts := collectors.SplitEqual(nil, stepUs, len(pods))
	rows := make([]ledgerRow, len(pods))
	for i, p := range pods {
		rows[i] = ledgerRow{tenant: p.tenant, pod: p.key(), gpu: float64(parts[i])}
	}
	return rows
}
