package importer

import (
	"cmp"
	"container/heap"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// MaxInterval bounds one row's interval (collectors.MaxInterval); longer
// rows are split before import. It also keeps every rate × interval
// product below 2^64 (the rates are the meter table's MaxPerSecond).
const MaxInterval = collectors.MaxInterval

// fitsRate reports whether q ≤ rate × seconds, without overflow.
func fitsRate(q, rate, seconds uint64) bool {
	whole := q / rate
	return whole < seconds || (whole == seconds && q%rate == 0)
}

// migShare is the compute slices (of gpucatalog.ComputeSlices) of a row's
// MIG instance, 0 for a whole GPU or a model without a MIG table.
func migShare(s *collectors.Sample) int {
	if s.MIGProfile == "" {
		return 0
	}
	p, ok := gpucatalog.Lookup(s.GPUModel, s.MIGProfile)
	if !ok {
		return 0
	}
	return p.ComputeSlices
}

// maxInstanceMicros is the most GPU time a MIG instance of the given
// slices holds in span: span × slices / 7, rounded up, because the
// collector splits a GPU's interval among its instances to the microsecond
// by largest remainder.
func maxInstanceMicros(span time.Duration, slices int) uint64 {
	us := uint64(span / time.Microsecond)
	return (us*uint64(slices) + gpucatalog.ComputeSlices - 1) / gpucatalog.ComputeSlices
}

// rowRef names a row for a problem: a line of an input file, or a row
// already stored.
type rowRef struct {
	file int // index into the import's files; -1 for a stored row
	line int
	id   uint64
}

// capacityJob is one row's claim on one device: work to be done between
// release and deadline (inclusive window [release, deadline)).
type capacityJob struct {
	release, deadline int64 // time units: microseconds for GPU time, seconds otherwise
	work              uint64
	slack             uint64 // taken off work for rounding (allowRounding)
	ref               rowRef
}

// capacityCheck collects every row's claim per GPU and per MIG instance
// and tests that the claims fit, together, in what the device can give.
type capacityCheck struct {
	gpus      map[string]*deviceClaims // by gpu_uuid
	instances map[string]*deviceClaims // by mig_uuid
}

type deviceClaims struct {
	uuid   string
	slices int // for an instance: its compute slices; 0 for a GPU
	jobs   [meter.Count][]capacityJob
}

func newCapacityCheck() *capacityCheck {
	return &capacityCheck{gpus: map[string]*deviceClaims{}, instances: map[string]*deviceClaims{}}
}

// add records a row that passed the single-row checks.
func (c *capacityCheck) add(s *collectors.Sample, ref rowRef) {
	g := c.gpus[s.GPUUUID]
	if g == nil {
		g = &deviceClaims{uuid: s.GPUUUID}
		c.gpus[s.GPUUUID] = g
	}
	startS, endS := s.Start.Unix(), s.End.Unix()
	for m, q := range s.Array() {
		if q == 0 || meter.Specs[m].MaxPerSecond == 0 {
			continue
		}
		j := capacityJob{release: startS, deadline: endS, work: q, ref: ref}
		if meter.ID(m) == meter.GPU {
			j.release, j.deadline = startS*1e6, endS*1e6
		}
		g.jobs[m] = append(g.jobs[m], j)
	}
	if slices := migShare(s); slices > 0 && s.GPUMicroseconds > 0 {
		in := c.instances[s.MIGUUID]
		if in == nil {
			in = &deviceClaims{uuid: s.MIGUUID, slices: slices}
			c.instances[s.MIGUUID] = in
		}
		// Work in sevenths of a GPU-microsecond, so the instance's speed
		// (its slices) is a whole number.
		in.jobs[meter.GPU] = append(in.jobs[meter.GPU], capacityJob{release: startS * 1e6, deadline: endS * 1e6, work: 7 * s.GPUMicroseconds, ref: ref})
	}
}

// overload is one window in which the rows of a device claim more than
// the device has.
type overload struct {
	device   string
	instance bool
	meter    meter.ID
	from, to int64    // time units of the meter
	claimed  *big.Int // work units of the meter
	capacity *big.Int
	rows     []rowRef // the rows inside the window, file rows first
}

// check tests every device and meter, and returns the overloads that
// involve at least one file row, at most limit of them.
func (c *capacityCheck) check(limit int) []overload {
	var out []overload
	run := func(devs map[string]*deviceClaims, instance bool) {
		for _, k := range slices.Sorted(maps.Keys(devs)) {
			d := devs[k]
			for m := range meter.Count {
				if len(d.jobs[m]) == 0 {
					continue
				}
				speed := meter.Specs[m].MaxPerSecond
				if m == meter.GPU {
					speed = 1 // GPU-microseconds per microsecond
					if instance {
						speed = uint64(d.slices)
						allowRounding(d.jobs[m])
					}
				}
				for _, o := range edf(d.jobs[m], speed, limit-len(out)) {
					o.device, o.instance, o.meter = d.uuid, instance, m
					out = append(out, o)
				}
				if len(out) >= limit {
					return
				}
			}
		}
	}
	run(c.gpus, false)
	if len(out) < limit {
		run(c.instances, true)
	}
	return out
}

// allowRounding takes off each interval's rounding: the collector gives
// an instance its share of the GPU's interval rounded up to the
// microsecond (less than 7 sevenths more), then splits exactly among the
// instance's rows. So each (start, end) of an instance gets that slack
// once, on its first row.
func allowRounding(jobs []capacityJob) {
	slices.SortFunc(jobs, func(a, b capacityJob) int {
		return cmp.Or(cmp.Compare(a.release, b.release), cmp.Compare(a.deadline, b.deadline))
	})
	for i := range jobs {
		if i == 0 || jobs[i].release != jobs[i-1].release || jobs[i].deadline != jobs[i-1].deadline {
			jobs[i].slack = min(jobs[i].work, gpucatalog.ComputeSlices-1)
			jobs[i].work -= jobs[i].slack
		}
	}
}

// edf runs the earliest-deadline-first schedule of jobs on one device of
// the given speed (work per time unit). Preemptive EDF meets every
// deadline whenever any schedule does, so a missed deadline proves the
// rows claim more than the device has. Integer arithmetic throughout:
// exact. At most one overload is reported per device and meter, the first.
func edf(jobs []capacityJob, speed uint64, limit int) []overload {
	if limit <= 0 {
		return nil
	}
	slices.SortFunc(jobs, func(a, b capacityJob) int {
		return cmp.Or(cmp.Compare(a.release, b.release), cmp.Compare(a.deadline, b.deadline))
	})
	h := &deadlineHeap{}
	remaining := make([]uint64, len(jobs))
	for i := range jobs {
		remaining[i] = jobs[i].work
	}
	next, misses := 0, 0
	var now int64
	for next < len(jobs) || h.Len() > 0 {
		if h.Len() == 0 {
			now = max(now, jobs[next].release)
		}
		for next < len(jobs) && jobs[next].release <= now {
			heap.Push(h, heapItem{idx: next, deadline: jobs[next].deadline})
			next++
		}
		top := (*h)[0]
		if now >= top.deadline {
			heap.Pop(h)
			if o, ok := witness(jobs, top.deadline, speed); ok {
				return []overload{o}
			}
			// Stored rows alone overfill this window: not the import's to
			// refuse. Give up on the device after a few such windows.
			if misses++; misses > 100 {
				return nil
			}
			continue
		}
		until := top.deadline
		if next < len(jobs) {
			until = min(until, jobs[next].release)
		}
		dt := uint64(until - now)
		need := remaining[top.idx]/speed + min(remaining[top.idx]%speed, 1)
		if need <= dt {
			heap.Pop(h)
			now += int64(need)
			remaining[top.idx] = 0
			continue
		}
		remaining[top.idx] -= dt * speed
		now = until
	}
	return nil
}

// witness finds, for a deadline EDF missed, the window [from, to] whose
// rows (released at or after from, due by to) claim more than the device
// does in it: the smallest such window that holds a file row. It runs only
// on a miss, so it may use big integers (claims can pass 2^64).
func witness(jobs []capacityJob, to int64, speed uint64) (overload, bool) {
	var in []capacityJob
	for _, j := range jobs {
		if j.deadline <= to && j.release < to {
			in = append(in, j)
		}
	}
	slices.SortFunc(in, func(a, b capacityJob) int { return cmp.Compare(b.release, a.release) })
	claimed, capacity, slack := new(big.Int), new(big.Int), new(big.Int)
	var w big.Int
	fileRows := 0
	for i, j := range in {
		claimed.Add(claimed, w.SetUint64(j.work))
		slack.Add(slack, w.SetUint64(j.slack))
		if j.ref.file >= 0 {
			fileRows++
		}
		if i+1 < len(in) && in[i+1].release == j.release {
			continue
		}
		capacity.SetUint64(uint64(to - j.release))
		capacity.Mul(capacity, w.SetUint64(speed))
		if fileRows > 0 && claimed.Cmp(capacity) > 0 {
			// Report what the rows hold, the rounding allowance included.
			o := overload{from: j.release, to: to, claimed: claimed.Add(claimed, slack), capacity: capacity}
			for _, r := range in[:i+1] {
				o.rows = append(o.rows, r.ref)
			}
			slices.SortFunc(o.rows, func(a, b rowRef) int {
				// File rows first, in file and line order; stored rows last.
				return cmp.Or(cmp.Compare(storedLast(a), storedLast(b)), cmp.Compare(a.file, b.file), cmp.Compare(a.line, b.line))
			})
			return o, true
		}
	}
	return overload{}, false
}

func storedLast(r rowRef) int {
	if r.file < 0 {
		return 1
	}
	return 0
}

type heapItem struct {
	idx      int
	deadline int64
}

type deadlineHeap []heapItem

func (h deadlineHeap) Len() int { return len(h) }
func (h deadlineHeap) Less(i, j int) bool {
	return h[i].deadline < h[j].deadline || (h[i].deadline == h[j].deadline && h[i].idx < h[j].idx)
}
func (h deadlineHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)   { *h = append(*h, x.(heapItem)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// describe words an overload for the operator, in the file's units.
func (o overload) describe(files []File) string {
	what := "GPU " + o.device
	var claimed, capacity string
	var from, to time.Time
	switch o.meter {
	case meter.GPU:
		from, to = time.UnixMicro(o.from).UTC(), time.UnixMicro(o.to).UTC()
		div := int64(1)
		if o.instance {
			// Work and capacity are in sevenths of a GPU-microsecond.
			what, div = "MIG instance "+o.device, gpucatalog.ComputeSlices
		}
		claimed, capacity = scaled(o.claimed, div, 6)+" GPU-seconds", scaled(o.capacity, div, 6)+" GPU-seconds"
	case meter.Energy:
		from, to = time.Unix(o.from, 0).UTC(), time.Unix(o.to, 0).UTC()
		claimed, capacity = scaled(o.claimed, 1, 3)+" J", scaled(o.capacity, 1, 3)+" J"
	case meter.Memory:
		from, to = time.Unix(o.from, 0).UTC(), time.Unix(o.to, 0).UTC()
		claimed, capacity = o.claimed.String()+" MiB-seconds", o.capacity.String()+" MiB-seconds"
	default:
		from, to = time.Unix(o.from, 0).UTC(), time.Unix(o.to, 0).UTC()
		claimed, capacity = o.claimed.String()+" bytes", o.capacity.String()+" bytes"
	}
	var refs []string
	fileRows, stored := 0, 0
	for _, r := range o.rows {
		if r.file < 0 {
			stored++
			continue
		}
		if fileRows++; len(refs) < 8 {
			refs = append(refs, fmt.Sprintf("%s:%d", files[r.file].Path, r.line))
		}
	}
	list := strings.Join(refs, ", ")
	if fileRows > len(refs) {
		list += fmt.Sprintf(" and %d more", fileRows-len(refs))
	}
	if stored > 0 {
		list += fmt.Sprintf(", with %d row(s) already stored", stored)
	}
	return fmt.Sprintf("%s from %s to %s: the rows together claim %s of %s, more than the %s it has (%s)",
		what, from.Format(time.RFC3339), to.Format(time.RFC3339), claimed, meter.Specs[o.meter].File, capacity, list)
}

// scaled writes x / div as a decimal with the given fractional digits
// (x counts 10^-digits units), rounded down.
func scaled(x *big.Int, div int64, digits int) string {
	q := new(big.Int).Quo(x, big.NewInt(div))
	s := q.String()
	if len(s) <= digits {
		s = strings.Repeat("0", digits-len(s)+1) + s
	}
	return s[:len(s)-digits] + "." + s[len(s)-digits:]
}

func fixed6(us uint64) string { return fmt.Sprintf("%d.%06d", us/1e6, us%1e6) }
