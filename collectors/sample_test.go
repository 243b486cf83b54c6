package collectors

import (
	"testing"
	"time"
)

func TestSampleIDIsStableAndDistinct(t *testing.T) {
	start := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	id := SampleID("dgx-01", "GPU-a", "acme", "job-1", start)
	// Pinned: ids are stored, so the hash must never change across releases.
	if id != 16268145001240322047 {
		t.Fatalf("SampleID changed: %d", id)
	}
	if id != SampleID("dgx-01", "GPU-a", "acme", "job-1", start.In(time.FixedZone("x", 3600))) {
		t.Fatal("same instant in another zone gave another id")
	}
	for name, other := range map[string]uint64{
		"parts shifted": SampleID("dgx-0", "1GPU-a", "acme", "job-1", start),
		"tenant":        SampleID("dgx-01", "GPU-a", "globex", "job-1", start),
		"start":         SampleID("dgx-01", "GPU-a", "acme", "job-1", start.Add(10*time.Second)),
		"device":        SampleID("dgx-01", "GPU-b", "acme", "job-1", start),
	} {
		if other == id {
			t.Errorf("%s: collision with the base id", name)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { SampleID("dgx-01", "GPU-a", "acme", "job-1", start) }); allocs != 0 {
		t.Errorf("SampleID allocates %v times per call", allocs)
	}
}

func TestValidateRejectsTimesClickHouseCannotStore(t *testing.T) {
	s := Sample{ID: 1, Host: "h", GPUUUID: "G", SKU: "X",
		Start: time.Date(1969, 12, 31, 23, 59, 50, 0, time.UTC), End: time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)}
	if err := s.Validate(); err == nil {
		t.Fatal("a start before 1970 was accepted")
	}
	s.Start, s.End = time.Date(2106, 2, 7, 6, 28, 10, 0, time.UTC), time.Date(2106, 2, 7, 6, 28, 20, 0, time.UTC)
	if err := s.Validate(); err == nil {
		t.Fatal("an end past 2106-02-07 06:28:15 was accepted")
	}
	s.Start, s.End = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}
