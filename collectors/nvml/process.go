package nvml

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/collectors"
)

// notAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned long long: the
// driver could not tell a process's memory (e.g. under some containers).
const notAvailable = ^uint64(0)

// procState is what the collector remembers about a process between reads.
type procState struct {
	mem        uint64 // memory at the last read
	gi, ci     uint32
	running    bool   // listed at the last read
	lastSample uint64 // µs timestamp of its last utilization sample
	gen        uint32 // last read that listed it
}

// utilAgg sums one process's utilization samples within one interval.
type utilAgg struct {
	sum         uint64 // of SM utilization percentages
	n           uint32
	first, last uint64 // µs timestamps
	used        bool   // turned into a process already this read
}

func (a utilAgg) ratio() collectors.Ratio {
	if a.n == 0 {
		// No sample: the process did not use the SMs in the interval.
		return collectors.Ratio{OK: true}
	}
	return percentRatio(float64(a.sum) / float64(a.n))
}

// processTable is the per-GPU process state.
type processTable struct {
	procs    map[uint32]procState
	util     map[uint32]utilAgg
	lastSeen uint64 // cursor for nvmlDeviceGetProcessUtilization
	gen      uint32
}

func newProcessTable() processTable {
	return processTable{procs: make(map[uint32]procState), util: make(map[uint32]utilAgg)}
}

func (t *processTable) forget() {
	clear(t.procs)
	clear(t.util)
	t.lastSeen = 0
}

// readProcesses lists the compute processes and works out, for each, when
// in the interval it existed, the memory it held and its SM utilization.
// Processes that exited since the last read come from the last read's list;
// short-lived ones that came and went between reads from their utilization
// samples.
func (c *Collector) readProcesses(d *device, r *collectors.GPUReading, iv interval) error {
	list, ret := d.handle.GetComputeRunningProcesses()
	if err := c.check("nvmlDeviceGetComputeRunningProcesses", ret); err != nil {
		return err
	}
	util, err := c.readProcessUtilization(d, r, iv)
	if err != nil {
		return err
	}
	r.ProcessUtilization = util
	t := &d.procs
	t.gen++

	for _, p := range list {
		st, known := t.procs[p.Pid]
		if known && st.gen == t.gen {
			continue // listed twice
		}
		mem := p.UsedGpuMemory
		if mem == notAvailable {
			mem = 0
		}
		wasRunning := iv.prevKnown && known && st.running
		agg := t.util[p.Pid]
		from, to := presence(iv, wasRunning, true, agg, st.lastSample)
		proc := collectors.Process{
			PID:          p.Pid,
			MIGUUID:      d.migFor(r, p.GpuInstanceId, p.ComputeInstanceId),
			ActiveFrom:   from,
			ActiveTo:     to,
			MemBytes:     mem,
			MemPeakBytes: mem,
		}
		if wasRunning {
			// Memory is read at both ends of the interval: the mean of the
			// two approximates what was held in between.
			proc.MemBytes = st.mem/2 + mem/2 + (st.mem&mem)&1
			proc.MemPeakBytes = max(st.mem, mem)
		}
		if util {
			proc.SMUtil = agg.ratio()
		}
		r.Processes = append(r.Processes, proc)
		if agg.n > 0 {
			agg.used = true
			t.util[p.Pid] = agg
		}
		t.procs[p.Pid] = procState{
			mem: mem, gi: p.GpuInstanceId, ci: p.ComputeInstanceId, running: true,
			lastSample: max(st.lastSample, agg.last), gen: t.gen,
		}
	}

	// Exited since the last read.
	for pid, st := range t.procs {
		if st.gen == t.gen {
			continue
		}
		delete(t.procs, pid)
		if !iv.prevKnown || !st.running {
			continue
		}
		agg := t.util[pid]
		from, to := presence(iv, true, false, agg, st.lastSample)
		proc := collectors.Process{
			PID:          pid,
			MIGUUID:      d.migFor(r, st.gi, st.ci),
			ActiveFrom:   from,
			ActiveTo:     to,
			MemBytes:     st.mem,
			MemPeakBytes: st.mem,
		}
		if util {
			proc.SMUtil = agg.ratio()
		}
		r.Processes = append(r.Processes, proc)
		if agg.n > 0 {
			agg.used = true
			t.util[pid] = agg
		}
	}

	// Came and went between two reads: only their samples tell.
	for pid, agg := range t.util {
		if agg.used || agg.n == 0 {
			continue
		}
		from, to := presence(iv, false, false, agg, 0)
		r.Processes = append(r.Processes, collectors.Process{
			PID: pid, ActiveFrom: from, ActiveTo: to, SMUtil: agg.ratio(),
		})
	}
	slices.SortFunc(r.Processes, func(a, b collectors.Process) int { return cmp.Compare(a.PID, b.PID) })
	return nil
}

