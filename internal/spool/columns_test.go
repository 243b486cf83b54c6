package spool

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// Columns.Validate agrees with collectors.Sample.Validate on every row,
// at the edges its column check decides on: ids, required strings, times
// at the storable range's ends, intervals at MaxInterval, sub-second
// intervals, unknown flags, a workload without a tenant.
func TestColumnsValidateAgreesWithSampleValidate(t *testing.T) {
	base := testBatch(0, 1)[0]
	at := func(sec int64, nsec int64) time.Time { return time.Unix(sec, nsec).UTC() }
	maxSec := collectors.MaxTime.Unix()
	cases := map[string]func(*collectors.Sample){
		"valid":                   func(*collectors.Sample) {},
		"no id":                   func(s *collectors.Sample) { s.ID = 0 },
		"no host":                 func(s *collectors.Sample) { s.Host = "" },
		"no gpu":                  func(s *collectors.Sample) { s.GPUUUID = "" },
		"no sku":                  func(s *collectors.Sample) { s.SKU = "" },
		"idle row":                func(s *collectors.Sample) { s.Tenant, s.Workload, s.Department = "", "", "" },
		"workload without tenant": func(s *collectors.Sample) { s.Tenant = "" },
		"unknown flag":            func(s *collectors.Sample) { s.Unmeasured = meter.UnmeasuredAll + 1 },
		"all flags":               func(s *collectors.Sample) { s.Unmeasured = meter.UnmeasuredAll },
		"end before start":        func(s *collectors.Sample) { s.Start, s.End = s.End, s.Start },
		"empty interval":          func(s *collectors.Sample) { s.End = s.Start },
		"sub-second, same second": func(s *collectors.Sample) { s.Start, s.End = at(1000, 1), at(1000, 2) },
		"sub-second, next second": func(s *collectors.Sample) { s.Start, s.End = at(1000, 999_999_999), at(1001, 0) },
		"nanos end before start":  func(s *collectors.Sample) { s.Start, s.End = at(1000, 5), at(1000, 4) },
		"at MinTime": func(s *collectors.Sample) {
			s.Start, s.End = collectors.MinTime, collectors.MinTime.Add(10*time.Second)
		},
		"before MinTime":             func(s *collectors.Sample) { s.Start, s.End = at(-1, 999_999_999), at(9, 0) },
		"ends at MaxTime":            func(s *collectors.Sample) { s.Start, s.End = at(maxSec-10, 0), collectors.MaxTime },
		"ends after MaxTime":         func(s *collectors.Sample) { s.Start, s.End = at(maxSec-10, 0), at(maxSec, 1) },
		"starts at MaxTime":          func(s *collectors.Sample) { s.Start, s.End = collectors.MaxTime, at(maxSec, 1) },
		"interval is MaxInterval":    func(s *collectors.Sample) { s.End = s.Start.Add(collectors.MaxInterval) },
		"interval over MaxInterval":  func(s *collectors.Sample) { s.End = s.Start.Add(collectors.MaxInterval + time.Nanosecond) },
		"interval under MaxInterval": func(s *collectors.Sample) { s.End = s.Start.Add(collectors.MaxInterval - time.Nanosecond) },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			s := base
			mutate(&s)
			var c Columns
			c.AppendSamples([]collectors.Sample{base, s, base})
			want := s.Validate()
			got := c.Validate()
			if (got == nil) != (want == nil) {
				t.Fatalf("Columns.Validate: %v, Sample.Validate: %v", got, want)
			}
			if want != nil && (!strings.Contains(got.Error(), "sample 1 ") || !strings.Contains(got.Error(), want.Error())) {
				t.Errorf("error %q does not name row 1 and %q", got, want)
			}
		})
	}
}

