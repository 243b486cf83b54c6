package importer

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
)

func TestEDFCapacity(t *testing.T) {
	// Jobs in seconds, work in units of speed 1 per second.
	job := func(release, deadline int64, work uint64) capacityJob {
		return capacityJob{release: release, deadline: deadline, work: work, ref: rowRef{file: 0, line: int(release)}}
	}
	stored := func(j capacityJob) capacityJob { j.ref.file = -1; return j }
	cases := []struct {
		name     string
		jobs     []capacityJob
		speed    uint64
		overload bool
		from, to int64
	}{
		{"one job fills its window", []capacityJob{job(0, 10, 10)}, 1, false, 0, 0},
		{"two jobs share a window exactly", []capacityJob{job(0, 10, 4), job(0, 10, 6)}, 1, false, 0, 0},
		{"two jobs overfill a window", []capacityJob{job(0, 10, 10), job(0, 10, 1)}, 1, true, 0, 10},
		{"tiling intervals each full", []capacityJob{job(0, 10, 10), job(10, 20, 10), job(20, 30, 10)}, 1, false, 0, 0},
		// A long row can take its time after a short row that fills the start:
		// a uniform-rate check would refuse this.
		{"long row fits around a full short row", []capacityJob{job(0, 20, 10), job(0, 10, 10)}, 1, false, 0, 0},
		{"long row does not fit around two", []capacityJob{job(0, 20, 11), job(0, 10, 5), job(10, 20, 5)}, 1, true, 0, 20},
		{"the smallest overfull window is named", []capacityJob{job(0, 100, 1), job(50, 60, 7), job(55, 60, 4)}, 1, true, 50, 60},
		{"speed counts", []capacityJob{job(0, 10, 30), job(0, 10, 40)}, 7, false, 0, 0},
		{"speed counts, overfull", []capacityJob{job(0, 10, 30), job(0, 10, 41)}, 7, true, 0, 10},
		{"gap between busy periods", []capacityJob{job(0, 10, 10), job(100, 110, 11)}, 1, true, 100, 110},
		{"stored rows alone are not the file's fault", []capacityJob{stored(job(0, 10, 10)), stored(job(0, 10, 10)), job(20, 30, 10)}, 1, false, 0, 0},
		{"stored rows with a file row are", []capacityJob{stored(job(0, 10, 10)), job(0, 10, 1)}, 1, true, 0, 10},
		{"huge claims do not wrap", []capacityJob{job(0, 10, 1<<63), job(0, 10, 1<<63), job(0, 10, 1<<63)}, 1 << 61, true, 0, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := edf(append([]capacityJob(nil), tc.jobs...), tc.speed, 10)
			if (len(got) > 0) != tc.overload {
				t.Fatalf("overloads = %+v, want overload %v", got, tc.overload)
			}
			if !tc.overload {
				return
			}
			o := got[0]
			if o.from != tc.from || o.to != tc.to || o.claimed.Cmp(o.capacity) <= 0 || o.rows[0].file < 0 {
				t.Fatalf("overload %d..%d claimed %s of %s, rows %+v; want window %d..%d, more claimed than there is, a file row first",
					o.from, o.to, o.claimed, o.capacity, o.rows, tc.from, tc.to)
			}
		})
	}
}

// The collector splits a MIG GPU's interval among its instances to the
// microsecond by largest remainder, so an instance may hold up to one
// microsecond more than its exact share: that must never be refused.
func TestCapacityAcceptsTheCollectorsMIGRounding(t *testing.T) {
	start := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	c := newCapacityCheck()
	for i := 0; i < 100; i++ {
		st := start.Add(time.Duration(i) * 10 * time.Second)
		// Seven 1g instances of 10 s: 10,000,000 µs split 1,428,572 ×6 + 1,428,568.
		for k := 0; k < 7; k++ {
			us := uint64(1_428_572)
			if k == 6 {
				us = 1_428_568
			}
			// Two processes share each instance's slot, again to the microsecond.
			for p, part := range []uint64{us/2 + us%2, us / 2} {
				s := collectors.Sample{
					Host:       "h",
					GPUUUID:    "GPU-1",
					GPUModel:   "H100-SXM5-80GB",
					MIGUUID:    "MIG-" + string(rune('a'+k)),
					MIGProfile: "1g.10gb",
					Tenant:     "t" + string(rune('a'+p)),
					Start:      st,
					End:        st.Add(10 * time.Second),
					Values:     meter.Values{GPUMicroseconds: part},
				}
				c.add(&s, rowRef{file: 0, line: i*14 + k*2 + p + 2})
			}
		}
	}
	if got := c.check(10); len(got) != 0 {
		t.Fatalf("refused the collector's own rounding: %s", got[0].describe([]File{{Path: "f.csv"}}))
	}
	// An instance's rows one microsecond past the rounding slack are
	// refused, though the GPU as a whole has room.
	c = newCapacityCheck()
	for i, us := range []uint64{1_428_572, 1} {
		s := collectors.Sample{
			Host:       "h",
			GPUUUID:    "GPU-2",
			GPUModel:   "H100-SXM5-80GB",
			MIGUUID:    "MIG-a",
			MIGProfile: "1g.10gb",
			Tenant:     "x" + string(rune('a'+i)),
			Start:      start,
			End:        start.Add(10 * time.Second),
			Values:     meter.Values{GPUMicroseconds: us},
		}
		c.add(&s, rowRef{file: 0, line: i + 2})
	}
	got := c.check(10)
	if len(got) == 0 {
		t.Fatal("an instance holding more than its share was accepted")
	}
	msg := got[0].describe([]File{{Path: "f.csv"}})
	for _, want := range []string{"MIG instance MIG-a", "2026-11-01T10:00:00Z", "gpu_seconds", "f.csv:"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not name %q", msg, want)
		}
	}
}