// readProcessUtilization aggregates the per-process SM utilization samples
// that fall in (start, end]. It reports whether utilization was read; only
// a lost GPU is an error, anything else falls back to splitting by memory.
func (c *Collector) readProcessUtilization(d *device, r *collectors.GPUReading, iv interval) (bool, error) {
	t := &d.procs
	clear(t.util)
	if r.MIG || !c.cfg.ProcessUtilization || d.off&sigProcessUtilization != 0 {
		return false, nil
	}
	samples, ret := d.handle.GetProcessUtilization(t.lastSeen)
	err := c.check("nvmlDeviceGetProcessUtilization", ret, nvml.ERROR_NOT_FOUND, nvml.ERROR_INSUFFICIENT_SIZE)
	var ne *Error
	switch {
	case err == nil:
	case errors.Is(err, ErrGPULost):
		return false, err
	case errors.Is(err, collectors.ErrNoData):
		return true, nil // no process used the SMs since the last read
	case errors.As(err, &ne) && ne.ret == nvml.ERROR_INSUFFICIENT_SIZE && len(samples) == 0:
		return true, nil // go-nvml's answer for "no samples"
	case errors.Is(err, collectors.ErrNotSupported):
		d.off |= sigProcessUtilization
		c.logger.Debug("per-process utilization not supported; time-sliced use is split by memory", "gpu_uuid", d.gpu.UUID, "err", err)
		return false, nil
	default:
		c.logger.Warn("per-process utilization not read; split by memory this interval", "gpu_uuid", d.gpu.UUID, "err", err)
		return false, nil
	}
	startUs, endUs := micros(iv.start), micros(iv.end)
	cursor := t.lastSeen
	for _, s := range samples {
		if s.TimeStamp > endUs {
			continue // the next interval's; read again then
		}
		cursor = max(cursor, s.TimeStamp)
		if s.TimeStamp <= startUs {
			continue // an earlier interval's
		}
		a := t.util[s.Pid]
		a.sum += uint64(min(s.SmUtil, 100))
		a.n++
		if a.first == 0 || s.TimeStamp < a.first {
			a.first = s.TimeStamp
		}
		a.last = max(a.last, s.TimeStamp)
		t.util[s.Pid] = a
	}
	t.lastSeen = cursor
	return true, nil
}

// presence decides when in the interval a process existed:
//   - listed at both reads: the whole interval;
//   - listed now only (started): from its first utilization sample in the
//     interval, else from the interval's midpoint (unknown: the expected
//     value);
//   - listed before only (exited): until its last utilization sample,
//     wherever that lies, else until the midpoint;
//   - listed at neither: between its first and last samples.
//
// Without a baseline (first read, after an outage) a listed process is
// taken to have run the whole interval.
func presence(iv interval, wasRunning, running bool, agg utilAgg, lastEver uint64) (from, to time.Time) {
	from, to = iv.start, iv.end
	switch {
	case wasRunning && running:
	case running:
		if !iv.prevKnown {
			break
		}
		if agg.n > 0 {
			from = clampMicros(agg.first, iv)
		} else {
			from = iv.mid()
		}
	case wasRunning:
		last := max(agg.last, lastEver)
		if last > 0 {
			to = clampMicros(last, iv)
		} else {
			to = iv.mid()
		}
	default:
		from, to = clampMicros(agg.first, iv), clampMicros(agg.last, iv)
	}
	if to.Before(from) {
		to = from
	}
	return from, to
}

func micros(t time.Time) uint64 {
	us := t.UnixMicro()
	if us < 0 {
		return 0
	}
	return uint64(us)
}

func clampMicros(us uint64, iv interval) time.Time {
	t := time.UnixMicro(int64(min(us, 1<<62))).UTC()
	if t.Before(iv.start) {
		return iv.start
	}
	if t.After(iv.end) {
		return iv.end
	}
	return t
}

// migFor names the MIG device of a process from its GPU and compute
// instance ids.
func (d *device) migFor(r *collectors.GPUReading, gi, ci uint32) string {
	if !r.MIG {
		return ""
	}
	if uuid, ok := d.migByID[migKey(gi, ci)]; ok {
		return uuid
	}
	// Some drivers report no compute instance id: accept the GPU instance
	// when it holds a single MIG device.
	uuid := ""
	for i := range r.Instances {
		if r.Instances[i].GPUInstanceID == gi {
			if uuid != "" {
				return ""
			}
			uuid = r.Instances[i].UUID
		}
	}
	return uuid
}