// The same on random rows near every bound the column check uses.
func TestColumnsValidateRandomRows(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	base := testBatch(0, 1)[0]
	maxSec := collectors.MaxTime.Unix()
	maxIv := int64(collectors.MaxInterval / time.Second)
	secs := []int64{-1, 0, 1, 1_700_000_000, maxSec - maxIv - 1, maxSec - 2, maxSec - 1, maxSec, maxSec + 1}
	spans := []int64{-1, 0, 1, 10, maxIv - 1, maxIv, maxIv + 1}
	nanos := []int64{0, 1, 999_999_999}
	for i := range 20_000 {
		s := base
		ss := secs[r.IntN(len(secs))]
		s.Start = time.Unix(ss, nanos[r.IntN(len(nanos))]).UTC()
		s.End = time.Unix(ss+spans[r.IntN(len(spans))], nanos[r.IntN(len(nanos))]).UTC()
		if r.IntN(8) == 0 {
			s.Unmeasured = meter.Unmeasured(r.IntN(256))
		}
		if r.IntN(8) == 0 {
			s.Tenant = ""
		}
		if r.IntN(16) == 0 {
			s.ID = 0
		}
		var c Columns
		c.AppendSamples([]collectors.Sample{s})
		if got, want := c.Validate(), s.Validate(); (got == nil) != (want == nil) {
			t.Fatalf("row %d %+v: Columns.Validate %v, Sample.Validate %v", i, s, got, want)
		}
	}
}

// Columns built by hand may hold nanoseconds of a second or more, which
// Row carries into the seconds: the column check must not pass such a row
// on its seconds alone.
func TestColumnsValidateNanosecondsOfASecondOrMore(t *testing.T) {
	base := testBatch(0, 1)[0]
	for name, set := range map[string]func(c *Columns){
		"start carried past end": func(c *Columns) {
			c.StartSeconds[0], c.StartNanos[0], c.EndSeconds[0], c.EndNanos[0] = 1000, 2e9, 1001, 0
		},
		"end carried past MaxTime": func(c *Columns) { c.EndSeconds[0], c.EndNanos[0] = collectors.MaxTime.Unix()-1, 4e9 },
		"interval carried over MaxInterval": func(c *Columns) {
			c.EndSeconds[0], c.EndNanos[0] = c.StartSeconds[0]+int64(collectors.MaxInterval/time.Second)-1, 3e9
		},
	} {
		t.Run(name, func(t *testing.T) {
			var c Columns
			c.AppendSamples([]collectors.Sample{base})
			set(&c)
			want := c.Row(0).Validate()
			if want == nil {
				t.Fatalf("fixture: Sample.Validate passes %+v", c.Row(0))
			}
			if got := c.Validate(); got == nil || !strings.Contains(got.Error(), want.Error()) {
				t.Errorf("Columns.Validate: %v, want %v", got, want)
			}
		})
	}
}

// Grow keeps every row and makes room for n more rows in every column, so
// that appending them moves nothing.
func TestColumnsGrow(t *testing.T) {
	var c Columns
	c.AppendSamples(testBatch(0, 10))
	before := make([]collectors.Sample, c.Len())
	for i := range before {
		before[i] = c.Row(i)
	}
	c.Grow(1000)
	for i := range before {
		if got := c.Row(i); got != before[i] {
			t.Fatalf("row %d after Grow = %+v, want %+v", i, got, before[i])
		}
	}
	first := func() []*uint64 {
		out := []*uint64{&c.IDs[0]}
		for m := range c.Meters {
			out = append(out, &c.Meters[m][0])
		}
		return out
	}
	was := first()
	caps := []int{cap(c.IDs), cap(c.StartSeconds), cap(c.EndSeconds), cap(c.StartNanos), cap(c.EndNanos), cap(c.Unmeasured)}
	for j := range c.Strings {
		caps = append(caps, cap(c.Strings[j]))
	}
	for m := range c.Meters {
		caps = append(caps, cap(c.Meters[m]))
	}
	for k, n := range caps {
		if n < 1010 {
			t.Fatalf("column %d has room for %d rows after Grow(1000) of 10, want 1010", k, n)
		}
	}
	c.AppendSamples(testBatch(1, 1000))
	for k, p := range first() {
		if p != was[k] {
			t.Fatalf("column %d moved while appending the rows Grow made room for", k)
		}
	}
	if c.Len() != 1010 || c.Row(1009).ID == 0 {
		t.Fatalf("after append: %d rows", c.Len())
	}
}
